// A small Markdown renderer for model output, which is untrusted: every byte of the input is
// HTML-escaped before any tag is added, and the only tags the renderer writes are its own
// (p, h1-h6, ul/ol/li, blockquote, pre/code, table, a, strong, em, del, hr, br). A link is
// written only for http:, https: and mailto: URLs (never javascript: or data:), always with
// rel="noopener noreferrer"; images become links (the page fetches nothing it did not ship).
// The page's Content-Security-Policy backs this up: no inline script can run at all.
//
// Covered: fenced code (``` / ~~~, with a language for the highlighter; an unclosed fence runs
// to the end, as a streamed answer is rendered while it arrives), ATX headings, paragraphs,
// bullet and numbered lists (nested by indentation), blockquotes, GitHub tables, rules,
// inline code, **strong**, *em*, ~~del~~, links and bare URLs, hard breaks. Not covered:
// setext headings, reference links, raw HTML (shown as text), footnotes.
import { escapeHtml, highlight } from './highlight.js';

export { escapeHtml };

// Nesting of lists and quotes is bounded so hostile input cannot blow the stack.
const MAX_DEPTH = 16;

export function renderMarkdown(source) {
  // NUL is the placeholder mark of inline(); it never comes from real text.
  const text = String(source ?? '').replace(/\r\n?/g, '\n').replace(/\t/g, '    ').replace(/\u0000/g, '');
  return renderBlocks(text.split('\n'), 0);
}

const FENCE = /^ {0,3}(`{3,}|~{3,})\s*([\w+#.-]*)/;
const HEADING = /^ {0,3}(#{1,6})(?:\s+(.*?))?\s*#*\s*$/;
const RULE = /^ {0,3}([-*_])(?:\s*\1){2,}\s*$/;
const QUOTE = /^ {0,3}>/;
const LIST_ITEM = /^( {0,3})([-*+]|\d{1,9}[.)])(\s+|$)(.*)$/;
const TABLE_RULE = /^\s*\|?\s*:?-+:?\s*(\|\s*:?-+:?\s*)*\|?\s*$/;
const BLANK = /^\s*$/;

function startsBlock(line) {
  return FENCE.test(line) || HEADING.test(line) || RULE.test(line) || QUOTE.test(line) || LIST_ITEM.test(line);
}

function renderBlocks(lines, depth) {
  if (depth > MAX_DEPTH) return `<p>${inline(lines.join('\n'))}</p>`;
  let out = '';
  let i = 0;
  while (i < lines.length) {
    const line = lines[i];
    let m;
    if (BLANK.test(line)) {
      i++;
    } else if ((m = FENCE.exec(line))) {
      const fence = m[1];
      const closing = new RegExp(`^ {0,3}${fence[0] === '`' ? '`' : '~'}{${fence.length},}\\s*$`);
      const body = [];
      for (i++; i < lines.length && !closing.test(lines[i]); i++) body.push(lines[i]);
      i++;  // the closing fence (or past the end)
      out += codeBlock(body.join('\n'), m[2]);
    } else if ((m = HEADING.exec(line))) {
      const level = m[1].length;
      out += `<h${level}>${inline(m[2] ?? '')}</h${level}>`;
      i++;
    } else if (RULE.test(line)) {
      out += '<hr>';
      i++;
    } else if (QUOTE.test(line)) {
      const body = [];
      while (i < lines.length && (QUOTE.test(lines[i]) || (!BLANK.test(lines[i]) && !startsBlock(lines[i]) && body.length)))
        body.push(lines[i++].replace(/^ {0,3}> ?/, ''));
      out += `<blockquote>${renderBlocks(body, depth + 1)}</blockquote>`;
    } else if (LIST_ITEM.test(line)) {
      i = renderList(lines, i, depth, (html) => { out += html; });
    } else if (line.includes('|') && i + 1 < lines.length && TABLE_RULE.test(lines[i + 1]) && lines[i + 1].includes('-')) {
      i = renderTable(lines, i, (html) => { out += html; });
    } else {
      const para = [line];
      for (i++; i < lines.length && !BLANK.test(lines[i]) && !startsBlock(lines[i]); i++) para.push(lines[i]);
      out += `<p>${inline(para.join('\n'))}</p>`;
    }
  }
  return out;
}

function codeBlock(code, lang) {
  const cls = lang ? ` class="language-${escapeHtml(lang)}"` : '';
  const label = lang ? `<span class="code-lang">${escapeHtml(lang)}</span>` : '';
  return `<div class="code-block">${label}<button type="button" class="copy-code" title="Copy">copy</button>` +
         `<pre><code${cls}>${highlight(code, lang)}</code></pre></div>`;
}

// Items start at a marker of the list's kind indented less than the current item's text;
// deeper lines (and lazy continuation lines) belong to the item and are rendered as blocks.
function renderList(lines, i, depth, emit) {
  const first = LIST_ITEM.exec(lines[i]);
  const ordered = /\d/.test(first[2]);
  const start = ordered ? parseInt(first[2], 10) : 1;
  const items = [];
  let current = null;
  let textIndent = 0;
  while (i < lines.length) {
    const line = lines[i];
    const m = LIST_ITEM.exec(line);
    if (m && /\d/.test(m[2]) === ordered && (!current || m[1].length < textIndent)) {
      current = [m[4]];
      items.push(current);
      textIndent = m[1].length + m[2].length + Math.min(m[3].length, 4);
      i++;
    } else if (BLANK.test(line)) {
      const next = lines[i + 1];
      const nextItem = next !== undefined ? LIST_ITEM.exec(next) : null;
      const continues = next !== undefined &&
        ((/^\s+\S/.test(next) && next.search(/\S/) >= Math.min(textIndent, 2)) ||
         (nextItem && /\d/.test(nextItem[2]) === ordered && nextItem[1].length < textIndent));
      if (!continues) break;
      current.push('');
      i++;
    } else if (/^\s+\S/.test(line) && line.search(/\S/) >= Math.min(textIndent, 2)) {
      current.push(line.slice(Math.min(line.search(/\S/), textIndent)));
      i++;
    } else if (!startsBlock(line)) {
      current.push(line);  // lazy continuation
      i++;
    } else {
      break;
    }
  }
  const tag = ordered ? 'ol' : 'ul';
  const startAttr = ordered && start !== 1 ? ` start="${start}"` : '';
  emit(`<${tag}${startAttr}>${items.map((item) => `<li>${renderBlocks(item, depth + 1)}</li>`).join('')}</${tag}>`);
  return i;
}

function splitRow(line) {
  let s = line.trim();
  if (s.startsWith('|')) s = s.slice(1);
  if (s.endsWith('|') && !s.endsWith('\\|')) s = s.slice(0, -1);
  return s.split(/(?<!\\)\|/).map((c) => c.trim().replace(/\\\|/g, '|'));
}

function renderTable(lines, i, emit) {
  const head = splitRow(lines[i]);
  const aligns = splitRow(lines[i + 1]).map((c) =>
    c.startsWith(':') && c.endsWith(':') ? 'center' : c.endsWith(':') ? 'right' : c.startsWith(':') ? 'left' : '');
  const cell = (tag, text, k) => `<${tag}${aligns[k] ? ` class="align-${aligns[k]}"` : ''}>${inline(text)}</${tag}>`;
  let html = `<div class="table-wrap"><table><thead><tr>${head.map((c, k) => cell('th', c, k)).join('')}</tr></thead><tbody>`;
  for (i += 2; i < lines.length && lines[i].includes('|') && !BLANK.test(lines[i]); i++) {
    const row = splitRow(lines[i]);
    html += `<tr>${head.map((_, k) => cell('td', row[k] ?? '', k)).join('')}</tr>`;
  }
  emit(`${html}</tbody></table></div>`);
  return i;
}

function safeHref(escapedUrl) {
  return /^(https?:\/\/|mailto:)/i.test(escapedUrl) ? escapedUrl : null;
}

// Inline spans. Code spans, links and URLs are cut out first and kept as NUL-delimited
// placeholders, so emphasis never reaches into them; everything else is escaped text.
// Spans stay within a line and are bounded in length (500 characters, link labels 200, code 4,000): an
// answer is re-rendered on every frame while it streams, and unbounded lazy matches over
// unclosed markers ('**a **a **a ...') are quadratic: 550 ms for 30 KB, now about 50 ms.
function inline(text) {
  const stash = [];
  const keep = (html) => `\u0000${stash.push(html) - 1}\u0000`;
  let s = text.replace(/(`+)([^`]|[^`][\s\S]{0,4000}?[^`])\1(?!`)/g, (_, ticks, code) => keep(`<code>${escapeHtml(code)}</code>`));
  s = escapeHtml(s);
  s = s.replace(/(!?)\[([^\]\n]{0,200})\]\(\s*((?:[^\s()&]|&amp;){1,2000})(?:\s+&quot;[^\n]*?&quot;)?\s*\)/g, (all, bang, label, url) => {
    const href = safeHref(url);
    if (!href) return all;
    return keep(`<a href="${href}" target="_blank" rel="noopener noreferrer">${label || href}</a>`);
  });
  s = s.replace(/\bhttps?:\/\/(?:[^\s<&\u0000]|&amp;)+(?:[^\s<&\u0000.,;:!?)\]'*_~]|&amp;)/g,
    (url) => keep(`<a href="${url}" target="_blank" rel="noopener noreferrer">${url}</a>`));
  s = s.replace(/\*\*(?=\S)([^\n]{0,500}?\S)\*\*/g, '<strong>$1</strong>')
       .replace(/(^|[^\w])__(?=\S)([^\n]{0,500}?\S)__(?!\w)/g, '$1<strong>$2</strong>')
       .replace(/(^|[^*\w])\*(?=[^\s*])([^*\n]{0,500}?[^\s*])\*(?![*\w])/g, '$1<em>$2</em>')
       .replace(/(^|[^\w])_(?=\S)([^_\n]{0,500}?\S)_(?!\w)/g, '$1<em>$2</em>')
       .replace(/~~(?=\S)([^\n]{0,500}?\S)~~/g, '<del>$1</del>')
       .replace(/(?: {2,}|\\)\n/g, '<br>\n');
  // Placeholders can nest (a link label holding a code span): restore until none is left.
  for (let pass = 0; pass < 3 && s.includes('\u0000'); pass++)
    s = s.replace(/\u0000(\d+)\u0000/g, (_, k) => stash[Number(k)]);
  return s;
}
