// One chat message as the page shows it: the article for a user message (its text, its
// images' thumbnails) or an assistant one (reasoning folded, the content as Markdown or
// structured JSON, tool calls, an error, the stats chips), with its Edit / Regenerate
// buttons. DOM only: what the buttons do, and which conversation is open or generating,
// stay in app.js. Everything the model writes goes through renderMarkdown (escapes
// first), highlight / escapeHtml or textContent, never into innerHTML raw.
import { escapeHtml, highlight } from './highlight.js';
import { renderMarkdown } from './markdown.js';

// The article for message `m`, the conversation's `index`-th; `previous`: the message
// before it (an assistant answer to a user message gets Regenerate); `streaming`: `m` is
// the message being generated.
export function messageElement(m, index, previous, streaming) {
  const art = document.createElement('article');
  art.className = `msg ${m.role}`;
  art.dataset.index = index;
  art.dataset.testid = `message-${m.role}`;
  const head = document.createElement('div');
  head.className = 'msg-head';
  const role = document.createElement('div');
  role.className = 'msg-role';
  role.textContent = m.role === 'user' ? 'you' : 'assistant';
  const actions = document.createElement('div');
  actions.className = 'msg-actions';
  if (m.role === 'user') {
    actions.append(actionButton('edit', 'Edit', 'Edit this message and send it again (the messages after it go)'));
  } else if (previous?.role === 'user') {
    actions.append(actionButton('regenerate', 'Regenerate', 'Write this answer again (the messages after it go)'));
  }
  head.append(role, actions);
  art.append(head);
  if (m.role === 'user') {
    if (m.images?.length) art.append(imagesElement(m.images));
    const body = document.createElement('div');
    body.className = 'user-text';
    body.textContent = m.content;
    body.hidden = !m.content && Boolean(m.images?.length);
    art.append(body);
  } else {
    updateAssistant(art, m, streaming);
  }
  return art;
}

// A user message's images: thumbnails, or a note for one whose data was not kept (stored
// without it when localStorage was full, then the page reloaded).
function imagesElement(images) {
  const box = document.createElement('div');
  box.className = 'msg-images';
  box.dataset.testid = 'message-images';
  box.append(...images.map((i) => {
    if (typeof i.url === 'string' && i.url.startsWith('data:')) {
      const img = document.createElement('img');
      img.src = i.url;
      img.alt = i.name || 'image';
      img.title = i.name || '';
      img.dataset.testid = 'message-image';
      return img;
    }
    const note = document.createElement('span');
    note.className = 'image-dropped';
    note.textContent = `${i.name || 'image'}: not kept (the browser's storage was full)`;
    return note;
  }));
  return box;
}

function actionButton(action, label, title) {
  const b = document.createElement('button');
  b.type = 'button';
  b.className = 'msg-action';
  b.dataset.action = action;
  b.dataset.testid = action === 'edit' ? 'edit-message' : action;
  b.textContent = label;
  b.title = title;
  return b;
}

function part(art, cls, tag = 'div') {
  let e = art.querySelector(`:scope > .${cls}`);
  if (!e) {
    e = document.createElement(tag);
    e.className = cls;
    art.append(e);
  }
  return e;
}

function prettyJson(text) {
  try {
    return JSON.stringify(JSON.parse(text), null, 2);
  } catch {
    return null;
  }
}

// Fills an assistant message's parts, keeping the elements (so a folded or unfolded
// reasoning block stays as the reader left it while tokens arrive). `streaming`: it is the
// message being generated (its JSON is not pretty-printed yet; its content is marked).
export function updateAssistant(art, m, streaming) {
  if (m.reasoning) {
    const details = part(art, 'reasoning', 'details');
    let summary = details.querySelector('summary');
    if (!summary) {
      summary = document.createElement('summary');
      details.append(summary);
    }
    const words = m.reasoning.trim().split(/\s+/).length;
    summary.textContent = `Reasoning · ${words} word${words === 1 ? '' : 's'}`;
    part(details, 'md').innerHTML = renderMarkdown(m.reasoning);
  }
  const content = part(art, 'content');
  content.dataset.testid = 'assistant-content';
  const json = m.format === 'json' && !streaming ? prettyJson(m.content) : null;
  if (json !== null) {
    content.innerHTML = '<div class="structured-label">structured output</div>' +
      `<div class="code-block"><pre><code class="language-json">${highlight(json, 'json')}</code></pre></div>`;
  } else {
    content.innerHTML = renderMarkdown(m.content || '');
  }
  content.classList.toggle('streaming', streaming);
  if (m.tool_calls?.length) {
    const box = part(art, 'tool-calls');
    box.replaceChildren(...m.tool_calls.map((tc) => {
      const e = document.createElement('div');
      e.className = 'tool-call';
      e.dataset.testid = 'tool-call';
      e.innerHTML = `<div class="tool-name">tool call <b>${escapeHtml(tc.name || '?')}</b>` +
        `<span class="muted"> ${escapeHtml(tc.id || '')}</span></div>` +
        `<pre><code class="language-json">${highlight(prettyJson(tc.arguments) ?? tc.arguments ?? '', 'json')}</code></pre>`;
      return e;
    }));
  }
  if (m.error) {
    const err = part(art, 'msg-error');
    err.setAttribute('role', 'alert');
    err.textContent = m.error;
  }
  renderStats(part(art, 'msg-stats'), m);
}

function chip(label, value, testid, title) {
  const e = document.createElement('span');
  e.className = 'chip';
  e.dataset.testid = testid;
  if (title) e.title = title;
  const l = document.createElement('span');
  l.className = 'chip-label';
  l.textContent = label;
  const v = document.createElement('b');
  v.textContent = value;
  e.append(l, v);
  return e;
}

function renderStats(box, m) {
  const s = m.stats || {};
  const chips = [];
  if (s.prompt !== undefined) {
    chips.push(chip('prompt', String(s.prompt), 'stat-prompt', 'prompt tokens'));
    const cached = chip('cached', String(s.cached ?? 0), 'stat-cached', 'prompt tokens read from the prefix cache');
    const bar = document.createElement('span');
    bar.className = 'cache-ratio';
    const fill = document.createElement('span');
    fill.style.width = `${s.prompt ? (100 * (s.cached ?? 0)) / s.prompt : 0}%`;
    bar.append(fill);
    cached.append(bar);
    chips.push(cached);
  }
  if (s.generated !== undefined) chips.push(chip('generated', `${s.approx ? '≈' : ''}${s.generated}`, 'stat-generated'));
  if (s.ttft_ms !== undefined && s.ttft_ms !== null) chips.push(chip('TTFT', `${Math.round(s.ttft_ms)} ms`, 'stat-ttft', 'time to first token'));
  if (s.tokens_per_s) chips.push(chip('speed', `${s.tokens_per_s.toFixed(1)} tok/s`, 'stat-tps', 'generated tokens per second after the first'));
  if (s.finish) chips.push(chip('finish', s.finish, 'stat-finish'));
  box.replaceChildren(...chips);
  box.hidden = chips.length === 0;
}
