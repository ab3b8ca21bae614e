// What the page keeps in the browser's localStorage (nothing is stored on the server):
//   pagoda.conversations  [{id, title, created, updated, system, messages: [Message], dropped?}], newest first
//   pagoda.active         the id of the open conversation
//   pagoda.settings       sampling settings (see DEFAULT_SETTINGS)
//   pagoda.theme          'light' | 'dark' (absent: the system's preference)
// Message: {role: 'user' | 'assistant', content, images?: [{url, name, type} | {name, type, dropped}],
//           reasoning?, tool_calls?: [{id, name, arguments}],
//           format?: 'json', stats?: {prompt, cached, generated, ttft_ms, tokens_per_s, total_ms, finish},
//           error?, contextFull? (refused: the prompt did not fit the context), stopped?}
// A conversation's dropped?: how many of its oldest messages were dropped to fit the context.
// A full localStorage (about 5 MB per origin; one photo as a data: URL can take most of it)
// first stores the conversations without their images' data (the page keeps the images in
// memory: they are lost on a reload), then drops the oldest conversations rather than lose
// the one being written.

import { stripImageData } from './attachments.js';

const CONVERSATIONS = 'pagoda.conversations';
const ACTIVE = 'pagoda.active';
const SETTINGS = 'pagoda.settings';

export const DEFAULT_SETTINGS = {
  system: '',           // the system prompt of new conversations
  temperature: '',      // '' = the server's default
  top_p: '',
  top_k: '',
  min_p: '',
  max_tokens: '',
  seed: '',
  response_format: 'text',  // 'text' | 'json_object' | 'json_schema'
  json_schema: '',
  tools: '',            // a JSON array of OpenAI function tools
  extra: '',            // a JSON object merged into every request body
};

function read(key, fallback) {
  try {
    const v = localStorage.getItem(key);
    return v === null ? fallback : JSON.parse(v);
  } catch {
    return fallback;
  }
}

export function loadConversations() {
  const list = read(CONVERSATIONS, []);
  return Array.isArray(list) ? list.filter((c) => c && typeof c.id === 'string' && Array.isArray(c.messages)) : [];
}

export function saveConversations(list) {
  try {
    localStorage.setItem(CONVERSATIONS, JSON.stringify(list));
    return;
  } catch { /* full: without the images' data */ }
  const kept = stripImageData(list);
  for (;;) {
    try {
      localStorage.setItem(CONVERSATIONS, JSON.stringify(kept));
      return;
    } catch (e) {
      if (kept.length <= 1) throw e;
      kept.pop();  // the oldest
    }
  }
}

export function activeId() {
  return localStorage.getItem(ACTIVE) || '';
}

export function setActiveId(id) {
  localStorage.setItem(ACTIVE, id);
}

export function loadSettings() {
  return { ...DEFAULT_SETTINGS, ...read(SETTINGS, {}) };
}

export function saveSettings(settings) {
  localStorage.setItem(SETTINGS, JSON.stringify(settings));
}

export function newConversation(system) {
  const now = Date.now();
  return { id: `c${now.toString(36)}${Math.random().toString(36).slice(2, 8)}`, title: 'New chat', created: now,
           updated: now, system: system || '', messages: [] };
}
