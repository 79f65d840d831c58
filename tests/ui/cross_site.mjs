// Pages that were not meant to reach the server, in headless Chromium: run by
// tests/it/console.rs against a real server started WITHOUT --auth. A page of another
// origin posts text/plain, keyless and form bodies at the REST gateway; a page whose name
// resolves to the server (DNS rebinding, played by --host-resolver-rules) calls it
// same-origin. Every such request must be refused (403), while the server's own console
// page is served. The test then checks from outside that nothing was deleted or added.
//
// Environment: REST_URL (http://127.0.0.1:PORT), ATTACKER_URL (a page of another
// origin, served by the test), ORG, PROJECT, PLAYWRIGHT_PREFIX, CHROMIUM.
import { createRequire } from 'node:module';
import { join } from 'node:path';

const env = (name) => {
  const value = process.env[name];
  if (!value) throw new Error(`${name} is not set`);
  return value;
};
const REST = env('REST_URL');
const ORG = env('ORG');
const PROJECT = env('PROJECT');
const ATTACKER = env('ATTACKER_URL');
const require = createRequire(join(env('PLAYWRIGHT_PREFIX'), 'package.json'));
const { chromium } = require('playwright-core');

const port = new URL(REST).port;
const REBOUND = `http://rebound.example:${port}`;
let step = 0;
const check = (what) => console.log(`[${++step}] ${what}`);
function assert(condition, message) {
  if (!condition) throw new Error(`assertion failed: ${message}`);
}

const browser = await chromium.launch({
  executablePath: process.env.CHROMIUM || '/usr/bin/chromium',
  headless: true,
  args: ['--no-sandbox', '--disable-gpu', '--disable-quic', '--no-first-run',
    '--disable-background-networking', '--disable-component-update', '--disable-sync',
    // DNS rebinding: a name of the attacker's that now resolves to the server.
    '--host-resolver-rules=MAP rebound.example 127.0.0.1'],
});
try {
  const context = await browser.newContext();
  context.setDefaultTimeout(30_000);
  // What the server answered each request of a page, seen by the browser's network stack
  // (a no-cors answer is opaque to the page itself).
  const seen = [];
  context.on('response', (r) => {
    if (r.url().startsWith(REST) || r.url().startsWith(REBOUND)) {
      seen.push({ url: r.url(), status: r.status(), method: r.request().method() });
    }
  });

  check('a page of another origin posts at the gateway (text/plain, no type, JSON)');
  const attacker = await context.newPage();
  await attacker.goto(ATTACKER);
  const results = await attacker.evaluate(async ({ rest, org, project }) => {
    const body = JSON.stringify({ org_id: org, project_id: project });
    const add = JSON.stringify({ org_id: org, project_id: project,
      messages: [{ content: 'planted by a foreign page' }] });
    const out = [];
    const tries = [
      ['/api/v2/projects/delete', { mode: 'no-cors', headers: { 'Content-Type': 'text/plain' }, body }],
      ['/api/v2/memories', { mode: 'no-cors', headers: { 'Content-Type': 'text/plain' }, body: add }],
      ['/api/v2/projects/delete', { mode: 'no-cors', body: new Blob([body]) }],
      // A JSON body needs a preflight, which the server does not grant without --auth.
      ['/api/v2/projects/delete', { headers: { 'Content-Type': 'application/json' }, body }],
    ];
    for (const [path, init] of tries) {
      try {
        const r = await fetch(rest + path, { method: 'POST', ...init });
        out.push(`${path}: ${r.type} ${r.status}`);
      } catch (e) {
        out.push(`${path}: ${e.name}`);
      }
    }
    return out;
  }, { rest: REST, org: ORG, project: PROJECT });
  console.log(`    page saw: ${results.join('; ')}`);

  check('a form of another origin posts at the gateway');
  const formAnswer = attacker.waitForResponse((r) => r.url().startsWith(REST));
  await attacker.evaluate(({ rest, org, project }) => {
    const form = document.createElement('form');
    form.method = 'POST';
    form.enctype = 'text/plain';
    form.action = `${rest}/api/v2/projects/delete`;
    const input = document.createElement('input');
    // text/plain forms send NAME=VALUE: together, a JSON body.
    input.name = `{"org_id":"${org}","project_id":"${project}","x":"`;
    input.value = '"}';
    form.appendChild(input);
    document.body.appendChild(form);
    form.submit();
  }, { rest: REST, org: ORG, project: PROJECT });
  const formStatus = (await formAnswer).status();
  console.log(`    form answered ${formStatus}`);
  assert(formStatus === 403, `the form post was refused with 403, got ${formStatus}`);

  const posts = seen.filter((s) => s.method === 'POST');
  console.log(`    the server answered: ${JSON.stringify(posts)}`);
  assert(posts.length >= 4, `the posts reached the server (${posts.length})`);
  for (const s of posts) {
    assert(s.status === 403, `a cross-origin POST was refused: ${JSON.stringify(s)}`);
  }

  check('a rebound name is refused, even same-origin');
  const rebound = await context.newPage();
  const landing = await rebound.goto(`${REBOUND}/ui/`);
  assert(landing.status() === 403, `the console under a rebound name is refused (${landing.status()})`);
  const sameOrigin = await rebound.evaluate(async ({ org, project }) => {
    const r = await fetch('/api/v2/projects/delete', {
      method: 'POST', headers: { 'Content-Type': 'application/json' },
      body: JSON.stringify({ org_id: org, project_id: project }),
    });
    return `${r.status} ${await r.text()}`;
  }, { org: ORG, project: PROJECT });
  console.log(`    same-origin delete under the rebound name: ${sameOrigin}`);
  assert(sameOrigin.startsWith('403'), 'the rebound page cannot delete');

  check("the server's own console page is served and may call the API");
  const own = await context.newPage();
  const consolePage = await own.goto(`${REST}/ui/`);
  assert(consolePage.status() === 200, `the console is served (${consolePage.status()})`);
  const got = await own.evaluate(async ({ org, project }) => {
    const r = await fetch('/api/v2/projects/get', {
      method: 'POST', headers: { 'Content-Type': 'application/json' },
      body: JSON.stringify({ org_id: org, project_id: project }),
    });
    return r.status;
  }, { org: ORG, project: PROJECT });
  assert(got === 200, `the console's own page reads the project (${got})`);
  console.log('OK: cross-site checks passed');
} finally {
  await browser.close();
}
