// The live KV cache panel: polls GET v1/cache/stats (every second; every 250 ms while a
// generation runs; not while the tab is hidden) and draws the pool as a bar of blocks in use
// by running requests / kept by the prefix cache / free, with bytes, the prefix cache's
// entries, hit rate and evictions by reason, and the engine's queue.
// Why polling and not a server-sent event stream: one small JSON GET a second costs the server
// nothing measurable (the handler copies counters), needs no new endpoint, and a missed poll
// is simply the next one.
import { AuthError, getJson, postJson } from './api.js';

export function formatBytes(n) {
  if (n === null || n === undefined) return '—';
  const units = ['B', 'KiB', 'MiB', 'GiB', 'TiB'];
  let v = Number(n);
  let u = 0;
  while (v >= 1024 && u < units.length - 1) { v /= 1024; u++; }
  return `${u === 0 ? v : v.toFixed(v < 10 ? 2 : v < 100 ? 1 : 0)} ${units[u]}`;
}

const fmt = (n) => Number(n ?? 0).toLocaleString('en-US');
const pct = (x) => `${(100 * x).toFixed(x > 0 && x < 0.1 ? 1 : 0)}%`;

function el(tag, attrs = {}, ...children) {
  const e = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs)) {
    if (k === 'class') e.className = v;
    else if (k === 'text') e.textContent = v;
    else e.setAttribute(k, v);
  }
  for (const c of children) e.append(c);
  return e;
}

function row(label, value, testid) {
  const attrs = testid ? { 'data-testid': testid } : {};
  return el('div', { class: 'kv-row' }, el('span', { class: 'kv-label', text: label }), el('span', { class: 'kv-value', text: value, ...attrs }));
}

export class CachePanel {
  // onAuthError: the server wants the API key; onReachable(bool): whether the last poll got
  // an answer (so the page notices a server that went away or came back).
  constructor(root, { onAuthError, onReachable }) {
    this.root = root;
    this.onAuthError = onAuthError;
    this.onReachable = onReachable;
    this.fast = false;
    this.timer = null;
    this.updates = 0;
    this.inFlight = false;
    document.addEventListener('visibilitychange', () => { if (!document.hidden) this.poll(); });
  }

  start() { this.schedule(0); }

  // Poll faster while a generation runs, so the bar moves with it.
  setFast(fast) {
    this.fast = fast;
    this.schedule(0);
  }

  schedule(ms) {
    clearTimeout(this.timer);
    this.timer = setTimeout(() => this.poll(), ms);
  }

  async poll() {
    if (this.inFlight) return;
    if (document.hidden) { this.schedule(1000); return; }
    this.inFlight = true;
    try {
      const stats = await getJson('v1/cache/stats');
      this.onReachable?.(true);
      this.render(stats);
    } catch (e) {
      if (e instanceof AuthError) this.onAuthError?.();
      else this.onReachable?.(false);
      this.renderError(e);
    } finally {
      this.inFlight = false;
      this.schedule(this.fast ? 250 : 1000);
    }
  }

  renderError(e) {
    const status = this.root.querySelector('.cache-status');
    if (status) status.textContent = e instanceof AuthError ? 'needs the API key' : `unavailable: ${e.message}`;
  }

  render(s) {
    this.updates++;
    const p = s.pool;
    const c = s.prefix_cache;
    const budget = Math.max(1, p.blocks_budget);
    const live = p.blocks_live;
    const cached = p.blocks_evictable;
    const free = Math.max(0, p.blocks_free);
    const bpb = p.bytes_per_block;

    const bar = el('div', { class: 'pool-bar', role: 'img',
      'aria-label': `KV pool: ${live} blocks in use, ${cached} cached, ${free} free of ${p.blocks_budget}` });
    for (const [cls, n] of [['seg-live', live], ['seg-cached', cached], ['seg-free', free]]) {
      const seg = el('div', { class: `seg ${cls}` });
      // A segment of a few blocks in a pool of thousands still shows as a sliver.
      seg.style.width = n > 0 ? `max(3px, ${(100 * n) / budget}%)` : '0';
      bar.append(seg);
    }
    const legend = el('div', { class: 'legend' },
      el('div', {}, el('span', { class: 'swatch seg-live' }), el('span', { text: 'in use ' }),
        el('b', { text: `${fmt(live)} blocks`, 'data-testid': 'pool-live' }), el('span', { class: 'muted', text: ` · ${formatBytes(live * bpb)}` })),
      el('div', {}, el('span', { class: 'swatch seg-cached' }), el('span', { text: 'cached ' }),
        el('b', { text: `${fmt(cached)} blocks`, 'data-testid': 'pool-cached' }), el('span', { class: 'muted', text: ` · ${formatBytes(cached * bpb)}` })),
      el('div', {}, el('span', { class: 'swatch seg-free' }), el('span', { text: 'free ' }),
        el('b', { text: `${fmt(free)} blocks` }), el('span', { class: 'muted', text: ` · ${formatBytes(free * bpb)}` })));

    const hitRate = c.queried_tokens ? c.hit_tokens / c.queried_tokens : 0;
    const sections = [
      el('h3', { text: 'KV pool' }), bar, legend,
      row('budget', `${formatBytes(p.bytes_budget)} · ${fmt(p.blocks_budget)} × ${formatBytes(bpb)}`),
      row('tokens', `${fmt(p.tokens_in_use)} / ${fmt(p.tokens_capacity)} (block ${p.block_size})`),
      row('committed', formatBytes(p.bytes_reserved)),
      el('h3', { text: 'Prefix cache' }),
      row('state', c.enabled ? 'on' : 'off'),
      row('entries', fmt(c.entries), 'cache-entries'),
      row('cached', `${fmt(c.cached_tokens)} tokens · ${formatBytes(c.cached_bytes)}`),
      row('hit rate', `${pct(hitRate)} of tokens (${fmt(c.hit_tokens)} / ${fmt(c.queried_tokens)})`, 'cache-hit-rate'),
      row('lookups', `${fmt(c.hits)} hits / ${fmt(c.lookups)}`),
      el('h3', { text: 'Evictions' }),
      row('LRU', fmt(c.evictions_lru)),
      row('capacity', fmt(c.evictions_capacity)),
      row('TTL', fmt(c.evictions_ttl)),
      row('max entries', fmt(c.evictions_max_entries)),
      row('pool pressure', fmt(c.evictions_pool_pressure)),
      row('blocks evicted', fmt(c.evicted_blocks)),
      el('h3', { text: 'Engine' }),
      row('running / waiting', `${fmt(s.engine.running)} / ${fmt(s.engine.waiting)}`, 'engine-running'),
      row('preemptions', fmt(s.engine.preemptions)),
      row('tokens prefilled', fmt(s.engine.tokens_prefilled), 'tokens-prefilled'),
      row('tokens generated', fmt(s.engine.tokens_generated), 'tokens-generated'),
      row('process RSS', formatBytes(s.memory?.process_rss_bytes)),
      row('weights', formatBytes(s.memory?.resident_weight_bytes)),
    ];
    const reset = el('button', { type: 'button', class: 'small', text: 'Reset prefix cache' });
    reset.addEventListener('click', async () => {
      try { await postJson('v1/cache/reset', {}); } catch (e) { if (e instanceof AuthError) this.onAuthError?.(); }
      this.poll();
    });
    const status = el('div', { class: 'cache-status muted', 'data-testid': 'cache-updated', 'data-updates': String(this.updates),
      text: `live · updated ${new Date().toLocaleTimeString()}` });
    this.root.replaceChildren(...sections, el('div', { class: 'panel-actions' }, reset), status);
    this.root.dispatchEvent(new CustomEvent('stats', { detail: s }));
  }
}
