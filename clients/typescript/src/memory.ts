// The client: one project of one org, over any Connect transport.
import type { MessageInitShape } from "@bufbuild/protobuf";
import { timestampDate, timestampFromDate } from "@bufbuild/protobuf/wkt";
import { type Client, Code, createClient, type Interceptor, type Transport } from "@connectrpc/connect";
import { AlreadyExistsError, makeError, toMemMachineError } from "./errors.js";
import { ChangeService } from "./gen/memmachine/v2/change_service_pb.js";
import { type MemoryMessageSchema, MemoryType } from "./gen/memmachine/v2/common_pb.js";
import { LifecycleService } from "./gen/memmachine/v2/lifecycle_service_pb.js";
import { MemoryService } from "./gen/memmachine/v2/memory_service_pb.js";
import { ProjectService } from "./gen/memmachine/v2/project_service_pb.js";
import { SemanticService } from "./gen/memmachine/v2/semantic_service_pb.js";
import { type RetryPolicy, withRetries } from "./retry.js";
import type {
  AddOptions, AddResult, CallOptions, Change, DeleteOptions, FeaturesOptions, ForgetOptions,
  ForgetReceipt, Hit, ImportOptions, ImportResult, ListOptions, ListPage, MemoryOptions,
  MessageInput, SearchOptions, SearchResult, SemanticFeature, WatchOptions,
} from "./types.js";
import { watchChanges } from "./watch.js";

/** Adds `authorization: Bearer KEY` to every call. */
export function bearer(apiKey: string): Interceptor {
  return (next) => (req) => {
    req.header.set("authorization", `Bearer ${apiKey}`);
    return next(req);
  };
}

function newKey(): string {
  return globalThis.crypto.randomUUID();
}

function toMessage(m: MessageInput | string): MessageInput & { idempotencyKey: string } {
  const msg = typeof m === "string" ? { content: m } : m;
  return { ...msg, idempotencyKey: msg.idempotencyKey || newKey() };
}

function wire(m: MessageInput): MessageInitShape<typeof MemoryMessageSchema> {
  return {
    content: m.content,
    producer: m.producer ?? "",
    producedFor: m.producedFor ?? "",
    role: m.role ?? "",
    metadata: m.metadata ?? {},
    idempotencyKey: m.idempotencyKey ?? "",
    ...(m.timestamp ? { timestamp: timestampFromDate(m.timestamp) } : {}),
    ...(m.expiresAt ? { expiresAt: timestampFromDate(m.expiresAt) } : {}),
  };
}

export interface RawClients {
  memory: Client<typeof MemoryService>;
  changes: Client<typeof ChangeService>;
  semantic: Client<typeof SemanticService>;
  lifecycle: Client<typeof LifecycleService>;
  projects: Client<typeof ProjectService>;
}

export class Memory {
  readonly org: string;
  readonly project: string;
  /** The generated Connect clients, for what this layer does not wrap. */
  readonly raw: RawClients;
  readonly transportKind: "grpc" | "grpc-web";
  private readonly policy: RetryPolicy;

  constructor(transport: Transport, opts: MemoryOptions, kind: "grpc" | "grpc-web") {
    this.org = opts.org;
    this.project = opts.project;
    this.transportKind = kind;
    this.policy = { retries: opts.retries ?? 3, timeoutMs: opts.timeoutMs ?? 30_000 };
    this.raw = {
      memory: createClient(MemoryService, transport),
      changes: createClient(ChangeService, transport),
      semantic: createClient(SemanticService, transport),
      lifecycle: createClient(LifecycleService, transport),
      projects: createClient(ProjectService, transport),
    };
  }

  private call<T>(retryable: boolean, opts: CallOptions | undefined, fn: (o: { timeoutMs?: number; signal?: AbortSignal }) => Promise<T>): Promise<T> {
    const policy = opts?.timeoutMs === undefined ? this.policy : { ...this.policy, timeoutMs: opts.timeoutMs };
    return withRetries(policy, retryable, (timeoutMs) => fn({ ...(timeoutMs === undefined ? {} : { timeoutMs }), ...(opts?.signal ? { signal: opts.signal } : {}) }));
  }

  private get ids(): { orgId: string; projectId: string } {
    return { orgId: this.org, projectId: this.project };
  }

  /** Creates the project unless it exists; true when it was created. */
  async ensureProject(description = "", opts?: CallOptions): Promise<boolean> {
    try {
      await this.call(false, opts, (o) => this.raw.projects.createProject({ ...this.ids, description }, o));
      return true;
    } catch (e) {
      if (e instanceof AlreadyExistsError) return false;
      throw e;
    }
  }

  /** Adds one message (retried safely: it carries an idempotency key). */
  async add(message: MessageInput | string, opts?: AddOptions): Promise<AddResult> {
    const [result] = await this.addMany([message], opts);
    return result!;
  }

  /** Adds messages atomically; results in input order. */
  async addMany(messages: (MessageInput | string)[], opts?: AddOptions): Promise<AddResult[]> {
    const msgs = messages.map(toMessage); // keys made once, so every attempt repeats them
    const res = await this.call(true, opts, (o) =>
      this.raw.memory.addMemories({ ...this.ids, types: opts?.types ?? [], messages: msgs.map(wire) }, o),
    );
    return res.results.map((r, i) => ({ uid: r.uid, duplicate: r.duplicate, idempotencyKey: msgs[i]!.idempotencyKey }));
  }

  async search(query: string, opts: SearchOptions = {}): Promise<SearchResult> {
    const res = await this.call(true, opts, (o) =>
      this.raw.memory.searchMemories(
        {
          ...this.ids,
          query,
          filter: opts.filter ?? "",
          types: opts.types ?? [],
          expandContext: opts.expandContext ?? 0,
          setMetadata: opts.setMetadata ?? {},
          rankTogether: opts.rankTogether ?? false,
          explain: opts.explain ?? false,
          ...(opts.topK !== undefined ? { topK: opts.topK } : {}),
          ...(opts.scoreThreshold !== undefined ? { scoreThreshold: opts.scoreThreshold } : {}),
          ...(opts.semanticWeight !== undefined ? { semanticWeight: opts.semanticWeight } : {}),
          ...(opts.asOf ? { asOf: timestampFromDate(opts.asOf) } : {}),
        },
        o,
      ),
    );
    const em = res.episodicMemory;
    const hits: Hit[] = (em?.longTermMemory ?? []).flatMap((s) => {
      const e = s.episode;
      if (!e) return [];
      return [{
        uid: e.uid, content: e.content, score: s.score, producer: e.producerId, role: e.producerRole,
        producedFor: e.producedForId, createdAt: e.createdAt ? timestampDate(e.createdAt) : undefined,
        metadata: e.metadata, scoreParts: s.scoreParts, episode: e,
      }];
    });
    return {
      hits,
      shortTerm: em?.shortTermMemory ?? [],
      summaries: em?.episodeSummary ?? [],
      features: res.semanticMemory,
      ranked: res.ranked,
    };
  }

  /** The project's memories page by page (episodes in sequence order, or features). */
  async *list(opts: ListOptions = {}): AsyncGenerator<ListPage> {
    let pageToken = opts.pageToken ?? "";
    do {
      const token = pageToken;
      const res = await this.call(true, opts, (o) =>
        this.raw.memory.listMemories(
          {
            ...this.ids,
            type: opts.type ?? MemoryType.EPISODIC,
            pageToken: token,
            filter: opts.filter ?? "",
            setMetadata: opts.setMetadata ?? {},
            ...(opts.pageSize !== undefined ? { pageSize: opts.pageSize } : {}),
            ...(opts.asOf ? { asOf: timestampFromDate(opts.asOf) } : {}),
          },
          o,
        ),
      );
      yield { episodes: res.episodes, features: res.features, nextPageToken: res.nextPageToken };
      pageToken = res.nextPageToken;
    } while (pageToken !== "");
  }

  /** Deletes episodes (or features, with type SEMANTIC); the number deleted. Not retried. */
  async delete(ids: string | string[], opts: DeleteOptions = {}): Promise<number> {
    const list = typeof ids === "string" ? [ids] : ids;
    if (opts.type === MemoryType.SEMANTIC) {
      const r = await this.call(false, opts, (o) => this.raw.memory.deleteSemanticMemories({ ...this.ids, featureIds: list }, o));
      return Number(r.deletedCount);
    }
    const r = await this.call(false, opts, (o) => this.raw.memory.deleteEpisodicMemories({ ...this.ids, episodeIds: list }, o));
    return Number(r.deletedCount);
  }

  /** Removes everything a subject (producer / produced-for id) said or was told, and what derives from it. */
  async forgetSubject(subject: string, opts: ForgetOptions = {}): Promise<ForgetReceipt> {
    const projectIds = opts.projects === "all" ? [] : (opts.projects ?? [this.project]);
    const dryRun = opts.dryRun ?? false;
    const r = await this.call(dryRun, opts, (o) => this.raw.lifecycle.forgetSubject({ orgId: this.org, subject, projectIds, dryRun }, o));
    const rc = r.receipt;
    if (!rc) throw makeError(Code.Internal, "ForgetSubject answered without a receipt");
    return {
      receiptId: rc.receiptId, subject: rc.subject, dryRun: rc.dryRun,
      completedAt: rc.completedAt ? timestampDate(rc.completedAt) : undefined,
      projects: rc.projects.map((p) => ({
        projectId: p.projectId, episodesDeleted: Number(p.episodesDeleted), featuresDeleted: Number(p.featuresDeleted),
        citationsRemoved: Number(p.citationsRemoved), summariesDeleted: Number(p.summariesDeleted), setsDeleted: Number(p.setsDeleted),
      })),
    };
  }

  /** Semantic features: ranked by a query, or all of them. */
  async features(opts: FeaturesOptions = {}): Promise<SemanticFeature[]> {
    if (opts.query === undefined) {
      const out: SemanticFeature[] = [];
      for await (const page of this.list({ ...opts, type: MemoryType.SEMANTIC })) out.push(...page.features);
      return out;
    }
    const query = opts.query;
    const r = await this.call(true, opts, (o) =>
      this.raw.semantic.searchFeatures(
        {
          ...this.ids,
          query,
          filter: opts.filter ?? "",
          setMetadata: opts.setMetadata ?? {},
          ...(opts.topK !== undefined ? { topK: opts.topK } : {}),
          ...(opts.scoreThreshold !== undefined ? { scoreThreshold: opts.scoreThreshold } : {}),
          ...(opts.asOf ? { asOf: timestampFromDate(opts.asOf) } : {}),
        },
        o,
      ),
    );
    return r.features;
  }

  /** Every change to the project, resuming after a stored cursor and reconnecting with
   * backoff; see watch.ts for when a cursor is saved. */
  watch(opts: WatchOptions = {}): AsyncGenerator<Change> {
    return watchChanges(this.raw.changes, this.ids, opts);
  }

  /** Streams batches into the project (ImportMemories). Needs the "grpc" transport:
   * gRPC-Web (fetch) cannot stream a request. Not retried. */
  async importStream(batches: Iterable<(MessageInput | string)[]> | AsyncIterable<(MessageInput | string)[]>, opts: ImportOptions = {}): Promise<ImportResult> {
    if (this.transportKind === "grpc-web") {
      throw makeError(Code.Unimplemented, "importStream needs the grpc transport: gRPC-Web cannot stream a request (use addMany in batches)");
    }
    const ids = this.ids;
    const types = opts.types ?? [];
    async function* requests() {
      for await (const batch of batches) yield { ...ids, types, messages: batch.map(toMessage).map(wire) };
    }
    try {
      const r = await this.raw.memory.importMemories(requests(), {
        ...(opts.timeoutMs ? { timeoutMs: opts.timeoutMs } : {}),
        ...(opts.signal ? { signal: opts.signal } : {}),
      });
      const fe = r.firstError;
      return {
        batches: Number(r.batches), messages: Number(r.messages), duplicates: Number(r.duplicates),
        firstError: fe ? { batch: Number(fe.batch), code: fe.code, message: fe.message } : undefined,
      };
    } catch (e) {
      throw toMemMachineError(e);
    }
  }
}
