#!/usr/bin/env node
// Drives a running memmachine server with the stock Node.js gRPC client (@grpc/grpc-js).
//
// The service definitions are loaded at run time from ../../proto with
// @grpc/proto-loader, as any Node.js user would, so this proves that the .proto files
// alone are enough for a second foreign language.
//
// Usage: node node_client.js --addr HOST:PORT
//
// The npm packages are taken from $MEMMACHINE_TEST_NODE_MODULES (a node_modules
// directory), else .tools/node/node_modules (scripts/setup-test-tools.sh installs them).
// Exits 0 when every check passes; otherwise prints what failed and exits 1.
// Run by tests/it/external_clients.rs.
"use strict";

const path = require("path");
const { createRequire } = require("module");

const ROOT = path.resolve(__dirname, "..", "..");
const PROTO_ROOT = path.join(ROOT, "proto");
const PROTO_FILES = [
  "memmachine/v2/common.proto",
  "memmachine/v2/project_service.proto",
  "memmachine/v2/memory_service.proto",
];
const GOOGLE_RPC_PROTO = path.join(__dirname, "google_rpc.proto");
const SETUP_HINT =
  "run scripts/setup-test-tools.sh to install @grpc/grpc-js and @grpc/proto-loader " +
  "under .tools/node (or set MEMMACHINE_TEST_NODE_MODULES)";
const TIMEOUT_MS = 30000;

class CheckFailed extends Error {}

function check(condition, message) {
  if (!condition) throw new CheckFailed(message);
}

/// `require` rooted at the tools' node_modules, not at this file's directory.
function toolsRequire() {
  const modules =
    process.env.MEMMACHINE_TEST_NODE_MODULES ||
    path.join(ROOT, ".tools", "node", "node_modules");
  return createRequire(path.join(path.dirname(path.resolve(modules)), "package.json"));
}

function parseArgs(argv) {
  const i = argv.indexOf("--addr");
  if (i < 0 || !argv[i + 1]) {
    console.error("usage: node node_client.js --addr HOST:PORT");
    process.exit(2);
  }
  return { addr: argv[i + 1] };
}

function deadline() {
  return new Date(Date.now() + TIMEOUT_MS);
}

/// Calls the unary `method` of `client` and resolves with its response.
function call(client, method, request) {
  return new Promise((resolve, reject) => {
    client[method](request, { deadline: deadline() }, (err, response) =>
      err ? reject(err) : resolve(response),
    );
  });
}

/// Calls `method`, expects it to fail with `code`; resolves with the ServiceError.
async function expectError(grpc, client, method, request, code, what) {
  let response;
  try {
    response = await call(client, method, request);
  } catch (err) {
    check(
      err.code === code,
      `${what}: expected ${grpc.status[code]}, got ${grpc.status[err.code]} (${err.details})`,
    );
    return err;
  }
  throw new CheckFailed(
    `${what}: expected ${grpc.status[code]}, but the call succeeded: ${JSON.stringify(response)}`,
  );
}

/// Decodes grpc-status-details-bin from the trailers as google.rpc.Status and returns the
/// field violations of its google.rpc.BadRequest details.
function badRequestViolations(rpcTypes, err, what) {
  const raw = err.metadata.get("grpc-status-details-bin");
  check(raw.length === 1, `${what}: ${raw.length} grpc-status-details-bin trailers, expected 1`);
  const status = rpcTypes.Status.decode(raw[0]);
  check(
    status.code === err.code,
    `${what}: google.rpc.Status code ${status.code} differs from the gRPC status ${err.code}`,
  );
  check(
    status.message === err.details,
    `${what}: google.rpc.Status message ${JSON.stringify(status.message)} differs from ` +
      `grpc-message ${JSON.stringify(err.details)}`,
  );
  const violations = [];
  for (const detail of status.details) {
    if (detail.type_url === "type.googleapis.com/google.rpc.BadRequest") {
      violations.push(...rpcTypes.BadRequest.decode(detail.value).field_violations);
    }
  }
  check(
    violations.length > 0,
    `${what}: google.rpc.Status carries no BadRequest field violation: ` +
      JSON.stringify(status.details.map((d) => d.type_url)),
  );
  for (const v of violations) {
    check(v.field && v.description, `${what}: incomplete field violation ${JSON.stringify(v)}`);
  }
  return violations;
}

function describeViolations(violations) {
  return JSON.stringify(violations.map((v) => [v.field, v.description]));
}

async function run(addr, req) {
  const grpc = req("@grpc/grpc-js");
  const protoLoader = req("@grpc/proto-loader");
  const protobuf = req("protobufjs");

  // The options the grpc-js examples use: field names as written in the .proto,
  // int64 as decimal strings, enums by name.
  const definition = protoLoader.loadSync(PROTO_FILES, {
    includeDirs: [PROTO_ROOT],
    keepCase: true,
    longs: String,
    enums: String,
    defaults: true,
    oneofs: true,
  });
  const v2 = grpc.loadPackageDefinition(definition).memmachine.v2;
  console.log(`loaded ${PROTO_FILES.join(", ")} from ${PROTO_ROOT}`);

  const rpcRoot = new protobuf.Root().loadSync(GOOGLE_RPC_PROTO, { keepCase: true });
  rpcRoot.resolveAll();
  // Decoded to plain objects with the .proto's field names, like keepCase above.
  const decoder = (name) => {
    const type = rpcRoot.lookupType(name);
    return (bytes) => type.toObject(type.decode(bytes), { defaults: true, longs: String });
  };
  const rpcTypes = {
    Status: { decode: decoder("google.rpc.Status") },
    BadRequest: { decode: decoder("google.rpc.BadRequest") },
  };

  const credentials = grpc.credentials.createInsecure();
  const projects = new v2.ProjectService(addr, credentials);
  const memory = new v2.MemoryService(addr, credentials);
  await new Promise((resolve, reject) =>
    projects.waitForReady(deadline(), (err) => (err ? reject(err) : resolve())),
  );

  // Empty ids mean "universal"; universal/universal always exists.
  const universal = (await call(projects, "GetProject", {})).project;
  check(
    universal.org_id === "universal" && universal.project_id === "universal",
    `GetProject({}) returned ${universal.org_id}/${universal.project_id}, expected universal/universal`,
  );

  const org = "node-org";
  const project = `node-${Math.random().toString(16).slice(2, 14)}`;

  // --- CreateProject / GetProject ------------------------------------------------------
  const created = (
    await call(projects, "CreateProject", {
      org_id: org,
      project_id: project,
      description: "node client",
    })
  ).project;
  check(
    created.org_id === org && created.project_id === project,
    `CreateProject returned ${created.org_id}/${created.project_id}`,
  );
  check(created.description === "node client", `description ${JSON.stringify(created.description)}`);
  check(Number(created.created_at?.seconds) > 0, `CreateProject created_at ${JSON.stringify(created.created_at)}`);
  const got = (await call(projects, "GetProject", { org_id: org, project_id: project })).project;
  check(got.project_id === project, `GetProject returned ${JSON.stringify(got)}`);
  console.log(`created project ${org}/${project}`);

  // --- AddMemories ---------------------------------------------------------------------
  const texts = [
    ["alice", "user", "I went hiking in the Swiss mountains last weekend", "travel"],
    ["bob", "assistant", "My favourite dish is spicy ramen with a soft boiled egg", "food"],
    ["alice", "user", "The quarterly budget review meeting moved to Tuesday", "work"],
  ];
  const added = await call(memory, "AddMemories", {
    org_id: org,
    project_id: project,
    types: ["MEMORY_TYPE_EPISODIC"],
    messages: texts.map(([producer, role, content, topic], i) => ({
      content,
      producer,
      produced_for: "agent",
      role,
      metadata: { topic },
      // A fixed time a minute apart, as an int64 string like longs: String reads it.
      timestamp: { seconds: String(1767323045 + 60 * i), nanos: 0 },
    })),
  });
  const uids = added.results.map((r) => r.uid);
  check(uids.length === 3, `AddMemories returned ${uids.length} results, expected 3`);
  check(
    uids.every((u) => u) && new Set(uids).size === 3,
    `AddMemories uids not unique and non-empty: ${uids}`,
  );
  console.log(`added 3 messages: ${uids}`);

  // --- SearchMemories ------------------------------------------------------------------
  const found = await call(memory, "SearchMemories", {
    org_id: org,
    project_id: project,
    query: "spicy ramen",
    top_k: 5,
    types: ["MEMORY_TYPE_EPISODIC"],
  });
  const ltm = found.episodic_memory?.long_term_memory ?? [];
  check(ltm.length > 0, `SearchMemories found no long-term memory: ${JSON.stringify(found)}`);
  const top = ltm[0].episode;
  check(top.uid === uids[1], `top hit ${top.uid} (${JSON.stringify(top.content)}), expected ${uids[1]}`);
  check(top.content === texts[1][2], `top hit content ${JSON.stringify(top.content)}`);
  check(top.producer_id === "bob" && top.producer_role === "assistant", `top hit producer ${top.producer_id}/${top.producer_role}`);
  check(top.produced_for_id === "agent", `top hit produced_for_id ${top.produced_for_id}`);
  check(top.metadata?.topic === "food", `top hit metadata ${JSON.stringify(top.metadata)}`);
  check(top.session_key === `${org}/${project}`, `top hit session_key ${top.session_key}`);
  check(top.created_at?.seconds === String(1767323045 + 60), `top hit created_at ${JSON.stringify(top.created_at)}`);
  check(ltm[0].score > 0, `top hit score ${ltm[0].score}`);
  console.log(`search "spicy ramen" ranks ${top.uid} first (score ${ltm[0].score.toFixed(4)})`);

  // A filtered search keeps only the matching producer.
  const filtered = await call(memory, "SearchMemories", {
    org_id: org,
    project_id: project,
    query: "hiking ramen budget",
    filter: "producer_id = 'alice'",
  });
  const filteredUids = (filtered.episodic_memory?.long_term_memory ?? []).map((s) => s.episode.uid);
  check(filteredUids.length > 0, `filtered search found nothing: ${JSON.stringify(filtered)}`);
  check(
    filteredUids.every((u) => u === uids[0] || u === uids[2]),
    `filtered search by alice returned ${filteredUids}`,
  );
  console.log(`filtered search keeps alice's episodes only: ${filteredUids}`);

  // --- ListMemories, two per page ------------------------------------------------------
  const listed = [];
  let pageToken = "";
  let pages = 0;
  do {
    const page = await call(memory, "ListMemories", {
      org_id: org,
      project_id: project,
      type: "MEMORY_TYPE_EPISODIC",
      page_size: 2,
      page_token: pageToken,
    });
    listed.push(...page.episodes);
    pageToken = page.next_page_token;
    pages += 1;
    check(pages <= 3, "ListMemories does not stop paging");
  } while (pageToken);
  check(listed.length === 3, `ListMemories returned ${listed.length} episodes, expected 3`);
  check(pages === 2, `ListMemories took ${pages} pages of 2 for 3 episodes`);
  const seqs = listed.map((e) => BigInt(e.sequence_num));
  check(seqs.every((s, i) => i === 0 || seqs[i - 1] < s), `sequence_nums not increasing: ${seqs}`);
  check(
    JSON.stringify(listed.map((e) => e.uid)) === JSON.stringify(uids),
    `ListMemories order ${listed.map((e) => e.uid)} != ${uids}`,
  );
  console.log(`listed 3 episodes over ${pages} pages in sequence_num order ${seqs}`);

  // --- DeleteEpisodicMemories / GetEpisodeCount ----------------------------------------
  const deleted = await call(memory, "DeleteEpisodicMemories", {
    org_id: org,
    project_id: project,
    episode_ids: [uids[0]],
  });
  check(deleted.deleted_count === "1", `deleted_count ${deleted.deleted_count}, expected "1"`);
  const count = (await call(projects, "GetEpisodeCount", { org_id: org, project_id: project })).count;
  check(count === "2", `GetEpisodeCount ${count} after deleting one of 3, expected "2"`);
  const remaining = await call(memory, "ListMemories", { org_id: org, project_id: project });
  check(
    JSON.stringify(remaining.episodes.map((e) => e.uid)) === JSON.stringify(uids.slice(1)),
    `after the delete ListMemories has ${remaining.episodes.map((e) => e.uid)}`,
  );
  console.log("deleted one episode; count is 2");

  // --- INVALID_ARGUMENT with google.rpc.BadRequest -------------------------------------
  let err = await expectError(
    grpc,
    projects,
    "CreateProject",
    { org_id: org, project_id: "bad id!" },
    grpc.status.INVALID_ARGUMENT,
    "CreateProject(project_id='bad id!')",
  );
  let violations = badRequestViolations(rpcTypes, err, "CreateProject(project_id='bad id!')");
  check(
    violations.some((v) => v.field === "project_id"),
    `no violation names project_id: ${describeViolations(violations)}`,
  );
  console.log(`bad project id rejected: ${describeViolations(violations)}`);

  err = await expectError(
    grpc,
    memory,
    "SearchMemories",
    { org_id: org, project_id: project, query: "ramen", filter: "producer_id = " },
    grpc.status.INVALID_ARGUMENT,
    "SearchMemories(filter='producer_id = ')",
  );
  violations = badRequestViolations(rpcTypes, err, "SearchMemories(filter='producer_id = ')");
  check(
    violations.some((v) => v.field === "filter"),
    `no violation names filter: ${describeViolations(violations)}`,
  );
  console.log(`malformed filter rejected: ${describeViolations(violations)}`);

  // --- NOT_FOUND for an unknown project ------------------------------------------------
  const unknown = `missing-${Math.random().toString(16).slice(2, 14)}`;
  await expectError(
    grpc,
    memory,
    "AddMemories",
    { org_id: org, project_id: unknown, messages: [{ content: "nobody home" }] },
    grpc.status.NOT_FOUND,
    `AddMemories to unknown project ${unknown}`,
  );
  console.log("unknown project answers NOT_FOUND");

  // --- DeleteProject -------------------------------------------------------------------
  await call(projects, "DeleteProject", { org_id: org, project_id: project });
  await expectError(
    grpc,
    projects,
    "GetProject",
    { org_id: org, project_id: project },
    grpc.status.NOT_FOUND,
    "GetProject after DeleteProject",
  );
  console.log(`deleted project ${org}/${project}`);
  projects.close();
  memory.close();
}

async function main() {
  const { addr } = parseArgs(process.argv.slice(2));
  let req;
  try {
    req = toolsRequire();
    req.resolve("@grpc/grpc-js");
    req.resolve("@grpc/proto-loader");
    req.resolve("protobufjs");
  } catch (e) {
    console.error(`FAIL: ${e.message.split("\n")[0]}; ${SETUP_HINT}`);
    return 1;
  }
  try {
    await run(addr, req);
  } catch (e) {
    if (e instanceof CheckFailed) {
      console.error(`FAIL: ${e.message}`);
    } else {
      // An unexpected RPC error or a broken environment.
      console.error("FAIL: unexpected error");
      console.error(e);
    }
    return 1;
  }
  console.log("OK: node grpc-js client checks passed");
  return 0;
}

main().then((code) => process.exit(code));
