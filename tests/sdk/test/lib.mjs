// Shared helpers for the SDK suite: clients for the servers run.mjs started, and pagoda's
// own non-OpenAI endpoints (/tokenize, /apply-template) used to compute expected values.
import OpenAI from 'openai';

export const API_KEY = process.env.PAGODA_SDK_API_KEY;

function serverUrl(name) {
  const url = process.env[`PAGODA_SDK_URL_${name}`];
  if (!url) throw new Error(`PAGODA_SDK_URL_${name} is not set: run the suite through tests/sdk/run.mjs`);
  return url;
}

export const urls = {
  get main() { return serverUrl('MAIN'); },
  get nocache() { return serverUrl('NOCACHE'); },
  get auth() { return serverUrl('AUTH'); },
  get tight() { return serverUrl('TIGHT'); },
  get embed() { return serverUrl('EMBED'); },
  get gptoss() { return serverUrl('GPTOSS'); },
  get gemma4() { return serverUrl('GEMMA4'); },
};

// maxRetries 0: the SDK retries 429 / 5xx / connection errors by default (twice, with
// back-off), which would hide exactly the errors the tests look for and slow a failing run.
export function client(name = 'main', options = {}) {
  return new OpenAI({
    baseURL: `${urls[name]}/v1`,
    apiKey: options.apiKey ?? 'unused',
    maxRetries: 0,
    timeout: 20_000,
    ...options,
  });
}

// The id /v1/models reports (the model file's name unless --alias).
let modelIdCache;
export async function modelId() {
  if (!modelIdCache) {
    const list = await client().models.list();
    modelIdCache = list.data[0].id;
  }
  return modelIdCache;
}

async function postJson(base, route, body) {
  const r = await fetch(`${base}${route}`, {
    method: 'POST', headers: { 'content-type': 'application/json' }, body: JSON.stringify(body),
  });
  const j = await r.json();
  if (r.status !== 200) throw new Error(`${route} answered ${r.status}: ${JSON.stringify(j)}`);
  return j;
}

// The chat template's rendering of `messages` with the generation prompt, as the server
// renders a chat completion's prompt.
export async function applyTemplate(messages, base = urls.main, extra = {}) {
  return (await postJson(base, '/apply-template', { messages, ...extra })).prompt;
}

// Token ids of `text`; addSpecial prepends BOS as the server does for a prompt.
export async function tokenize(text, addSpecial = true, base = urls.main) {
  return (await postJson(base, '/tokenize', { content: text, add_special: addSpecial })).tokens;
}

export function commonPrefixLength(a, b) {
  let n = 0;
  while (n < a.length && n < b.length && a[n] === b[n]) n++;
  return n;
}

// Collects a streamed chat completion: the concatenated content, every chunk, the final
// usage chunk and the finish reason.
export async function collectChatStream(stream) {
  const chunks = [];
  let content = '';
  let finishReason = null;
  let usage = null;
  for await (const chunk of stream) {
    chunks.push(chunk);
    if (chunk.usage) usage = chunk.usage;
    for (const choice of chunk.choices) {
      if (choice.delta?.content) content += choice.delta.content;
      if (choice.finish_reason) finishReason = choice.finish_reason;
    }
  }
  return { chunks, content, finishReason, usage };
}
