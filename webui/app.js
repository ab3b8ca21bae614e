// pagoda's chat page: conversations (kept in localStorage), streamed answers rendered as
// Markdown, a stop button, settings, and the live KV cache panel (cache_panel.js).
// One generation runs at a time; it keeps streaming into its conversation when another one
// is opened. Everything the model writes goes through renderMarkdown (escapes first) or
// textContent, never into innerHTML raw; one message's elements are built in message_view.js.
import { AuthError, HttpError, apiKey, countPromptTokens, getJson, setApiKey, streamChat } from './api.js';
import { AttachmentPicker } from './attachment_picker.js';
import { titleOf, userContent } from './attachments.js';
import { CachePanel, formatBytes } from './cache_panel.js';
import { defaultAnswerTokens, fewestTurnsToDrop, isContextFull, meterReading, turnStarts, usedTokensOf } from './context.js';
import { messageElement, updateAssistant } from './message_view.js';
import * as store from './store.js';

const $ = (id) => document.getElementById(id);

const state = {
  conversations: store.loadConversations(),
  activeId: store.activeId(),
  settings: store.loadSettings(),
  generation: null,  // {controller, conversation, message}
  nCtx: null,        // the model's context in tokens (GET /v1/models meta.n_ctx); null: not known
  meter: { conversationId: null, used: null, source: '' },  // the open conversation's tokens
};

// ---- theme ---------------------------------------------------------------------------

function applyTheme(theme) {
  document.documentElement.dataset.theme = theme;
}

function initTheme() {
  const saved = localStorage.getItem('pagoda.theme');
  applyTheme(saved || (matchMedia('(prefers-color-scheme: dark)').matches ? 'dark' : 'light'));
  $('toggle-theme').addEventListener('click', () => {
    const next = document.documentElement.dataset.theme === 'dark' ? 'light' : 'dark';
    localStorage.setItem('pagoda.theme', next);
    applyTheme(next);
  });
}

// ---- API key -------------------------------------------------------------------------

let keyPrompt = null;  // the pending prompt's promise, so parallel 401s ask once
let keyDeclined = false;  // the user cancelled: background polls stop asking

// Asks for the API key; resolves true when one was given. `background` (the cache panel's
// polls) does not ask again once the user has cancelled the dialog; sending a message does.
function askForKey({ background = false } = {}) {
  if (keyPrompt) return keyPrompt;
  if (background && keyDeclined) return Promise.resolve(false);
  const dialog = $('key-dialog');
  const form = $('key-form');
  form.elements.key.value = apiKey();
  keyPrompt = new Promise((resolve) => {
    dialog.addEventListener('close', () => {
      keyPrompt = null;
      const key = form.elements.key.value.trim();
      keyDeclined = !(dialog.returnValue === 'save' && key);
      if (!keyDeclined) setApiKey(key);
      resolve(!keyDeclined);
    }, { once: true });
  });
  dialog.returnValue = '';
  if (!dialog.open) dialog.showModal();
  return keyPrompt;
}

// ---- server status -------------------------------------------------------------------

let statusRefreshing = false;

async function refreshServerStatus() {
  if (statusRefreshing) return;
  statusRefreshing = true;
  try {
    await checkServer();
  } finally {
    statusRefreshing = false;
  }
}

async function checkServer() {
  const status = $('server-status');
  try {
    const res = await fetch('health', { cache: 'no-store' });
    status.dataset.state = res.ok ? 'ready' : 'loading';
    if (!res.ok) {
      // 503 "Loading model" while the model loads; 503 "Draining: ..." when it is stopping.
      const message = (await res.json().catch(() => null))?.error?.message || `health ${res.status}`;
      status.textContent = /^loading model/i.test(message) ? 'loading model…' : 'unavailable';
      status.title = message;
      setTimeout(refreshServerStatus, 1000);
      return;
    }
    status.textContent = 'ready';
    status.title = '';
    const models = await getJson('v1/models');
    const m = models.data?.[0];
    const nCtx = m?.meta?.n_ctx;
    state.nCtx = Number.isSafeInteger(nCtx) && nCtx > 0 ? nCtx : null;
    $('model-name').textContent = m ? `${m.id}${m.meta?.n_ctx ? ` · ctx ${m.meta.n_ctx}` : ''}` : '';
    updateContext();
  } catch (e) {
    if (e instanceof AuthError) {
      status.textContent = 'needs API key';
      if (await askForKey()) await checkServer();
      return;
    }
    status.textContent = 'offline';
    status.dataset.state = 'offline';
    setTimeout(refreshServerStatus, 2000);
  }
}

// ---- conversations -------------------------------------------------------------------

function activeConversation() {
  return state.conversations.find((c) => c.id === state.activeId) || null;
}

function persist() {
  try {
    store.saveConversations(state.conversations);
  } catch (e) {
    console.warn('pagoda: could not save conversations', e);
  }
}

function openConversation(id) {
  state.activeId = id;
  store.setActiveId(id);
  renderSidebar();
  renderMessages();
  closeDrawers();
}

function newChat(system = state.settings.system) {
  const c = store.newConversation(system);
  state.conversations.unshift(c);
  persist();
  openConversation(c.id);
  $('prompt').focus();
}

function deleteConversation(id) {
  if (state.generation?.conversation.id === id) state.generation.controller.abort();
  state.conversations = state.conversations.filter((c) => c.id !== id);
  persist();
  if (state.activeId === id) state.activeId = state.conversations[0]?.id || '';
  store.setActiveId(state.activeId);
  renderSidebar();
  renderMessages();
}

function renderSidebar() {
  const list = $('conversation-list');
  list.replaceChildren(...state.conversations.map((c) => {
    const li = document.createElement('li');
    li.dataset.testid = 'conversation-item';
    li.className = c.id === state.activeId ? 'active' : '';
    const open = document.createElement('button');
    open.type = 'button';
    open.className = 'conv-open';
    open.textContent = c.title || 'New chat';
    open.title = new Date(c.updated).toLocaleString();
    open.addEventListener('click', () => openConversation(c.id));
    const del = document.createElement('button');
    del.type = 'button';
    del.className = 'conv-delete';
    del.textContent = '×';
    del.title = 'Delete this conversation';
    del.setAttribute('aria-label', `Delete ${c.title}`);
    del.addEventListener('click', () => deleteConversation(c.id));
    li.append(open, del);
    return li;
  }));
}

// ---- messages ------------------------------------------------------------------------

function renderMessages() {
  const box = $('messages');
  const c = activeConversation();
  if (!c || c.messages.length === 0) {
    const empty = document.createElement('div');
    empty.className = 'empty';
    empty.innerHTML = '<h2>pagoda</h2><p>Ask something. Answers stream in; the panel on the right shows the KV ' +
      'cache as it fills, and each answer shows how many prompt tokens came from the prefix cache.</p>';
    box.replaceChildren(empty);
  } else {
    const streaming = state.generation?.message;
    box.replaceChildren(...c.messages.map((m, i) => messageElement(m, i, c.messages[i - 1], m === streaming)));
    if (Number.isSafeInteger(c.dropped) && c.dropped > 0) {
      const note = document.createElement('p');
      note.className = 'dropped-note';
      note.dataset.testid = 'dropped-note';
      note.textContent = `${c.dropped} earlier message${c.dropped === 1 ? ' was' : 's were'} dropped to fit the model's context.`;
      box.prepend(note);
    }
    box.scrollTop = box.scrollHeight;
  }
  updateContext();
}

// ---- the conversation against the context --------------------------------------------

let meterSeq = 0;  // the latest count asked for: an older answer arriving late is dropped

// Brings the context meter up to date with the open conversation: the server's usage of its
// last exchange when there is one (no request), else a count by the server of the prompt its
// next request would start with. While the conversation is generating the last number stays.
async function updateContext() {
  const c = activeConversation();
  const seq = ++meterSeq;
  const id = c?.id ?? null;
  let used = c ? usedTokensOf(c.messages) : 0;
  let source = 'usage';
  if (c && used === null && c.messages.length === 0 && !c.system?.trim()) used = 0;
  if (used === null) {
    if (state.generation?.conversation === c) {
      if (state.meter.conversationId !== id) state.meter = { conversationId: id, used: null, source: '' };
      return renderMeter();
    }
    source = 'count';
    try {
      used = await countPromptTokens(countableRequest(c));
    } catch (e) {
      source = `not counted: ${e.message}`;
    }
    if (seq !== meterSeq) return;
  }
  state.meter = { conversationId: id, used, source };
  renderMeter();
}

// The part of a request that makes its prompt: messages and tools (bad settings: none).
function countableRequest(conversation) {
  let tools;
  try { tools = requestBody(conversation, state.settings).tools; } catch { /* the send will say */ }
  return { messages: chatMessages(conversation), tools };
}

// The room an answer needs: what the request asks for, at most the default answer length
// (a max_tokens of "the whole context" must not make every conversation look full).
function answerReserve() {
  const fallback = defaultAnswerTokens(state.nCtx);
  try {
    const body = requestBody({ system: '', messages: [] }, state.settings);
    const asked = body.max_completion_tokens ?? body.max_tokens;
    return Number.isSafeInteger(asked) && asked > 0 ? Math.min(asked, fallback) : fallback;
  } catch {
    return fallback;
  }
}

function renderMeter() {
  const reading = meterReading(state.meter.used, state.nCtx, answerReserve());
  const meter = $('context-meter');
  meter.hidden = state.meter.used === null && state.nCtx === null;
  meter.dataset.level = reading.level;
  meter.dataset.source = state.meter.source;
  $('context-meter-text').textContent = reading.text;
  $('context-meter-fill').style.width = `${100 * reading.fraction}%`;
  state.meter.level = reading.level;
  const how = state.meter.source === 'usage' ? 'the last prompt and its answer, as the server counted them'
    : state.meter.source === 'count' ? 'the conversation as the server tokenizes it' : state.meter.source;
  meter.title = `Tokens this conversation uses of the model's context (${how})` +
    (reading.level === 'low' ? ': the next answer may be cut short' : reading.level === 'full' ? ': the next message will not fit' : '');
  renderContextChoice();
}

// When the open conversation no longer fits, the choice it needs: {pending} when the server
// refused its last message for the context (that message is resent after the choice), {} when
// the meter says the context is full (the next message cannot fit), null otherwise.
function contextChoice(c) {
  if (!c || state.generation?.conversation === c) return null;
  const last = c.messages.at(-1);
  const before = c.messages.at(-2);
  if (last?.role === 'assistant' && last.contextFull && before?.role === 'user') return { pending: before };
  if (state.meter.conversationId === c.id && state.meter.level === 'full') return { pending: null };
  return null;
}

let dropping = false;  // counting which turns to drop: the buttons wait

function renderContextChoice() {
  const choice = contextChoice(activeConversation());
  const box = $('context-full');
  const wasHidden = box.hidden;
  box.hidden = !choice;
  if (!choice) return;
  if (wasHidden) $('context-full-status').textContent = '';
  box.dataset.pending = String(Boolean(choice.pending));
  const size = state.nCtx ? `(${state.nCtx.toLocaleString()} tokens)` : '';
  $('context-full-text').textContent = choice.pending
    ? `This message does not fit in the model's context ${size} after the conversation so far. Drop the oldest ` +
      'turns (the system prompt stays) and send it again, or start a new chat with it.'
    : `This conversation fills the model's context ${size}: the next message will not fit. Drop the oldest ` +
      'turns (the system prompt stays), or start a new chat.';
  for (const b of box.querySelectorAll('button')) b.disabled = dropping || Boolean(state.generation);
}

// Drops the fewest oldest turns that make the conversation fit again, keeping the system
// prompt (it is not a turn), and resends the refused message if there is one. The server
// counts each candidate (countPromptTokens). "Fits" leaves room for this answer and one more
// exchange like it (twice answerReserve): room for the answer alone would leave a context
// that the answer can fill, so the very next message would meet this choice again. When that
// much room cannot be had, room for the answer, and then for one token of it, will do.
async function dropOldestTurns() {
  const c = activeConversation();
  const choice = contextChoice(c);
  if (!choice || dropping || state.generation) return;
  const status = $('context-full-status');
  const snapshot = [...c.messages];
  const history = choice.pending ? c.messages.slice(0, -2) : [...c.messages];
  // With no message waiting, room for the shortest next one: an empty user turn.
  const tail = [choice.pending ?? { role: 'user', content: '' }];
  const starts = turnStarts(history);
  const keptFrom = (k) => (k < starts.length ? starts[k] : history.length);
  const nCtx = state.nCtx;
  const fitsWith = (reserve) => async (k) => nCtx === null ||
    (await countPromptTokens(countableRequest({ system: c.system, messages: [...history.slice(keptFrom(k)), ...tail] }))) +
      reserve <= nCtx;
  dropping = true;
  renderContextChoice();
  status.textContent = 'Counting…';
  let k = null;
  let error = '';
  try {
    const reserve = answerReserve();
    for (const room of [2 * reserve, reserve, 1]) {
      k = await fewestTurnsToDrop(starts.length, fitsWith(room));
      if (k !== null) break;
    }
  } catch (e) {
    error = `Could not count the tokens: ${e.message}`;
  }
  dropping = false;
  // The conversation changed (or went) while the server counted: this answer is not for it.
  if (!state.conversations.includes(c) || c.messages.length !== snapshot.length || c.messages.some((m, i) => m !== snapshot[i])) {
    return renderContextChoice();
  }
  if (k === null) {
    status.textContent = error || (choice.pending
      ? 'Even with every earlier turn dropped, this message (with the system prompt) leaves no room to answer: edit it shorter.'
      : 'There are no turns left to drop: the system prompt alone fills the context.');
    return renderContextChoice();
  }
  status.textContent = '';
  const dropped = keptFrom(k);
  c.messages = history.slice(dropped);
  c.dropped = (Number.isSafeInteger(c.dropped) ? c.dropped : 0) + dropped;
  if (choice.pending) {
    c.messages.push(choice.pending);
    startAnswer(c);
  } else {
    c.updated = Date.now();
    persist();
    renderMessages();
  }
}

// Starts a new chat with the open conversation's system prompt; a message the old one could
// not take moves there (and leaves the old one, which keeps its last answered turn) and is sent.
function newChatFromFull() {
  const c = activeConversation();
  const choice = contextChoice(c);
  if (!choice || dropping || state.generation) return;
  if (choice.pending) {
    c.messages.splice(-2, 2);
    if (c.messages.length === 0) state.conversations = state.conversations.filter((x) => x !== c);
  }
  newChat(c.system);
  if (choice.pending) send(choice.pending.content, choice.pending.images);
}

// ---- edit and regenerate -------------------------------------------------------------

// The open conversation and its message shown by `art`, or null (gone, or a generation runs:
// one at a time, and the messages it writes into must stay where they are).
function messageOf(art) {
  const c = activeConversation();
  const m = c?.messages[Number(art?.dataset.index)];
  return m && !state.generation ? { c, m } : null;
}

// Turns a user message into a box to edit it in: Send (or Enter) keeps the new text, drops
// every message after it and asks again; Cancel (or Escape) puts the message back.
function startEdit(art) {
  const found = messageOf(art);
  const shown = art.querySelector(':scope > .user-text');
  if (!found || !shown) return;
  const editor = document.createElement('div');
  editor.className = 'msg-editor';
  const area = document.createElement('textarea');
  area.value = found.m.content || '';
  area.rows = Math.min(12, area.value.split('\n').length + 1);
  area.dataset.testid = 'edit-text';
  const save = document.createElement('button');
  save.type = 'button';
  save.className = 'primary small';
  save.dataset.testid = 'edit-save';
  save.textContent = 'Send';
  const cancel = document.createElement('button');
  cancel.type = 'button';
  cancel.className = 'small';
  cancel.dataset.testid = 'edit-cancel';
  cancel.textContent = 'Cancel';
  const buttons = document.createElement('div');
  buttons.className = 'editor-actions';
  buttons.append(save, cancel);
  editor.append(area, buttons);
  shown.replaceWith(editor);
  art.classList.add('editing');
  const done = () => { editor.replaceWith(shown); art.classList.remove('editing'); };
  const submit = () => {
    const text = area.value;
    const again = messageOf(art);
    if ((!text.trim() && !found.m.images?.length) || !again || again.m !== found.m) return;
    resendFrom(again.c, again.m, text);
  };
  save.addEventListener('click', submit);
  cancel.addEventListener('click', done);
  area.addEventListener('keydown', (e) => {
    if (e.key === 'Enter' && !e.shiftKey && !e.isComposing) {
      e.preventDefault();
      submit();
    } else if (e.key === 'Escape') {
      e.preventDefault();
      done();
    }
  });
  area.focus();
  area.setSelectionRange(area.value.length, area.value.length);
}

// The user message `m` now says `text`: what followed it goes and it is answered afresh.
function resendFrom(c, m, text) {
  const i = c.messages.indexOf(m);
  if (i < 0) return;
  m.content = text;
  c.messages.splice(i + 1);
  if (i === 0) c.title = titleOf(text, m.images);
  renderSidebar();
  startAnswer(c);
}

// The answer shown by `art` is written again from the same messages; what followed it goes.
function regenerate(art) {
  const found = messageOf(art);
  if (!found) return;
  const i = found.c.messages.indexOf(found.m);
  if (i < 1 || found.c.messages[i - 1].role !== 'user') return;
  found.c.messages.splice(i);
  startAnswer(found.c);
}

let renderPending = false;
function scheduleRender() {
  if (renderPending) return;
  renderPending = true;
  requestAnimationFrame(() => {
    renderPending = false;
    const g = state.generation;
    if (!g || g.conversation.id !== state.activeId) return;
    const index = g.conversation.messages.indexOf(g.message);
    const art = $('messages').querySelector(`article[data-index="${index}"]`);
    if (!art) return;
    const box = $('messages');
    const atBottom = box.scrollHeight - box.scrollTop - box.clientHeight < 80;
    updateAssistant(art, g.message, true);
    if (atBottom) box.scrollTop = box.scrollHeight;
  });
}

// ---- requests ------------------------------------------------------------------------

function numberSetting(value, name, integer) {
  if (value === '' || value === undefined || value === null) return undefined;
  const n = Number(value);
  if (!Number.isFinite(n) || (integer && !Number.isInteger(n))) throw new Error(`${name}: not a ${integer ? 'whole ' : ''}number`);
  return n;
}

function parseJsonSetting(text, name, check) {
  if (!text || !text.trim()) return undefined;
  let v;
  try { v = JSON.parse(text); } catch (e) { throw new Error(`${name}: ${e.message}`); }
  if (!check(v)) throw new Error(`${name}: wrong kind of JSON value`);
  return v;
}

// The chat messages of a conversation up to (not including) `answer`, the message being
// generated: the system prompt first, and no failed or empty answers.
function chatMessages(conversation, answer = null) {
  const messages = [];
  if (conversation.system?.trim()) messages.push({ role: 'system', content: conversation.system });
  for (const m of conversation.messages) {
    if (m === answer) break;
    if (m.role === 'assistant' && !m.content && !m.tool_calls?.length) continue;  // failed or empty turns
    messages.push({ role: m.role, content: m.role === 'user' ? userContent(m.content, m.images) : m.content || '' });
  }
  return messages;
}

// The request body for a conversation up to (not including) `answer`; throws Error naming a
// bad setting.
function requestBody(conversation, settings, answer = null) {
  const body = { messages: chatMessages(conversation, answer) };
  const put = (k, v) => { if (v !== undefined) body[k] = v; };
  put('temperature', numberSetting(settings.temperature, 'temperature'));
  put('top_p', numberSetting(settings.top_p, 'top_p'));
  put('top_k', numberSetting(settings.top_k, 'top_k', true));
  put('min_p', numberSetting(settings.min_p, 'min_p'));
  // Unset, the server would answer until the context is full (see defaultAnswerTokens).
  put('max_tokens', numberSetting(settings.max_tokens, 'max_tokens', true) ?? defaultAnswerTokens(state.nCtx));
  put('seed', numberSetting(settings.seed, 'seed', true));
  if (settings.response_format === 'json_object') body.response_format = { type: 'json_object' };
  if (settings.response_format === 'json_schema') {
    const schema = parseJsonSetting(settings.json_schema, 'JSON schema', (v) => v && typeof v === 'object') ?? {};
    body.response_format = { type: 'json_schema', json_schema: { name: 'output', schema, strict: true } };
  }
  put('tools', parseJsonSetting(settings.tools, 'tools', Array.isArray));
  Object.assign(body, parseJsonSetting(settings.extra, 'extra request fields', (v) => v && typeof v === 'object' && !Array.isArray(v)) ?? {});
  return body;
}

function setBusy(busy) {
  $('send').hidden = busy;
  $('stop').hidden = !busy;
  $('messages').classList.toggle('busy', busy);
  renderContextChoice();
}

async function generate(conversation, message) {
  let body;
  try {
    body = requestBody(conversation, state.settings, message);
  } catch (e) {
    message.error = `settings: ${e.message}`;
    return finishRender(conversation);
  }
  if (body.response_format) message.format = 'json';
  const controller = new AbortController();
  state.generation = { controller, conversation, message };
  setBusy(true);
  cachePanel.setFast(true);
  const t0 = performance.now();
  let tFirst = null;
  let tLast = null;
  let tEnd = null;  // the finish chunk
  let pieces = 0;
  let usage = null;
  message.stats = {};
  let retry = false;
  try {
    await streamChat(body, {
      signal: controller.signal,
      onChunk(chunk) {
        if (chunk.usage) usage = chunk.usage;
        const choice = chunk.choices?.[0];
        if (!choice) return;
        const d = choice.delta || {};
        let got = false;
        if (d.content) { message.content += d.content; got = true; }
        if (d.reasoning_content) { message.reasoning = (message.reasoning || '') + d.reasoning_content; got = true; }
        for (const tc of d.tool_calls || []) {
          message.tool_calls ||= [];
          const slot = (message.tool_calls[tc.index ?? 0] ||= { id: '', name: '', arguments: '' });
          if (tc.id) slot.id = tc.id;
          if (tc.function?.name) slot.name += tc.function.name;
          if (tc.function?.arguments) slot.arguments += tc.function.arguments;
          got = true;
        }
        if (got) {
          const now = performance.now();
          if (tFirst === null) {
            tFirst = now;
            message.stats.ttft_ms = now - t0;
          }
          tLast = now;
          pieces++;
        }
        if (choice.finish_reason) {
          message.stats.finish = choice.finish_reason;
          tEnd = performance.now();
        }
        scheduleRender();
      },
    });
  } catch (e) {
    if (e.name === 'AbortError') {
      message.stopped = true;
      message.stats.finish = 'stopped';
    } else if (e instanceof AuthError) {
      retry = await askForKey();
      if (!retry) message.error = 'The server needs an API key.';
    } else {
      message.error = e.message;
      if (e instanceof HttpError && isContextFull(e.status, e.message)) message.contextFull = true;
    }
  }
  const s = message.stats;
  if (usage) {
    s.prompt = usage.prompt_tokens;
    s.cached = usage.prompt_tokens_details?.cached_tokens ?? 0;
    s.generated = usage.completion_tokens;
  } else if (pieces) {
    s.generated = pieces;  // stopped: the stream's deltas, about one token each
    s.approx = true;
  }
  s.total_ms = performance.now() - t0;
  // Tokens per second after the first, as the browser saw them arrive. Output that arrives in
  // one piece at the end (a tool call, parsed when complete) has no such interval: then the
  // whole request's time, prompt included, is the honest divisor.
  tEnd ??= tLast;
  if (s.generated > 1 && tFirst !== null && tEnd - tFirst > 20) s.tokens_per_s = (s.generated - 1) / ((tEnd - tFirst) / 1000);
  else if (s.generated > 0 && tEnd > t0) s.tokens_per_s = s.generated / ((tEnd - t0) / 1000);
  state.generation = null;
  setBusy(false);
  cachePanel.setFast(false);
  if (retry) {
    Object.assign(message, { content: '', reasoning: undefined, tool_calls: undefined, stats: {}, error: undefined });
    return generate(conversation, message);
  }
  finishRender(conversation);
}

function finishRender(conversation) {
  conversation.updated = Date.now();
  persist();
  if (conversation.id === state.activeId) renderMessages();
}

// Sends a user message: its text and images ([{url, name, type}], kept with the message so an
// edit or a regeneration sends them again).
function send(text, images = []) {
  if (state.generation || (!text.trim() && !images?.length)) return;
  let c = activeConversation();
  if (!c) {
    c = store.newConversation(state.settings.system);
    state.conversations.unshift(c);
    state.activeId = c.id;
    store.setActiveId(c.id);
  }
  if (c.messages.length === 0) c.title = titleOf(text, images);
  const m = { role: 'user', content: text };
  if (images?.length) m.images = images;
  c.messages.push(m);
  startAnswer(c);
}

// Adds an answer to the conversation (whose last message is the user's) and generates it.
function startAnswer(c) {
  const answer = { role: 'assistant', content: '', stats: {} };
  c.messages.push(answer);
  // Most recently used first.
  state.conversations = [c, ...state.conversations.filter((x) => x !== c)];
  c.updated = Date.now();
  persist();
  renderSidebar();
  state.generation = { controller: null, conversation: c, message: answer };  // for the first render
  renderMessages();
  state.generation = null;
  generate(c, answer);
}

// ---- settings ------------------------------------------------------------------------

function openSettings() {
  const form = $('settings-form');
  const c = activeConversation();
  for (const [k, v] of Object.entries(state.settings)) if (form.elements[k]) form.elements[k].value = v;
  form.elements.max_tokens.placeholder = `auto: ${defaultAnswerTokens(state.nCtx)}`;
  form.elements.system.value = c ? c.system : state.settings.system;
  $('settings-error').textContent = '';
  syncSchemaField();
  $('settings-dialog').showModal();
}

function syncSchemaField() {
  const form = $('settings-form');
  form.querySelector('.json-schema-field').hidden = form.elements.response_format.value !== 'json_schema';
}

function saveSettingsFromForm(event) {
  const form = $('settings-form');
  if (event.submitter?.value !== 'save') return;
  const next = { ...state.settings };
  for (const k of Object.keys(store.DEFAULT_SETTINGS)) if (form.elements[k]) next[k] = form.elements[k].value;
  try {
    requestBody({ system: '', messages: [] }, next);  // validates the numbers and JSON
  } catch (e) {
    event.preventDefault();
    $('settings-error').textContent = e.message;
    return;
  }
  state.settings = next;
  store.saveSettings(next);
  const c = activeConversation();
  if (c) {
    c.system = next.system;
    persist();
  }
  updateContext();  // the system prompt, tools and max_tokens change what the meter shows
}

// ---- layout (drawers on narrow screens) ----------------------------------------------

function closeDrawers() {
  document.body.classList.remove('show-sidebar', 'show-cache');
  $('scrim').hidden = true;
}

function toggleDrawer(cls) {
  const open = !document.body.classList.contains(cls);
  closeDrawers();
  if (open) {
    document.body.classList.add(cls);
    $('scrim').hidden = false;
  }
}

// ---- start ---------------------------------------------------------------------------

const cachePanel = new CachePanel($('cache-body'), {
  onAuthError: () => askForKey({ background: true }).then((given) => { if (given) cachePanel.poll(); }),
  // A server that stopped answering polls (restarted, or loading again) is checked anew.
  onReachable: (ok) => { if (!ok || $('server-status').dataset.state !== 'ready') refreshServerStatus(); },
});

function updateMiniBar(stats) {
  const p = stats.pool;
  const budget = Math.max(1, p.blocks_budget);
  $('mini-live').style.width = `${(100 * p.blocks_live) / budget}%`;
  $('mini-cached').style.width = `${(100 * p.blocks_evictable) / budget}%`;
  $('toggle-cache').title = `KV cache: ${formatBytes(p.bytes_in_use)} of ${formatBytes(p.bytes_budget)} hold data`;
}

function init() {
  initTheme();
  if (!activeConversation()) state.activeId = state.conversations[0]?.id || '';
  renderSidebar();
  renderMessages();
  const prompt = $('prompt');
  const attachments = new AttachmentPicker({
    composer: $('composer'), box: $('attachments'), button: $('attach'), input: $('attach-input'), prompt,
  });
  $('composer').addEventListener('submit', (e) => {
    e.preventDefault();
    const text = prompt.value;
    if (state.generation || (!text.trim() && attachments.count === 0)) return;
    const images = attachments.take();
    prompt.value = '';
    send(text, images);
  });
  prompt.addEventListener('keydown', (e) => {
    if (e.key === 'Enter' && !e.shiftKey && !e.isComposing) {
      e.preventDefault();
      $('composer').requestSubmit();
    }
  });
  $('stop').addEventListener('click', () => state.generation?.controller?.abort());
  $('new-chat').addEventListener('click', () => newChat());
  $('context-drop').addEventListener('click', dropOldestTurns);
  $('context-new-chat').addEventListener('click', newChatFromFull);
  $('open-settings').addEventListener('click', openSettings);
  $('settings-form').addEventListener('submit', saveSettingsFromForm);
  $('settings-form').elements.response_format.addEventListener('change', syncSchemaField);
  $('forget-key').addEventListener('click', () => { setApiKey(''); $('forget-key').textContent = 'Key forgotten'; });
  $('toggle-sidebar').addEventListener('click', () => toggleDrawer('show-sidebar'));
  $('toggle-cache').addEventListener('click', () => toggleDrawer('show-cache'));
  $('scrim').addEventListener('click', closeDrawers);
  document.addEventListener('keydown', (e) => { if (e.key === 'Escape' && !$('scrim').hidden) closeDrawers(); });
  $('messages').addEventListener('click', (e) => {
    const action = e.target.closest('.msg-action');
    if (action?.dataset.action === 'edit') return startEdit(action.closest('article'));
    if (action?.dataset.action === 'regenerate') return regenerate(action.closest('article'));
    const button = e.target.closest('.copy-code');
    if (!button) return;
    const code = button.parentElement.querySelector('pre')?.textContent ?? '';
    navigator.clipboard?.writeText(code).then(() => { button.textContent = 'copied'; }, () => { button.textContent = 'copy failed'; });
  });
  $('cache-body').addEventListener('stats', (e) => updateMiniBar(e.detail));
  refreshServerStatus();
  cachePanel.start();
  prompt.focus();
}

init();
