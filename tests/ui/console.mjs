// Drives the memory console (/ui) in headless Chromium with playwright-core; run by
// tests/it/console.rs against a real server started with --auth. Each step prints what it
// checks; any failure exits 1.
//
// Environment: CONSOLE_URL (the /ui/ address), ACME_KEY (a key of org acme), ADMIN_KEY
// (an admin key, which reaches universal/universal), RIVAL_ORG
// and RIVAL_PROJECT (a project of another org), SCREENSHOT_DIR, PLAYWRIGHT_PREFIX (the
// npm prefix holding playwright-core), CHROMIUM (the browser's path).
import { createRequire } from 'node:module';
import { mkdirSync } from 'node:fs';
import { join } from 'node:path';

const env = (name) => {
  const value = process.env[name];
  if (!value) throw new Error(`${name} is not set`);
  return value;
};
const CONSOLE_URL = env('CONSOLE_URL');
const ACME_KEY = env('ACME_KEY');
const ADMIN_KEY = env('ADMIN_KEY');
const RIVAL_ORG = env('RIVAL_ORG');
const RIVAL_PROJECT = env('RIVAL_PROJECT');
const SHOTS = env('SCREENSHOT_DIR');
const require = createRequire(join(env('PLAYWRIGHT_PREFIX'), 'package.json'));
const { chromium } = require('playwright-core');

const WAIT = 30_000;
const API = new URL('/api/v2', CONSOLE_URL).href;
const ORG = 'acme';
const PROJECT = 'support';

let step = 0;
const check = (what) => console.log(`[${++step}] ${what}`);
const ok = (what) => console.log(`    ok: ${what}`);
function assert(condition, message) {
  if (!condition) throw new Error(`assertion failed: ${message}`);
}

async function rest(path, body, key = ACME_KEY) {
  const response = await fetch(API + path, {
    method: 'POST',
    headers: { 'Content-Type': 'application/json', Authorization: `Bearer ${key}` },
    body: JSON.stringify(body),
  });
  const text = await response.text();
  if (!response.ok) throw new Error(`${path}: ${response.status} ${text}`);
  return text ? JSON.parse(text) : null;
}

mkdirSync(SHOTS, { recursive: true });
const browser = await chromium.launch({
  executablePath: process.env.CHROMIUM || '/usr/bin/chromium',
  headless: true,
  args: ['--no-sandbox', '--disable-gpu', '--disable-quic', '--no-first-run',
    '--disable-background-networking', '--disable-component-update', '--disable-sync'],
});
const context = await browser.newContext({ viewport: { width: 1280, height: 800 } });
context.setDefaultTimeout(WAIT);
const page = await context.newPage();
const pageErrors = [];
page.on('pageerror', (e) => pageErrors.push(String(e)));
page.on('console', (m) => {
  // The refused key, the bad filter and the rival project fail on purpose.
  if (m.type() === 'error' && !m.text().startsWith('Failed to load resource')) pageErrors.push(`console: ${m.text()}`);
});
page.on('dialog', (d) => {
  // No window.alert/confirm: an injected script would show up here.
  pageErrors.push(`unexpected JS dialog: ${d.message()}`);
  d.dismiss();
});
const shot = async (name) => {
  await page.screenshot({ path: join(SHOTS, `${name}.png`) });
  ok(`screenshot ${name}.png`);
};
const main = page.locator('main');
const hash = (tab, query = '') => `#/p/${ORG}/${PROJECT}/${tab}${query}`;
async function goTo(h) {
  await page.evaluate((to) => { location.hash = to; }, h);
}
async function countShown() {
  const el = page.locator('#episode-count');
  await el.locator('xpath=self::*[@data-count]').waitFor();
  return Number(await el.getAttribute('data-count'));
}
/** Waits until the view has drawn: nothing loading, every count counted. */
async function settled() {
  await page.waitForFunction(() => !document.querySelector('main .loading')
    && ![...document.querySelectorAll('main .count')].some((c) => c.textContent === 'counting…'));
}
async function confirmDialog(label) {
  const dialog = page.locator('#confirm-dialog');
  await dialog.waitFor({ state: 'visible' });
  await dialog.getByRole('button', { name: label }).click();
  await dialog.waitFor({ state: 'hidden' });
}

const messages = [
  { content: 'My favourite food is sushi.', producer: 'alice', role: 'user' },
  { content: 'I am flying to Lisbon on Friday for the conference.', producer: 'alice', role: 'user' },
  { content: 'Noted: a window seat, and a taxi to the venue.', producer: 'assistant', role: 'assistant', produced_for: 'alice' },
  { content: 'My favourite city is Porto.', producer: 'bob', role: 'user', metadata: { topic: 'travel' } },
  { content: '<b>not bold</b> <img src=x onerror="alert(1)"> stays text', producer: 'mallory', role: 'user' },
  { content: 'Can you book a table at the sushi bar near the hotel?', producer: 'alice', role: 'user' },
];

try {
  check('the page asks for a key on a server with --auth, and refuses a wrong one');
  await page.goto(new URL('/ui', CONSOLE_URL).href);
  assert(page.url().endsWith('/ui/'), `/ui redirects to /ui/ (${page.url()})`);
  const keyInput = page.getByLabel('API key');
  await keyInput.waitFor();
  await keyInput.fill('mm_000000000000_wrong');
  await page.getByRole('button', { name: 'Sign in' }).click();
  await main.getByText('The server refused this key').waitFor();
  await shot('login');
  assert(await page.evaluate(() => sessionStorage.length === 0), 'a refused key is not kept');
  ok('wrong key: "The server refused this key" shown, nothing stored');

  check('signing in with the acme key lists only acme projects (none yet)');
  await keyInput.fill(ACME_KEY);
  await page.getByRole('button', { name: 'Sign in' }).click();
  await main.getByRole('heading', { name: 'Projects', level: 1 }).waitFor();
  await main.getByText('No projects yet').waitFor();
  assert(!(await main.textContent()).includes(RIVAL_PROJECT), 'the rival project is not listed');
  const stored = await page.evaluate(() => ({
    session: Object.values(sessionStorage), local: localStorage.length, cookie: document.cookie,
  }));
  assert(stored.session.includes(ACME_KEY) && stored.local === 0 && stored.cookie === '', `key only in sessionStorage: ${JSON.stringify({ ...stored, session: stored.session.length })}`);
  ok('empty state shown; the key is in sessionStorage only');

  check('the keyboard reaches the controls, with a visible focus outline');
  await page.keyboard.press('Tab');
  const focus = await page.evaluate(() => {
    const el = document.activeElement;
    return { tag: el.tagName, outline: getComputedStyle(el).outlineStyle };
  });
  assert(focus.tag !== 'BODY' && focus.outline !== 'none', `focus shown: ${JSON.stringify(focus)}`);
  ok(`Tab focuses a ${focus.tag} drawn with an outline`);

  check('creating a project through the page');
  await page.getByLabel('Org').fill(ORG);
  await page.getByLabel('Project id').fill(PROJECT);
  await page.getByLabel('Description').fill('Support conversations');
  await page.getByRole('button', { name: 'Create project' }).click();
  await page.waitForURL((u) => u.hash === hash('episodes'));
  await main.getByText('No episodes yet').waitFor();
  assert((await countShown()) === 0, 'the new project counts 0 episodes');
  ok('landed on the new project: "No episodes yet", 0 episodes');

  check('messages added through the API appear in the page, as text');
  const added = await rest('/memories', { org_id: ORG, project_id: PROJECT, messages });
  const uids = added.results.map((r) => r.uid);
  assert(uids.length === messages.length, 'every message stored');
  await goTo('#/');
  const row = main.locator(`[data-project="${ORG}/${PROJECT}"]`);
  await row.getByText(`${messages.length} episodes`).waitFor();
  await shot('projects');
  await row.getByRole('link').click();
  await page.waitForURL((u) => u.hash === hash('episodes'));
  for (const m of messages) await main.getByText(m.content, { exact: true }).waitFor();
  assert((await countShown()) === messages.length, 'the header counts every episode');
  const markup = main.locator(`[data-uid="${uids[4]}"] .content`);
  assert((await markup.textContent()) === messages[4].content, 'markup shown verbatim');
  assert((await markup.locator('b, img').count()) === 0, 'no element made from memory content');
  ok(`${messages.length} episodes listed; markup in content stays text`);
  await shot('episodes');

  check('a malformed filter shows its error next to the filter box; a good one filters');
  const filterBox = page.getByLabel('Filter', { exact: true });
  await filterBox.fill('producer_id = ');
  await page.getByRole('button', { name: 'Apply' }).click();
  const filterError = page.locator('#episode-filter-error');
  await filterError.getByText('malformed filter').waitFor();
  ok(`error shown: ${(await filterError.textContent()).trim()}`);
  await filterBox.fill("m.topic = 'travel'");
  await page.getByRole('button', { name: 'Apply' }).click();
  await main.getByText(messages[3].content).waitFor();
  assert((await main.locator('li.episode').count()) === 1, 'one episode matches');
  ok('filter m.topic = \'travel\' lists the one matching episode');
  await page.goBack();
  await page.waitForURL((u) => u.hash.includes('filter='));
  await filterError.getByText('malformed filter').waitFor();
  ok('Back returns to the previous (bad) filter view');

  check('search finds the messages, with scores and the ranking mode');
  await page.getByRole('link', { name: 'Search' }).click();
  await page.getByLabel('Query').fill('sushi');
  await page.getByLabel('Results (top_k)').fill('5');
  await page.getByLabel('Context (expand_context)').fill('1');
  await page.getByRole('button', { name: 'Search', exact: true }).click();
  const hits = main.locator('.result-group').filter({ has: page.getByRole('heading', { name: /Long-term memory/ }) });
  await hits.getByText(messages[0].content).waitFor();
  const scores = await hits.locator('.score').allTextContents();
  assert(scores.length > 0 && scores.every((s) => /score -?\d+\.\d{4}/.test(s)), `scores shown: ${scores}`);
  const ranking = (await page.locator('#ranking-mode').textContent()).trim();
  assert(/hybrid|lexical|dense/.test(ranking), `ranking mode shown: ${ranking}`);
  // The console asks for explained scores: each part shown is a named number (lexical
  // ranking gives every hit its lexical part; the fused rankings as they report theirs).
  const parts = await hits.locator('.score-part').allTextContents();
  assert(parts.every((p) => /^(lexical|dense|context|session|time|participant) [+-]\d+\.\d{4}$/.test(p)), `score parts: ${parts}`);
  if (/lexical/.test(ranking)) assert(parts.some((p) => p.startsWith('lexical ')), `lexical parts shown: ${parts}`);
  await main.getByRole('heading', { name: 'Short-term summary' }).waitFor();
  ok(`hits with ${scores.join(', ')}; ranking: ${ranking}`);
  // The short-term window is 4 messages, so the model folds the oldest into a summary.
  const deadline = Date.now() + WAIT;
  const summary = main.locator('.summary-text');
  while (!(await summary.count())) {
    assert(Date.now() < deadline, 'the short-term summary appears');
    await main.getByText('No summary yet.').waitFor();
    await page.waitForTimeout(500);
    await page.reload();
    await hits.getByText(messages[0].content).waitFor();
  }
  ok(`short-term summary shown: ${(await summary.first().textContent()).trim()}`);
  await shot('search');

  check('a feature distilled by the model appears, with its cited message');
  await page.getByRole('link', { name: 'Semantic memory' }).click();
  // page.locator, not main.locator: it is also matched inside its set's section below.
  const food = page.locator('li.feature').filter({ hasText: 'favourite food' });
  const until = Date.now() + WAIT;
  await main.locator('.list-area').filter({ hasNotText: 'Loading' }).waitFor();
  while (!(await food.count())) {
    assert(Date.now() < until, 'the feature "favourite food" appears within 30 s');
    await page.waitForTimeout(500);
    await page.getByRole('button', { name: 'Refresh' }).click();
    await main.locator('.list-area').filter({ hasNotText: 'Loading' }).waitFor();
  }
  await food.getByText('sushi', { exact: true }).waitFor();
  const set = main.locator('section.set').filter({ has: food });
  assert((await set.getAttribute('data-set')).startsWith('mem_user_set_'), 'grouped under a user set');
  assert((await set.locator('section.category').filter({ has: food }).getAttribute('data-category')) === 'profile', 'grouped under category profile');
  const cite = food.getByRole('button', { name: '1 citation' });
  await cite.click();
  await food.locator('.citations').getByText(messages[0].content, { exact: true }).waitFor();
  assert((await cite.getAttribute('aria-expanded')) === 'true', 'the citations button says it is expanded');
  ok('"favourite food: sushi" under its user set and profile; its citation shows the message');
  await shot('semantic');

  check('the org\'s model usage and budget show below the project\'s views; an org key cannot set the budget');
  const usagePanel = main.locator('section.usage');
  await usagePanel.getByRole('heading', { name: `Model usage of ${ORG} today` }).waitFor();
  const extraction = usagePanel.getByRole('row').filter({ has: page.getByRole('rowheader', { name: 'extraction' }) });
  const calls = Number((await extraction.locator('td').first().textContent()).replace(/,/g, ''));
  assert(calls > 0, `extraction calls counted: ${calls}`);
  await usagePanel.getByText(/^Budget: unlimited; [\d,]+ language-model tokens used today/).waitFor();
  await usagePanel.getByRole('button', { name: 'Set budget' }).click();
  await usagePanel.getByText('Could not set the budget').waitFor();
  ok(`${calls} extraction calls shown; an org key is refused the budget`);

  check('adding, editing and deleting a feature by hand');
  const aliceSet = await set.getAttribute('data-set');
  await page.getByLabel('Set', { exact: true }).selectOption(aliceSet);
  await page.getByLabel('Tag', { exact: true }).fill('work');
  await page.getByLabel('Feature', { exact: true }).fill('editor');
  await page.getByLabel('Value', { exact: true }).fill('vim');
  await page.getByLabel('Citations (optional)').fill(uids[5]);
  await page.getByRole('button', { name: 'Add feature' }).click();
  const editor = page.locator('li.feature').filter({ hasText: 'editor' });
  await editor.getByText('vim', { exact: true }).waitFor();
  await editor.getByRole('button', { name: '1 citation' }).waitFor();
  ok('added "editor: vim" citing a message');
  // By id: while it is edited, its text is in inputs.
  const edited = page.locator(`li.feature[data-feature="${await editor.getAttribute('data-feature')}"]`);
  await edited.getByRole('button', { name: 'Edit feature editor' }).click();
  await edited.getByLabel('Value').fill('helix');
  await edited.getByRole('button', { name: 'Save' }).click();
  await edited.getByText('helix', { exact: true }).waitFor();
  ok('edited its value to "helix"');
  await edited.getByRole('button', { name: 'History of feature editor' }).click();
  const versions = edited.locator('.feature-history li.version');
  await edited.locator('.feature-history li.version.current').filter({ hasText: 'helix' }).waitFor();
  assert((await versions.count()) === 2, 'two versions: vim, then helix');
  assert((await versions.first().textContent()).includes('vim'), 'the first version says vim');
  assert((await versions.first().textContent()).includes('manual'), 'made by hand');
  ok('its history shows "vim" then the current "helix"');
  await edited.getByRole('button', { name: 'Delete feature editor' }).click();
  await confirmDialog('Delete feature');
  await edited.waitFor({ state: 'detached' });
  await food.waitFor();
  ok('deleted it after the confirmation dialog; the distilled feature stays');

  check('deleting an episode through the page (with confirmation) removes it and lowers the count');
  await page.getByRole('link', { name: 'Episodes' }).click();
  await page.waitForURL((u) => u.hash === hash('episodes'));
  const lisbon = main.locator(`[data-uid="${uids[1]}"]`);
  await lisbon.waitFor();
  const before = await countShown();
  await lisbon.getByRole('button', { name: /Delete episode/ }).click();
  await page.locator('#confirm-dialog').getByRole('button', { name: 'Cancel' }).click();
  assert(await lisbon.isVisible(), 'Cancel keeps the episode');
  await lisbon.getByRole('button', { name: /Delete episode/ }).click();
  await confirmDialog('Delete episode');
  await lisbon.waitFor({ state: 'detached' });
  await page.locator('#episode-count').filter({ hasText: `${before - 1} episodes` }).waitFor();
  await main.getByText(messages[1].content).waitFor({ state: 'detached' });
  const left = await rest('/memories/episodic/get', { org_id: ORG, project_id: PROJECT, episodic_ids: [uids[1]] });
  assert(left.content.missing.includes(uids[1]), 'the server no longer has it');
  ok(`gone from the page and the server; count ${before} -> ${before - 1}`);

  check('the retention field shows the project\'s retention, saves it, and old episodes vanish');
  const RET = 'retention-demo';
  await rest('/projects', { org_id: ORG, project_id: RET });
  const threeDaysAgo = Math.floor(Date.now() / 1000) - 3 * 86400;
  await rest('/memories', { org_id: ORG, project_id: RET, messages: [
    { content: 'An old note about the garden', timestamp: threeDaysAgo },
    { content: 'A fresh note about the garden' }] });
  await goTo(`#/p/${ORG}/${RET}/episodes`);
  await main.getByText('An old note about the garden').waitFor();
  await main.getByText('Episodes are kept until deleted.').waitFor();
  await page.locator('#retention-days').fill('1');
  await page.locator('form.retention').getByRole('button', { name: 'Save' }).click();
  await main.getByText('Episodes older than 1 days expire.').waitFor();
  const retention = await rest('/memory/episodic/config/get', { org_id: ORG, project_id: RET });
  assert(retention.episode_retention_seconds === 86400, `retention stored: ${JSON.stringify(retention)}`);
  await goTo('#/');
  await settled();
  await goTo(`#/p/${ORG}/${RET}/episodes`);
  const fresh = main.locator('li.episode', { hasText: 'A fresh note about the garden' });
  await fresh.waitFor();
  await fresh.locator('.expires').waitFor();
  assert(!(await main.getByText('An old note about the garden').isVisible()), 'the old episode is hidden');
  ok('1 day saved; the old episode is gone, the fresh one shows when it expires');

  check('"Forget user" shows the dry run\'s counts, then forgets across the org and keeps a receipt');
  const daveUid = (await rest('/memories', { org_id: ORG, project_id: PROJECT,
    messages: [{ content: 'Dave keeps bees on the roof.', producer: 'dave', role: 'user' }] })).results[0].uid;
  await goTo(hash('episodes'));
  await page.reload();
  await page.waitForURL((u) => u.hash === hash('episodes'));
  const dave = main.locator(`[data-uid="${daveUid}"]`);
  await dave.waitFor();
  const withDave = await countShown();
  await dave.getByRole('button', { name: 'Forget user dave' }).click();
  const forgetDialog = page.locator('#confirm-dialog');
  await forgetDialog.waitFor({ state: 'visible' });
  const previewText = await page.locator('#confirm-text').textContent();
  assert(previewText.includes('1 episode'), `the dry run's counts are shown: ${previewText}`);
  assert(await dave.isVisible(), 'the dry run removed nothing');
  await confirmDialog('Forget user');
  await dave.waitFor({ state: 'detached' });
  await page.locator('#episode-count').filter({ hasText: `${withDave - 1} episodes` }).waitFor();
  const noticeText = await page.locator('#notice').textContent();
  const receiptId = (noticeText.match(/receipt ([0-9a-f-]{36})/) || [])[1];
  assert(receiptId, `the receipt is shown: ${noticeText}`);
  const kept = await rest('/forget/receipt', { org_id: ORG, receipt_id: receiptId });
  assert(kept.subject === 'dave' && kept.projects.some((p) => p.episodes_deleted === 1), 'the receipt is kept');
  ok(`dry run then forget; receipt ${receiptId}`);

  check('a large project pages, also where the server cuts a page at its byte budget');
  const LONG = 'long-chat';
  await rest('/projects', { org_id: ORG, project_id: LONG });
  const long = Array.from({ length: 45 }, (_, i) => ({
    content: `Long message ${i + 1}: ${'lorem ipsum '.repeat(400)}`, producer: 'carol', role: 'user',
  }));
  const longUids = (await rest('/memories', { org_id: ORG, project_id: LONG, messages: long })).results.map((r) => r.uid);
  await goTo(`#/p/${ORG}/${LONG}/episodes`);
  const seen = [];
  const sizes = [];
  for (let pageNo = 1; ; pageNo++) {
    assert(pageNo <= 45, 'the pages end');
    await page.locator('.page-no').filter({ hasText: `Page ${pageNo}` }).waitFor();
    await settled();
    const onPage = await main.locator('li.episode').evaluateAll((els) => els.map((e) => e.dataset.uid));
    const start = Number(await main.locator('ol.episodes').getAttribute('start'));
    assert(start === seen.length + 1, `page ${pageNo} numbers from ${seen.length + 1} (start=${start})`);
    seen.push(...onPage);
    sizes.push(onPage.length);
    const nextLink = main.locator('a[rel="next"]');
    if (!(await nextLink.count())) break;
    await nextLink.click();
  }
  assert(sizes[0] < 20, `the byte budget cut the first page short (${sizes[0]} of 20)`);
  assert(JSON.stringify(seen) === JSON.stringify(longUids), `every episode once, in order (${seen.length} of ${longUids.length})`);
  await page.goBack();
  await page.locator('.page-no').filter({ hasText: `Page ${sizes.length - 1}` }).waitFor();
  ok(`${sizes.length} pages of ${sizes.join(', ')} episodes; each shown once, numbered in order; Back works`);

  check('deleting a project through the page (with confirmation)');
  await goTo('#/');
  const longRow = main.locator(`[data-project="${ORG}/${LONG}"]`);
  await longRow.getByText('45 episodes').waitFor();
  await longRow.getByRole('button', { name: `Delete project ${ORG}/${LONG}` }).click();
  await confirmDialog('Delete project');
  await longRow.waitFor({ state: 'detached' });
  await row.waitFor();
  const gone = await fetch(`${API}/projects/get`, {
    method: 'POST',
    headers: { 'Content-Type': 'application/json', Authorization: `Bearer ${ACME_KEY}` },
    body: JSON.stringify({ org_id: ORG, project_id: LONG }),
  });
  assert(gone.status === 404, `the server no longer has it (${gone.status})`);
  ok(`${ORG}/${LONG} gone from the list and the server (404); ${ORG}/${PROJECT} stays`);

  check('the rival org\'s project is refused, and not listed');
  await goTo(`#/p/${encodeURIComponent(RIVAL_ORG)}/${encodeURIComponent(RIVAL_PROJECT)}/episodes`);
  const refused = main.locator('.error');
  await refused.getByText('does not grant access').waitFor();
  assert(!(await main.locator('.tabs').count()), 'no view of the project is drawn');
  ok(`refused: ${(await refused.textContent()).trim()}`);
  await goTo('#/');
  await row.waitFor();
  assert(!(await main.textContent()).includes(RIVAL_PROJECT), 'the projects list does not show it');
  ok('the projects list shows only acme\'s project');

  check('at phone width (390 px) the page is one column without horizontal scrolling');
  await page.setViewportSize({ width: 390, height: 844 });
  for (const view of [hash('episodes'), hash('search', '?q=sushi&k=5&x=1'), hash('semantic'), '#/']) {
    await goTo(view);
    await settled();
    const width = await page.evaluate(() => document.documentElement.scrollWidth);
    assert(width <= 390, `${view}: scroll width ${width} <= 390`);
  }
  await goTo(hash('episodes'));
  await settled();
  await shot('phone');
  await page.setViewportSize({ width: 1280, height: 800 });
  ok('episodes, search, semantic and projects fit 390 px');

  check('signing out forgets the key');
  await page.getByRole('button', { name: 'Sign out' }).click();
  await page.getByLabel('API key').waitFor();
  assert(await page.evaluate(() => sessionStorage.length === 0 && localStorage.length === 0), 'no key kept');
  await page.reload();
  await page.getByLabel('API key').waitFor();
  ok('back at the key prompt, also after a reload');

  check('universal/universal, which the server never deletes, offers no Delete; its ranking is /config\'s');
  await page.getByLabel('API key').fill(ADMIN_KEY);
  await page.getByRole('button', { name: 'Sign in' }).click();
  const universal = main.locator('[data-project="universal/universal"]');
  await universal.waitFor();
  await settled();
  assert((await universal.getByRole('button').count()) === 0, 'no button on the universal project');
  assert((await row.getByRole('button', { name: `Delete project ${ORG}/${PROJECT}` }).count()) === 1, 'other projects keep theirs');
  await universal.getByRole('link').click();
  await page.waitForURL((u) => u.hash === '#/p/universal/universal/episodes');
  // The project list (whose rows carry "Delete project …" buttons) stays until the page has loaded.
  await main.locator('.project-head h1', { hasText: 'universal / universal' }).waitFor();
  await settled();
  assert((await main.getByRole('button', { name: 'Delete project' }).count()) === 0, 'no Delete project on its page');
  const config = await (await fetch(`${API}/config`, { headers: { Authorization: `Bearer ${ADMIN_KEY}` } })).json();
  const mode = (await page.locator('#ranking-mode').textContent()).trim();
  const served = config.episodic_memory.long_term_memory.reranker;
  assert(mode === `${served} (server default)`, `console "${mode}" is /config's "${served}"`);
  await page.getByRole('button', { name: 'Sign out' }).click();
  await page.getByLabel('API key').waitFor();
  ok(`no Delete for universal/universal; ranking "${mode}" as /config says`);

  assert(pageErrors.length === 0, `no page errors: ${pageErrors.join('; ')}`);
  console.log(`all ${step} checks passed`);
  await browser.close();
} catch (error) {
  console.error(`FAILED at step ${step}: ${error.stack || error}`);
  if (pageErrors.length) console.error(`page errors: ${pageErrors.join('; ')}`);
  try {
    await page.screenshot({ path: join(SHOTS, 'failure.png') });
    console.error(`screenshot of the failure: ${join(SHOTS, 'failure.png')}`);
    console.error(`page text: ${(await main.innerText()).slice(0, 2000)}`);
  } catch (_) {
    // The page is gone too.
  }
  await browser.close();
  process.exit(1);
}
