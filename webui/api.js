// The page's client of pagoda's HTTP API: JSON GETs / POSTs and a streamed chat completion
// read as server-sent events. Paths are relative to the page, so the UI works behind a
// reverse proxy that mounts pagoda under a prefix.
//
// Auth: the API key (when the server has one) lives in localStorage and is sent as
// `Authorization: Bearer KEY`. A 401 throws AuthError; the page then asks for a key and
// retries. Stopping: streamChat takes an AbortSignal; aborting the fetch closes the
// connection, and pagoda cancels a request whose client went away (its KV blocks are freed
// within one engine step).

const KEY_STORAGE = 'pagoda.apiKey';

export class AuthError extends Error {
  constructor(message) {
    super(message || 'the server needs an API key');
    this.name = 'AuthError';
  }
}

export class HttpError extends Error {
  constructor(status, message) {
    super(message);
    this.name = 'HttpError';
    this.status = status;
  }
}

export function apiKey() {
  return localStorage.getItem(KEY_STORAGE) || '';
}

export function setApiKey(key) {
  if (key) localStorage.setItem(KEY_STORAGE, key);
  else localStorage.removeItem(KEY_STORAGE);
}

function headers(json) {
  const h = {};
  if (json) h['Content-Type'] = 'application/json';
  const key = apiKey();
  if (key) h.Authorization = `Bearer ${key}`;
  return h;
}

async function errorOf(res) {
  let message = `${res.status} ${res.statusText}`;
  try {
    const body = await res.json();
    if (body?.error?.message) message = body.error.message;
  } catch { /* not JSON */ }
  if (res.status === 401) return new AuthError(message);
  return new HttpError(res.status, message);
}

export async function getJson(path, { signal } = {}) {
  const res = await fetch(path, { headers: headers(false), signal, cache: 'no-store' });
  if (!res.ok) throw await errorOf(res);
  return res.json();
}

export async function postJson(path, body, { signal } = {}) {
  const res = await fetch(path, { method: 'POST', headers: headers(true), body: JSON.stringify(body ?? {}), signal });
  if (!res.ok) throw await errorOf(res);
  return res.json();
}

export async function getText(path) {
  const res = await fetch(path, { headers: headers(false), cache: 'no-store' });
  if (!res.ok) throw await errorOf(res);
  return res.text();
}

// POSTs a chat completion with stream: true and calls onChunk(json) for every `data:` event
// until `data: [DONE]` or the end of the body. Throws AuthError / HttpError for a refused
// request, an Error for an `error` event in the stream, and the fetch's AbortError when
// `signal` is aborted.
export async function streamChat(body, { signal, onChunk }) {
  const res = await fetch('v1/chat/completions', {
    method: 'POST', headers: headers(true), signal,
    body: JSON.stringify({ ...body, stream: true, stream_options: { include_usage: true } }),
  });
  if (!res.ok) throw await errorOf(res);
  const reader = res.body.getReader();
  const decoder = new TextDecoder();
  let buffer = '';
  for (;;) {
    const { value, done } = await reader.read();
    if (done) break;
    buffer += decoder.decode(value, { stream: true }).replace(/\r\n?/g, '\n');
    let end;
    while ((end = buffer.indexOf('\n\n')) >= 0) {
      const event = buffer.slice(0, end);
      buffer = buffer.slice(end + 2);
      const data = event.split('\n').filter((l) => l.startsWith('data:')).map((l) => l.slice(5).trimStart()).join('\n');
      if (!data) continue;
      if (data === '[DONE]') return;
      const chunk = JSON.parse(data);
      if (chunk.error) throw new Error(chunk.error.message || 'the server ended the stream with an error');
      onChunk(chunk);
    }
  }
}

// The number of tokens the server's prompt for a chat request ({messages, tools?}) has: the
// chat template applied (POST /apply-template, which ends with the assistant's generation
// prompt, as a completion request does) and then tokenized (POST /tokenize; add_special for
// the BOS token the server adds). Two small requests rather than a completion with
// max_tokens 1, which would queue behind running generations and take a KV slot.
export async function countPromptTokens({ messages, tools }, { signal } = {}) {
  const template = await postJson('apply-template', tools ? { messages, tools } : { messages }, { signal });
  if (typeof template?.prompt !== 'string') throw new Error('/apply-template answered without a prompt');
  const tokenized = await postJson('tokenize', { content: template.prompt, add_special: true }, { signal });
  if (!Array.isArray(tokenized?.tokens)) throw new Error('/tokenize answered without tokens');
  return tokenized.tokens.length;
}
