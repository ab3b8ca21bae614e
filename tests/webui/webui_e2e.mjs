#!/usr/bin/env node
// The built-in web UI in a real browser: Debian's headless Chromium, driven by playwright-core
// (no browser download), against live `pagoda serve` processes on stories260K.
//
//   node tests/webui/webui_e2e.mjs --pagoda build/release/pagoda \
//        --model ../shared/models/stories260K/stories260K.gguf --out build/release/webui-e2e
//
// Steps (each depends on the ones before; the first failure stops the run): the page loads
// with nothing fetched from outside the server; a message streams in; a second turn reads
// its prompt from the prefix cache (more cached tokens); the cache panel follows; Stop ends
// a generation and the server counts it cancelled with nothing left running; a reload finds
// the conversations; hostile Markdown in a stored answer runs nothing; light / dark / phone
// screenshots; structured output and tool calls are shown as such; reasoning (stories260K
// under a DeepSeek-R1 template) arrives folded; a server with --api-key makes the page ask
// for the key, and then it works; without max_tokens the page asks for a quarter of a small
// context; a conversation that no longer fits it (refused, or filled by an answer) offers to
// drop its oldest turns (keeping the system prompt) or to start a new chat; a user message
// edited is sent again without what followed it, and an answer can be regenerated; an image
// attached is sent as an image_url part (and refused by a server without --mmproj).
// On a failure every open page is saved as OUT/failure-<step>.png with the servers' logs.
// Screenshots of the good runs are kept too (OUT/screenshots/*.png) for a look by eye.
import { spawn } from 'node:child_process';
import { existsSync, mkdirSync, mkdtempSync, readFileSync, rmSync, createWriteStream } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { fileURLToPath } from 'node:url';

const here = path.dirname(fileURLToPath(import.meta.url));
const RUN_DEADLINE_MS = 120_000;  // ctest's TIMEOUT is 180 s: give up before it kills us
const API_KEY = 'webui-test-key-7c1e';

function parseArgs(argv) {
  const o = { pagoda: process.env.PAGODA_BINARY, model: process.env.PAGODA_MODEL, out: null, chromium: '/usr/bin/chromium' };
  for (let i = 0; i < argv.length; i++) {
    if (argv[i] === '--pagoda') o.pagoda = argv[++i];
    else if (argv[i] === '--model') o.model = argv[++i];
    else if (argv[i] === '--out') o.out = argv[++i];
    else if (argv[i] === '--chromium') o.chromium = argv[++i];
  }
  if (!o.pagoda || !o.model) {
    console.error('usage: webui_e2e.mjs --pagoda PATH --model MODEL.gguf [--out DIR] [--chromium PATH]');
    process.exit(2);
  }
  o.out ??= mkdtempSync(path.join(tmpdir(), 'pagoda-webui-'));
  return o;
}

const opts = parseArgs(process.argv.slice(2));
for (const [what, file, fix] of [
  ['playwright-core', path.join(here, 'node_modules', 'playwright-core', 'package.json'), 'scripts/install-webui-test-deps.sh'],
  ['Chromium', opts.chromium, 'scripts/install-webui-test-deps.sh (Debian package chromium)'],
]) {
  if (!existsSync(file)) {
    console.error(`webui e2e: ${what} is missing (${file}): run ${fix}`);
    process.exit(1);
  }
}
const { chromium } = await import('playwright-core');
mkdirSync(path.join(opts.out, 'screenshots'), { recursive: true });

// ---- servers -------------------------------------------------------------------------

const servers = [];

function startServer(name, flags) {
  const args = ['serve', '-m', opts.model, '--port', '0', '-t', '1', '--kv-cache-bytes', '64MiB',
    '--shutdown-timeout', '1', ...flags];
  const logPath = path.join(opts.out, `server-${name}.log`);
  const log = createWriteStream(logPath);
  const child = spawn(opts.pagoda, args, { stdio: ['ignore', 'pipe', 'pipe'] });
  const server = { name, child, logPath, url: null, exited: false };
  servers.push(server);
  child.stdout.pipe(log);
  let text = '';
  return new Promise((resolve, reject) => {
    child.stderr.on('data', (chunk) => {
      log.write(chunk);
      if (server.url) return;
      text += chunk.toString();
      const m = /listening on (http:\/\/[^\s]+)/.exec(text);
      if (m) { server.url = m[1]; resolve(server); }
    });
    child.on('exit', (code, signal) => {
      server.exited = true;
      if (!server.url) reject(new Error(`pagoda serve (${name}) exited (${code ?? signal}) before listening:\n${text}`));
    });
  });
}

async function waitHealthy(server) {
  const deadline = Date.now() + 30_000;
  while (Date.now() < deadline) {
    try {
      if ((await fetch(`${server.url}/health`)).ok) return;
    } catch { /* not yet */ }
    await sleep(50);
  }
  throw new Error(`${server.name}: /health never answered 200`);
}

function stopServers() {
  for (const s of servers) {
    if (s.exited) continue;
    s.child.kill('SIGTERM');
    setTimeout(() => { if (!s.exited) s.child.kill('SIGKILL'); }, 5000).unref();
  }
}

const sleep = (ms) => new Promise((r) => setTimeout(r, ms));

async function serverJson(server, p) {
  const res = await fetch(`${server.url}${p}`);
  if (!res.ok) throw new Error(`${p}: ${res.status}`);
  return res.json();
}

async function cancelledCount(server) {
  const text = await (await fetch(`${server.url}/metrics`)).text();
  const m = /^pagoda_requests_finished_total\{reason="cancelled"\} (\d+)/m.exec(text);
  if (!m) throw new Error('no cancelled counter in /metrics');
  return Number(m[1]);
}

async function until(what, fn, timeoutMs = 10_000) {
  const deadline = Date.now() + timeoutMs;
  let last;
  while (Date.now() < deadline) {
    try {
      last = await fn();
      if (last) return last;
    } catch (e) { last = e; }
    await sleep(50);
  }
  throw new Error(`timed out waiting for ${what} (last: ${last instanceof Error ? last.message : JSON.stringify(last)})`);
}

function check(cond, message) {
  if (!cond) throw new Error(message);
}

// ---- browser -------------------------------------------------------------------------

const userDataDir = mkdtempSync(path.join(tmpdir(), 'pagoda-webui-chromium-'));
const launchArgs = ['--headless', '--no-sandbox', '--disable-gpu', '--disable-quic', '--no-first-run',
  '--disable-background-networking', '--disable-component-update', '--disable-sync', '--disable-dev-shm-usage'];
const pages = [];

// A page that records console errors, uncaught exceptions and every request that leaves the
// server's origin (aborted: the page must need nothing from outside).
async function openPage(context, origin) {
  const page = await context.newPage();
  page.problems = [];
  page.external = [];
  page.on('console', (m) => { if (m.type() === 'error') page.problems.push(`console: ${m.text()}`); });
  page.on('pageerror', (e) => page.problems.push(`pageerror: ${e.message}`));
  await page.route('**/*', (route) => {
    const url = route.request().url();
    if (url.startsWith(origin) || url.startsWith('data:')) return route.continue();
    page.external.push(url);
    return route.abort();
  });
  pages.push(page);
  return page;
}

// Console errors the tests cause on purpose: a 401 before the key is given.
const expectedProblem = (p) => /status of 401/.test(p);

function lastAssistant(page) {
  return page.locator('[data-testid="message-assistant"]').last();
}

async function statOf(message, name) {
  const chip = message.locator(`[data-testid="stat-${name}"] b`);
  if (await chip.count() === 0) return null;
  return (await chip.textContent()).trim();
}

async function sendAndWait(page, text, { timeout = 30_000 } = {}) {
  const before = await page.locator('[data-testid="message-assistant"]').count();
  await page.fill('[data-testid="prompt"]', text);
  await page.keyboard.press('Enter');
  await page.locator('[data-testid="message-assistant"]').nth(before).waitFor();
  const msg = page.locator('[data-testid="message-assistant"]').nth(before);
  await msg.locator('[data-testid="stat-finish"]').waitFor({ timeout });
  await page.locator('[data-testid="send"]').waitFor({ state: 'visible' });
  return msg;
}

async function setSettings(page, fields) {
  await page.click('#open-settings');
  const form = page.locator('#settings-form');
  for (const [name, value] of Object.entries(fields)) {
    const field = form.locator(`[name="${name}"]`);
    if (await field.evaluate((e) => e.tagName === 'SELECT')) await field.selectOption(value);
    else await field.fill(value);
  }
  await page.click('[data-testid="save-settings"]');
  await page.locator('#settings-dialog').waitFor({ state: 'hidden' });
}

// The context meter as shown ("1,234 / 2,048 tokens", in the browser's locale).
async function meterOf(page) {
  const meter = page.locator('[data-testid="context-meter"]');
  const text = (await meter.textContent()).trim();
  const m = /^([\d.,\s]+|\?) \/ ([\d.,\s]+) tokens$/.exec(text);
  if (!m) return { text };
  const num = (t) => (t === '?' ? null : Number(t.replace(/[^\d]/g, '')));
  return { text, used: num(m[1]), nCtx: num(m[2]), level: await meter.getAttribute('data-level'),
           source: await meter.getAttribute('data-source'), visible: await meter.isVisible() };
}

async function panelNumber(page, testid) {
  const t = await page.locator(`[data-testid="${testid}"]`).textContent();
  return Number(t.replace(/[^\d]/g, ''));
}

// ---- steps ---------------------------------------------------------------------------

const steps = [];
const step = (name, fn) => steps.push({ name, fn });
const ctx = {};

step('the page loads from the binary, needing nothing from outside', async () => {
  ctx.main = await startServer('main', []);
  ctx.auth = await startServer('auth', ['--api-key', API_KEY]);
  await Promise.all([waitHealthy(ctx.main), waitHealthy(ctx.auth)]);
  ctx.context = await chromium.launchPersistentContext(userDataDir, {
    executablePath: opts.chromium, headless: true, args: launchArgs, viewport: { width: 1280, height: 800 },
    colorScheme: 'light',
  });
  const page = ctx.page = await openPage(ctx.context, ctx.main.url);
  const res = await page.goto(`${ctx.main.url}/`);
  check(res.status() === 200, `GET / answered ${res.status()}`);
  check(res.headers()['content-type'].startsWith('text/html'), `content type ${res.headers()['content-type']}`);
  await until('the status to say ready', async () => (await page.textContent('[data-testid="server-status"]')) === 'ready');
  await until('the model name', async () => (await page.textContent('[data-testid="model-name"]')).includes('stories260K'));
  await page.locator('[data-testid="pool-live"]').waitFor();
  check(page.external.length === 0, `requests left the server: ${page.external.join(', ')}`);
});

step('a message streams in and gets its token and timing stats', async () => {
  const page = ctx.page;
  await setSettings(page, { max_tokens: '200', temperature: '0' });
  // Count the distinct states of the answer while it is marked streaming: more than one
  // means it was drawn as it arrived, not at the end.
  await page.evaluate(() => {
    window.__streamStates = new Set();
    new MutationObserver(() => {
      const el = document.querySelector('[data-testid="assistant-content"].streaming');
      if (el && el.textContent) window.__streamStates.add(el.textContent.length);
    }).observe(document.getElementById('messages'), { subtree: true, childList: true, characterData: true, attributes: true });
  });
  // stories260K writes 200 tokens in under 0.1 s, which the browser may read in one piece:
  // slow the download (Chromium's network emulation, ~100 SSE events a second) so the answer
  // has to arrive, and be drawn, over a few seconds.
  const cdp = await ctx.context.newCDPSession(page);
  await cdp.send('Network.enable');
  await cdp.send('Network.emulateNetworkConditions', { offline: false, latency: 0, downloadThroughput: 24_000, uploadThroughput: -1 });
  const sent = page.waitForRequest((r) => r.url().endsWith('/v1/chat/completions'));
  const msg = await sendAndWait(page, 'Once upon a time');
  const body = (await sent).postDataJSON();
  check(body.stream === true && body.stream_options?.include_usage === true, 'not a streamed request with usage');
  check(body.max_tokens === 200 && body.temperature === 0 && !('top_p' in body), `settings not sent as set: ${JSON.stringify(body)}`);
  check(JSON.stringify(body.messages) === JSON.stringify([{ role: 'user', content: 'Once upon a time' }]), 'messages');
  await cdp.send('Network.emulateNetworkConditions', { offline: false, latency: 0, downloadThroughput: -1, uploadThroughput: -1 });
  await cdp.detach();
  const states = await page.evaluate(() => window.__streamStates.size);
  check(states >= 2, `the answer was drawn in ${states} state(s) while streaming`);
  const text = await msg.locator('[data-testid="assistant-content"]').textContent();
  check(text.trim().length > 20, `short answer: ${JSON.stringify(text)}`);
  ctx.prompt1 = Number(await statOf(msg, 'prompt'));
  ctx.cached1 = Number(await statOf(msg, 'cached'));
  const generated = Number(await statOf(msg, 'generated'));
  const finish = await statOf(msg, 'finish');
  check(ctx.prompt1 > 0, `prompt tokens ${ctx.prompt1}`);
  check(finish === 'length' ? generated === 200 : generated > 0 && generated <= 200, `generated ${generated}, finish ${finish}`);
  check(/^\d+ ms$/.test(await statOf(msg, 'ttft')), 'no TTFT');
  check(/tok\/s$/.test(await statOf(msg, 'tps')), 'no tokens/s');
  ctx.generatedSoFar = generated;
  // The context meter: this exchange's prompt and answer of the model's context.
  ctx.nCtx = (await serverJson(ctx.main, '/v1/models')).data[0].meta.n_ctx;
  const meter = await meterOf(page);
  check(meter.visible && meter.used === ctx.prompt1 + generated && meter.nCtx === ctx.nCtx && meter.source === 'usage',
        `the meter shows ${JSON.stringify(meter)}, not ${ctx.prompt1 + generated} / ${ctx.nCtx}`);
});

step('the second turn reads the first from the prefix cache', async () => {
  const page = ctx.page;
  const msg = await sendAndWait(page, 'And then?');
  const prompt2 = Number(await statOf(msg, 'prompt'));
  const cached2 = Number(await statOf(msg, 'cached'));
  check(prompt2 > ctx.prompt1, `second prompt ${prompt2} not longer than the first ${ctx.prompt1}`);
  check(cached2 > ctx.cached1 && cached2 >= ctx.prompt1 - 1,
        `cached tokens ${ctx.cached1} -> ${cached2} (first prompt ${ctx.prompt1} tokens)`);
  ctx.generatedSoFar += Number(await statOf(msg, 'generated'));
});

step('the cache panel follows the server', async () => {
  const page = ctx.page;
  const updates0 = Number(await page.getAttribute('[data-testid="cache-updated"]', 'data-updates'));
  await until('the panel to count the generated tokens',
    async () => (await panelNumber(page, 'tokens-generated')) >= ctx.generatedSoFar);
  check(await panelNumber(page, 'cache-entries') >= 1, 'no prefix-cache entries shown');
  check(!/^0%/.test(await page.textContent('[data-testid="cache-hit-rate"]')), 'hit rate still 0% after a hit');
  check(await panelNumber(page, 'pool-cached') > 0, 'no cached blocks in the pool bar');
  // The finished request's blocks move from live to cached just after its last token, so a
  // poll may have caught them live: wait for the panel to agree with the server.
  await until('the panel\'s cached blocks to match the server\'s', async () =>
    (await panelNumber(page, 'pool-cached')) === (await serverJson(ctx.main, '/v1/cache/stats')).pool.blocks_evictable);
  await until('another poll', async () =>
    Number(await page.getAttribute('[data-testid="cache-updated"]', 'data-updates')) > updates0);
  // The panel's reset button empties the server's prefix cache, and the panel shows it.
  await page.getByRole('button', { name: 'Reset prefix cache' }).click();
  await until('the panel to show no entries', async () => (await panelNumber(page, 'cache-entries')) === 0);
  check((await serverJson(ctx.main, '/v1/cache/stats')).prefix_cache.entries === 0, 'the server still has entries');
});

step('Stop ends the generation and the server cancels it', async () => {
  const page = ctx.page;
  const cancelled0 = await cancelledCount(ctx.main);
  const generated0 = (await serverJson(ctx.main, '/v1/cache/stats')).engine.tokens_generated;
  await page.click('#new-chat');
  // 1,900 tokens take seconds even on stories260K; the stop comes after the first few.
  await setSettings(page, { max_tokens: '1900', extra: '{"ignore_eos": true}' });
  await page.fill('[data-testid="prompt"]', 'Once upon a time there was');
  await page.keyboard.press('Enter');
  const msg = lastAssistant(page);
  await until('the answer to start', async () =>
    ((await msg.locator('[data-testid="assistant-content"]').textContent()) || '').length > 10);
  await page.screenshot({ path: path.join(opts.out, 'screenshots', 'generating.png') });
  check(await page.locator('[data-testid="edit-message"]').first().isHidden(), 'Edit is offered while an answer is written');
  await page.click('[data-testid="stop"]');
  await msg.locator('[data-testid="stat-finish"]').waitFor();
  check(await statOf(msg, 'finish') === 'stopped', `finish ${await statOf(msg, 'finish')}`);
  check(await page.isVisible('[data-testid="send"]'), 'Send is not back');
  await until('the server to count a cancelled request', async () => (await cancelledCount(ctx.main)) === cancelled0 + 1);
  const stats = await until('nothing running', async () => {
    const s = await serverJson(ctx.main, '/v1/cache/stats');
    return s.engine.in_flight === 0 && s.engine.running === 0 && s.pool.blocks_live === 0 ? s : null;
  });
  const generated = stats.engine.tokens_generated - generated0;
  check(generated < 1900, `the server generated ${generated} tokens: not stopped early`);
  // A stopped answer has no usage: the meter asks the server to count the conversation.
  const meter = await until('the meter to count the stopped conversation', async () => {
    const m = await meterOf(page);
    return m.source === 'count' && m.used > 0 ? m : null;
  });
  check(meter.nCtx === ctx.nCtx && meter.used < ctx.nCtx, `the meter shows ${JSON.stringify(meter)}`);
  await setSettings(page, { max_tokens: '200', extra: '' });
});

step('a reload finds the conversations', async () => {
  const page = ctx.page;
  const items = page.locator('[data-testid="conversation-item"]');
  check(await items.count() === 2, `${await items.count()} conversations before the reload`);
  // The stopped one is the newest (active); the two-turn one comes second.
  await items.nth(1).locator('.conv-open').click();
  const before = await page.locator('#messages article').allTextContents();
  await page.reload();
  await until('the status to say ready', async () => (await page.textContent('[data-testid="server-status"]')) === 'ready');
  check(await items.count() === 2, `${await items.count()} conversations after the reload`);
  const after = await page.locator('#messages article').allTextContents();
  check(after.length === 4 && JSON.stringify(after) === JSON.stringify(before),
        `the open conversation changed across the reload:\n${JSON.stringify(before)}\n${JSON.stringify(after)}`);
  check((await page.locator('[data-testid="message-user"]').first().textContent()).includes('Once upon a time'), 'first message lost');
});

step('hostile Markdown in an answer runs nothing', async () => {
  const page = ctx.page;
  const hostile = [
    '<img src=x onerror="window.__xss=1"> <script>window.__xss=2</script>',
    '[click](javascript:window.__xss=3) [ok](https://example.com/a?b=1&c=2)',
    '"><svg onload=window.__xss=4> `<b>code</b>` **bold <i>x</i>**',
    '```html\n<script>window.__xss=5</script>\n```',
    '| a | b |\n|---|---|\n| <iframe src="javascript:window.__xss=6"> | x |',
  ].join('\n\n');
  await page.evaluate((content) => {
    const list = JSON.parse(localStorage.getItem('pagoda.conversations'));
    list.unshift({ id: 'cxss', title: 'xss', created: 1, updated: 1, system: '',
      messages: [{ role: 'user', content: '<img src=x onerror="window.__xss=7">' }, { role: 'assistant', content, stats: {} }] });
    localStorage.setItem('pagoda.conversations', JSON.stringify(list));
    localStorage.setItem('pagoda.active', 'cxss');
  }, hostile);
  await page.reload();
  await page.locator('[data-testid="assistant-content"]').first().waitFor();
  await sleep(200);
  check(await page.evaluate(() => window.__xss) === undefined, 'hostile Markdown ran script');
  const counts = await page.evaluate(() => ({
    tags: document.querySelectorAll('#messages img, #messages script, #messages svg, #messages iframe, #messages i, #messages b:not(.chip b)').length,
    js: [...document.querySelectorAll('#messages a')].filter((a) => !/^https:/.test(a.getAttribute('href'))).length,
    links: document.querySelectorAll('#messages a[href^="https://example.com"]').length,
  }));
  check(counts.tags === 0, `${counts.tags} hostile element(s) rendered`);
  check(counts.js === 0, 'a non-https link was rendered');
  check(counts.links === 1, 'the good link is missing');
  const text = await page.textContent('#messages');
  check(text.includes('<img src=x') && text.includes('<script>window.__xss=5</script>'), 'the markup is not shown as text');
  await page.locator('[data-testid="conversation-item"]').first().locator('.conv-delete').click();
});

step('screenshots: light, dark and phone-sized', async () => {
  const page = ctx.page;
  await page.locator('[data-testid="conversation-item"]').nth(1).locator('.conv-open').click();
  const shot = (name) => page.screenshot({ path: path.join(opts.out, 'screenshots', `${name}.png`) });
  await page.setViewportSize({ width: 1280, height: 800 });
  await page.evaluate(() => { document.documentElement.dataset.theme = 'light'; });
  await shot('desktop-light');
  await page.click('#toggle-theme');
  check(await page.evaluate(() => document.documentElement.dataset.theme) === 'dark', 'theme toggle did not switch to dark');
  const bgDark = await page.evaluate(() => getComputedStyle(document.body).backgroundColor);
  await shot('desktop-dark');
  await page.click('#toggle-theme');
  const bgLight = await page.evaluate(() => getComputedStyle(document.body).backgroundColor);
  check(bgDark !== bgLight, `dark and light backgrounds are the same (${bgDark})`);
  await page.setViewportSize({ width: 390, height: 844 });
  await sleep(100);
  const overflow = await page.evaluate(() => document.documentElement.scrollWidth - window.innerWidth);
  check(overflow <= 0, `the phone layout scrolls sideways by ${overflow}px`);
  check(await page.isVisible('[data-testid="prompt"]') && await page.isVisible('[data-testid="send"]'), 'composer hidden on a phone');
  await shot('phone-light');
  await page.click('#toggle-cache');
  await page.locator('#cache-panel').evaluate((e) => new Promise((r) => setTimeout(r, 300)));
  const box = await page.locator('#cache-panel').boundingBox();
  check(box && box.x >= 0 && box.x + box.width <= 391, 'the cache drawer is not on screen');
  await shot('phone-cache-drawer');
  await page.click('#scrim', { position: { x: 10, y: 400 } });  // left of the drawer
  await page.click('#toggle-theme');
  await page.click('#toggle-sidebar');
  await sleep(300);
  await shot('phone-dark-sidebar');
  await page.keyboard.press('Escape');
  check(await page.locator('#scrim').isHidden(), 'Escape did not close the drawer');
  await page.click('#toggle-theme');
  await page.setViewportSize({ width: 1280, height: 800 });
  const problems = page.problems.filter((p) => !expectedProblem(p));
  check(problems.length === 0, `console errors: ${problems.join('\n')}`);
  check(page.external.length === 0, `requests left the server: ${page.external.join(', ')}`);
});

step('structured output and tool calls are shown as such', async () => {
  const page = ctx.page;
  await page.click('#new-chat');
  const schema = { type: 'object', properties: { mood: { enum: ['happy', 'sad'] } }, required: ['mood'], additionalProperties: false };
  await setSettings(page, { response_format: 'json_schema', json_schema: JSON.stringify(schema), max_tokens: '60' });
  let msg = await sendAndWait(page, 'How do you feel?');
  check(await msg.locator('.structured-label').isVisible(), 'the JSON answer is not shown as structured output');
  const json = JSON.parse(await msg.locator('[data-testid="assistant-content"] code').textContent());
  check(['happy', 'sad'].includes(json.mood), `structured output ${JSON.stringify(json)}`);
  const tools = [{ type: 'function', function: { name: 'get_weather', parameters: { type: 'object',
    properties: { city: { enum: ['Paris', 'Oslo'] } }, required: ['city'], additionalProperties: false } } }];
  await setSettings(page, { response_format: 'text', tools: JSON.stringify(tools), max_tokens: '200',
    extra: '{"tool_choice": "required", "parallel_tool_calls": false}' });
  msg = await sendAndWait(page, 'What is the weather?');
  const call = msg.locator('[data-testid="tool-call"]');
  check(await call.count() === 1, `${await call.count()} tool calls shown`);
  const callText = await call.textContent();
  check(callText.includes('get_weather') && /"city": "(Paris|Oslo)"/.test(callText), `tool call shown as ${JSON.stringify(callText)}`);
  check(await statOf(msg, 'finish') === 'tool_calls', `finish ${await statOf(msg, 'finish')}`);
  await page.screenshot({ path: path.join(opts.out, 'screenshots', 'structured-and-tools.png') });
  await setSettings(page, { tools: '', extra: '' });
  await page.click('#open-settings');
  await page.screenshot({ path: path.join(opts.out, 'screenshots', 'settings.png') });
  await page.keyboard.press('Escape');
  await page.locator('#settings-dialog').waitFor({ state: 'hidden' });
});

step('reasoning arrives folded', async () => {
  // stories260K has no reasoning of its own, but under a DeepSeek-R1 template the prompt opens
  // <think>, so everything it writes (no </think> comes) is streamed as reasoning_content.
  const template = path.join(path.dirname(opts.model), '..', '..', 'chat-templates', 'llama-cpp-deepseek-r1.jinja');
  check(existsSync(template), `missing ${template}`);
  const server = await startServer('reasoning', ['--chat-template-file', template]);
  await waitHealthy(server);
  const page = await openPage(ctx.context, server.url);
  await page.goto(`${server.url}/`);
  await setSettings(page, { max_tokens: '40', temperature: '0' });
  const msg = await sendAndWait(page, 'Why?');
  const details = msg.locator('details.reasoning');
  check(await details.count() === 1, 'no reasoning block');
  check(!(await details.evaluate((d) => d.open)), 'the reasoning is not folded');
  check(/^Reasoning · \d+ words?$/.test(await details.locator('summary').textContent()), 'summary');
  await details.locator('summary').click();
  check(await details.evaluate((d) => d.open) && (await details.locator('.md').textContent()).trim().length > 0,
        'the reasoning does not unfold');
  // The page notices when its server goes away (the cache panel's polls fail).
  server.child.kill('SIGTERM');
  await until('the status to say offline', async () => (await page.textContent('[data-testid="server-status"]')) === 'offline');
  page.problems.length = 0;  // the failed polls log network errors, as they should
  await page.close();
});

step('a server with --api-key makes the page ask for the key', async () => {
  // Another port is another origin: its localStorage (and so the key) starts empty.
  const page = await openPage(ctx.context, ctx.auth.url);
  await page.goto(`${ctx.auth.url}/`);
  await page.locator('#key-dialog[open]').waitFor();
  await page.fill('[data-testid="api-key"]', API_KEY);
  await page.click('[data-testid="save-key"]');
  await until('the model name', async () => (await page.textContent('[data-testid="model-name"]')).includes('stories260K'));
  await page.locator('[data-testid="pool-live"]').waitFor();
  await setSettings(page, { max_tokens: '20', system: 'You tell short stories.' });
  const sent = page.waitForRequest((r) => r.url().endsWith('/v1/chat/completions'));
  const msg = await sendAndWait(page, 'Hello');
  const body = (await sent).postDataJSON();
  check(body.messages[0].role === 'system' && body.messages[0].content === 'You tell short stories.', 'no system prompt sent');
  check((await sent).headers().authorization === `Bearer ${API_KEY}`, 'the key is not sent as a bearer token');
  check(Number(await statOf(msg, 'generated')) > 0, 'no answer with the key');
  check(page.external.length === 0, `requests left the server: ${page.external.join(', ')}`);
  await page.close();
});

step('without max_tokens the page asks for a quarter of a small context', async () => {
  // A 128-token context: the model's own would let stories260K's answers run for a while.
  const server = ctx.small = await startServer('small', ['--ctx-size', '128']);
  await waitHealthy(server);
  const page = ctx.smallPage = await openPage(ctx.context, server.url);
  await page.goto(`${server.url}/`);
  await until('the model name with its context', async () => (await page.textContent('[data-testid="model-name"]')).includes('ctx 128'));
  await page.click('#open-settings');
  const placeholder = await page.getAttribute('[data-testid="max-tokens"]', 'placeholder');
  check(placeholder === 'auto: 32', `max_tokens placeholder ${JSON.stringify(placeholder)}`);
  await page.keyboard.press('Escape');
  await page.locator('#settings-dialog').waitFor({ state: 'hidden' });
  await setSettings(page, { temperature: '0' });
  const sent = page.waitForRequest((r) => r.url().endsWith('/v1/chat/completions'));
  const msg = await sendAndWait(page, 'Hello there');
  const body = (await sent).postDataJSON();
  check(body.max_tokens === 32, `max_tokens ${body.max_tokens}, not a quarter of the 128-token context`);
  check(Number(await statOf(msg, 'generated')) <= 32, `generated ${await statOf(msg, 'generated')}`);
  const meter = await meterOf(page);
  check(meter.nCtx === 128 && meter.used === Number(await statOf(msg, 'prompt')) + Number(await statOf(msg, 'generated')),
        `the meter shows ${JSON.stringify(meter)}`);
  // Set, it is sent as set.
  await setSettings(page, { max_tokens: '5' });
  const sent2 = page.waitForRequest((r) => r.url().endsWith('/v1/chat/completions'));
  await page.click('#new-chat');
  await sendAndWait(page, 'Hi');
  check((await sent2).postDataJSON().max_tokens === 5, 'a max_tokens that was set is not sent');
  await setSettings(page, { max_tokens: '' });
});

step('a conversation that no longer fits offers to drop its oldest turns or start anew', async () => {
  // On the 128-token context, with ChatML spelled out in stories260K's 512-token vocabulary
  // (about 30 tokens a turn), a system prompt, one exchange and a second message overflow.
  const page = ctx.smallPage;
  const choice = page.locator('[data-testid="context-full"]');
  const chatRequest = () => page.waitForRequest((r) => r.url().endsWith('/v1/chat/completions'));
  await page.click('#new-chat');
  await setSettings(page, { system: 'You tell short stories.', temperature: '0', max_tokens: '', extra: '' });
  await sendAndWait(page, 'Hello there');
  check(await choice.isHidden(), 'the choice is shown while the conversation fits');
  const long = 'Tell me a story about a dog and a cat.';
  await page.fill('[data-testid="prompt"]', long);
  await page.keyboard.press('Enter');
  await choice.waitFor();
  check(await choice.getAttribute('data-pending') === 'true', 'the choice does not offer to resend the refused message');
  const refused = lastAssistant(page);
  check(/context/.test(await refused.locator('.msg-error').textContent()), 'the refusal is not shown on the answer');
  // The meter recounts asynchronously after the refusal: wait for it rather than read it once.
  await until('the meter full with the message refused', async () => (await meterOf(page)).level === 'full');
  await page.screenshot({ path: path.join(opts.out, 'screenshots', 'context-full.png') });

  // Drop the oldest turns: the refused message is sent again, with the system prompt and
  // without the first exchange, and answered.
  let sent = chatRequest();
  await page.click('[data-testid="context-drop"]');
  let body = (await sent).postDataJSON();
  check(JSON.stringify(body.messages) === JSON.stringify([{ role: 'system', content: 'You tell short stories.' }, { role: 'user', content: long }]),
        `resent as ${JSON.stringify(body.messages)}`);
  const answer = lastAssistant(page);
  await answer.locator('[data-testid="stat-finish"]').waitFor();
  check(await answer.locator('.msg-error').count() === 0, `the resent message failed: ${await answer.textContent()}`);
  check(Number(await statOf(answer, 'generated')) > 0, 'no answer after dropping the oldest turns');
  check(await page.locator('[data-testid="message-user"]').count() === 1, 'the first turn is still shown');
  check((await page.textContent('[data-testid="dropped-note"]')).includes('2 earlier messages'), 'no note of the dropped turn');

  // Start a new chat: the refused message moves there alone (with the system prompt) and is
  // answered; the old conversation keeps what it had before the refusal.
  const other = 'Once upon a time there was a big red ball.';
  await page.fill('[data-testid="prompt"]', other);
  await page.keyboard.press('Enter');
  await until('the choice with the refused message', async () =>
    (await choice.getAttribute('data-pending')) === 'true' && await choice.isVisible());
  const conversations0 = await page.locator('[data-testid="conversation-item"]').count();
  sent = chatRequest();
  await page.click('[data-testid="context-new-chat"]');
  body = (await sent).postDataJSON();
  check(JSON.stringify(body.messages) === JSON.stringify([{ role: 'system', content: 'You tell short stories.' }, { role: 'user', content: other }]),
        `the new chat sent ${JSON.stringify(body.messages)}`);
  await lastAssistant(page).locator('[data-testid="stat-finish"]').waitFor();
  check(await page.locator('#messages article').count() === 2, `${await page.locator('#messages article').count()} messages in the new chat`);
  check(await page.locator('[data-testid="dropped-note"]').count() === 0, 'the new chat says turns were dropped');
  check(await page.locator('[data-testid="conversation-item"]').count() === conversations0 + 1, 'no new conversation in the list');
  await page.locator('[data-testid="conversation-item"]').nth(1).locator('.conv-open').click();
  const old = await page.locator('#messages article').allTextContents();
  check(old.length === 2 && old[0].includes(long), `the old conversation holds ${JSON.stringify(old)}`);
});

step('a context filled by an answer offers the choice before the next message', async () => {
  const page = ctx.smallPage;
  const choice = page.locator('[data-testid="context-full"]');
  await page.click('#new-chat');
  // ignore_eos: the answer runs to the end of the context (max_tokens 200 > 128).
  await setSettings(page, { max_tokens: '200', extra: '{"ignore_eos": true}' });
  const msg = await sendAndWait(page, 'Hi');
  check(await statOf(msg, 'finish') === 'length', `finish ${await statOf(msg, 'finish')}`);
  const meter = await meterOf(page);
  check(meter.used === 128 && meter.level === 'full', `the meter shows ${JSON.stringify(meter)} with the context full`);
  await choice.waitFor();
  check(await choice.getAttribute('data-pending') === 'false', 'the choice offers to resend a message nobody sent');
  await page.click('[data-testid="context-drop"]');
  await choice.waitFor({ state: 'hidden' });
  check(await page.locator('#messages article').count() === 0, 'the only turn was not dropped');
  await until('the meter to count the system prompt alone', async () => {
    const m = await meterOf(page);
    return m.source === 'count' && m.used > 0 && m.used < 128;
  });
  await setSettings(page, { max_tokens: '', extra: '' });
  const sent = page.waitForRequest((r) => r.url().endsWith('/v1/chat/completions'));
  await sendAndWait(page, 'Hi');
  check((await sent).postDataJSON().messages[0]?.content === 'You tell short stories.', 'the system prompt was dropped');
  const problems = page.problems.filter((p) => !/status of 400/.test(p));
  check(problems.length === 0, `console errors: ${problems.join('\n')}`);
});

step('a user message can be edited and sent again, an answer regenerated', async () => {
  const page = ctx.page;
  const chatRequest = () => page.waitForRequest((r) => r.url().endsWith('/v1/chat/completions'));
  // An assistant turn is compared as the page shows it (textContent, trimmed): the model's
  // raw answer may end in a space ("...grill?\" "), which the shown text does not keep.
  const shown = (m) => (m.role === 'assistant' ? { ...m, content: m.content.trim() } : m);
  const sentMessages = async (request) => JSON.stringify((await request).postDataJSON().messages.map(shown));
  const json = (...messages) => JSON.stringify(messages);
  const user = (content) => ({ role: 'user', content });
  const articles = page.locator('#messages article');
  const answers = page.locator('[data-testid="message-assistant"]');
  const answerText = async (i) => (await answers.nth(i).locator('[data-testid="assistant-content"]').textContent()).trim();
  // Pages opened since left this one in the background, where Chromium slows its animation
  // frames, and so every click's wait for the element to be stable.
  await page.bringToFront();
  await page.click('#new-chat');
  await setSettings(page, { max_tokens: '20', temperature: '', extra: '', system: '' });
  await sendAndWait(page, 'Once upon a time');
  await sendAndWait(page, 'And then?');
  const first = await answerText(0);

  // Regenerate the last answer: the same messages are sent again and the answer is replaced.
  let sent = chatRequest();
  await answers.nth(1).locator('[data-testid="regenerate"]').click();
  check(await sentMessages(sent) === json(user('Once upon a time'), { role: 'assistant', content: first }, user('And then?')),
        `regenerating sent ${await sentMessages(sent)}`);
  await answers.nth(1).locator('[data-testid="stat-finish"]').waitFor();
  await page.locator('[data-testid="send"]').waitFor({ state: 'visible' });
  check(await articles.count() === 4, `${await articles.count()} messages after regenerating the last answer`);

  // Regenerate the first answer: the turn after it goes.
  sent = chatRequest();
  await answers.nth(0).locator('[data-testid="regenerate"]').click();
  check(await sentMessages(sent) === json(user('Once upon a time')), `regenerating sent ${await sentMessages(sent)}`);
  await answers.nth(0).locator('[data-testid="stat-finish"]').waitFor();
  await page.locator('[data-testid="send"]').waitFor({ state: 'visible' });
  check(await articles.count() === 2, `${await articles.count()} messages after regenerating the first answer`);

  // Edit, then cancel: nothing changes and nothing is sent.
  const firstUser = page.locator('[data-testid="message-user"]').first();
  let requests = 0;
  const count = (r) => { if (r.url().endsWith('/v1/chat/completions')) requests++; };
  page.on('request', count);
  await firstUser.locator('[data-testid="edit-message"]').click();
  await page.fill('[data-testid="edit-text"]', 'never sent');
  await page.click('[data-testid="edit-cancel"]');
  check((await firstUser.locator('.user-text').textContent()) === 'Once upon a time', 'Cancel kept the edit');
  await sleep(200);
  page.off('request', count);
  check(requests === 0, `${requests} request(s) after a cancelled edit`);

  // Send a second turn, then edit the first message: it is sent in its new words alone.
  await sendAndWait(page, 'And then?');
  check(await articles.count() === 4, 'no second turn');
  sent = chatRequest();
  await firstUser.locator('[data-testid="edit-message"]').click();
  await page.screenshot({ path: path.join(opts.out, 'screenshots', 'editing.png') });
  await page.fill('[data-testid="edit-text"]', 'A dog ran to the park');
  await page.keyboard.press('Enter');
  check(await sentMessages(sent) === json(user('A dog ran to the park')), `the edit sent ${await sentMessages(sent)}`);
  await answers.nth(0).locator('[data-testid="stat-finish"]').waitFor();
  await page.locator('[data-testid="send"]').waitFor({ state: 'visible' });
  check(await articles.count() === 2, `${await articles.count()} messages after the edit`);
  check((await firstUser.locator('.user-text').textContent()) === 'A dog ran to the park', 'the edit is not shown');
  check((await page.textContent('[data-testid="conversation-item"].active .conv-open')) === 'A dog ran to the park',
        'the conversation is not named after its edited first message');
  // Kept across a reload.
  await page.reload();
  await page.locator('[data-testid="message-user"]').first().waitFor();
  check(await articles.count() === 2 && (await firstUser.locator('.user-text').textContent()) === 'A dog ran to the park',
        'the edited conversation did not survive a reload');
  const problems = page.problems.filter((p) => !expectedProblem(p));
  check(problems.length === 0, `console errors: ${problems.join('\n')}`);
});

step('an image is attached, sent as an image_url part, and kept through a retry', async () => {
  // stories260K has no vision projector: the server refuses the image with a 400, which the
  // page shows; the request is what matters here (docs/vision.md has the served case).
  const page = ctx.page;
  const png = Buffer.from('iVBORw0KGgoAAAANSUhEUgAAADAAAAAgCAIAAADbtmxLAAAAN0lEQVR4nO3OQQ0AMAgEMBQhA8UTOBccjyYV0HrTp1R8ICQkJJQeCAkJCaUHQkJCQumBkJDQsg/li/Bb7MX0rAAAAABJRU5ErkJggg==', 'base64');
  const chatRequest = () => page.waitForRequest((r) => r.url().endsWith('/v1/chat/completions'));
  const imageParts = async (request) => ((await request).postDataJSON().messages.at(-1).content || [])
    .filter?.((p) => p.type === 'image_url') ?? [];
  await page.bringToFront();
  await page.click('#new-chat');
  // Two picked, one removed: one thumbnail waits; a text file is refused with a note.
  await page.setInputFiles('[data-testid="attach-input"]', [
    { name: 'dot.png', mimeType: 'image/png', buffer: png }, { name: 'two.png', mimeType: 'image/png', buffer: png }]);
  await until('two thumbnails', async () => (await page.locator('[data-testid="attachment"]').count()) === 2);
  await page.locator('[data-testid="attachment-remove"]').nth(1).click();
  check(await page.locator('[data-testid="attachment"]').count() === 1, 'removing an attachment left it');
  await page.setInputFiles('[data-testid="attach-input"]', [{ name: 'notes.txt', mimeType: 'text/plain', buffer: Buffer.from('hi') }]);
  await until('the refusal of a text file', async () => /not a PNG/.test(await page.textContent('[data-testid="attach-error"]')));
  check(await page.locator('[data-testid="attachment"]').count() === 1, 'a text file was attached');
  let sent = chatRequest();
  await page.fill('[data-testid="prompt"]', 'What is this?');
  await page.keyboard.press('Enter');
  const content = (await sent).postDataJSON().messages.at(-1).content;
  check(Array.isArray(content) && content[0]?.type === 'text' && content[0].text === 'What is this?' &&
        content[1]?.type === 'image_url' && content[1].image_url.url === `data:image/png;base64,${png.toString('base64')}` &&
        content.length === 2, `the message was sent as ${JSON.stringify(content).slice(0, 300)}`);
  check(await page.locator('[data-testid="attachment"]').count() === 0, 'the attachment stayed after sending');
  const error = lastAssistant(page).locator('.msg-error');
  await error.waitFor();
  check(/takes no images/.test(await error.textContent()), `the server's refusal is not shown: ${await error.textContent()}`);
  // The refusal redraws the conversation: the thumbnail is measured once it is laid out again
  // (measured between the two, a new <img> could have no size yet).
  const userMsg = page.locator('[data-testid="message-user"]').last();
  let box = null;
  await until('the thumbnail laid out', async () => {
    box = await userMsg.locator('[data-testid="message-image"]').boundingBox().catch(() => null);
    return box !== null && box.width > 0 && box.height > 0;
  });
  check(box.width <= 240 && box.height <= 240, `the thumbnail is ${JSON.stringify(box)}`);
  await page.locator('[data-testid="send"]').waitFor({ state: 'visible' });
  await page.screenshot({ path: path.join(opts.out, 'screenshots', 'image.png') });
  // Regenerating and editing send the image again.
  sent = chatRequest();
  await lastAssistant(page).locator('[data-testid="regenerate"]').click();
  check((await imageParts(sent)).length === 1, 'regenerating dropped the image');
  await lastAssistant(page).locator('.msg-error').waitFor();
  await page.locator('[data-testid="send"]').waitFor({ state: 'visible' });
  sent = chatRequest();
  await userMsg.locator('[data-testid="edit-message"]').click();
  await page.fill('[data-testid="edit-text"]', 'And this?');
  await page.keyboard.press('Enter');
  const edited = (await sent).postDataJSON().messages.at(-1).content;
  check(Array.isArray(edited) && edited[0]?.text === 'And this?' && edited[1]?.type === 'image_url',
        `the edit sent ${JSON.stringify(edited).slice(0, 300)}`);
  await lastAssistant(page).locator('.msg-error').waitFor();
  await page.locator('[data-testid="send"]').waitFor({ state: 'visible' });
  // A small image is stored with its conversation.
  await page.reload();
  await page.locator('[data-testid="message-user"] [data-testid="message-image"]').first().waitFor();
  const problems = page.problems.filter((p) => !expectedProblem(p) && !/status of 400/.test(p));
  check(problems.length === 0, `console errors: ${problems.join('\n')}`);
});

// ---- run -----------------------------------------------------------------------------

for (const sig of ['SIGINT', 'SIGTERM']) {
  process.on(sig, () => {
    stopServers();
    process.exit(1);
  });
}

const deadline = setTimeout(() => {
  console.error(`webui e2e: still running after ${RUN_DEADLINE_MS / 1000} s: giving up`);
  stopServers();
  process.exit(1);
}, RUN_DEADLINE_MS);

let failed = false;
const t0 = Date.now();
for (const [i, s] of steps.entries()) {
  const t = Date.now();
  try {
    await s.fn();
    console.log(`ok ${i + 1} - ${s.name} (${Date.now() - t} ms)`);
  } catch (e) {
    failed = true;
    console.log(`not ok ${i + 1} - ${s.name}\n  ${String(e.stack || e).split('\n').join('\n  ')}`);
    const slug = s.name.replace(/[^a-z0-9]+/gi, '-').slice(0, 40);
    for (const [k, p] of pages.entries()) {
      if (p.isClosed()) continue;
      const file = path.join(opts.out, `failure-${i + 1}-${slug}-page${k}.png`);
      try {
        await p.screenshot({ path: file, fullPage: true });
        console.log(`  screenshot: ${file}`);
      } catch { /* the page is gone */ }
      if (p.problems.length) console.log(`  page problems:\n    ${p.problems.join('\n    ')}`);
    }
    for (const srv of servers) console.log(`  ${srv.name} server log (${srv.logPath}):\n    ${readFileSync(srv.logPath, 'utf8').trim().split('\n').slice(-15).join('\n    ')}`);
    break;
  }
}
await ctx.context?.close().catch(() => {});
stopServers();
rmSync(userDataDir, { recursive: true, force: true });
clearTimeout(deadline);
console.log(`${failed ? 'FAILED' : 'passed'} in ${((Date.now() - t0) / 1000).toFixed(1)} s; screenshots in ${path.join(opts.out, 'screenshots')}`);
process.exit(failed ? 1 : 0);
