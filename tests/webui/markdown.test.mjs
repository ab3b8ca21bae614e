// The web UI's Markdown renderer and highlighter (webui/markdown.js, webui/highlight.js) under
// node's test runner: the HTML they write for known inputs, and, for hostile and random
// inputs, that every tag and attribute in the output is one the renderer writes itself and
// every link is http(s) or mailto. Run: node --test tests/webui/markdown.test.mjs
import assert from 'node:assert/strict';
import { test } from 'node:test';

import { highlight } from '../../webui/highlight.js';
import { escapeHtml, renderMarkdown } from '../../webui/markdown.js';

const ALLOWED_TAGS = new Set(['p', 'h1', 'h2', 'h3', 'h4', 'h5', 'h6', 'ul', 'ol', 'li', 'blockquote', 'pre', 'code',
  'div', 'span', 'button', 'table', 'thead', 'tbody', 'tr', 'th', 'td', 'a', 'strong', 'em', 'del', 'hr', 'br']);
const ALLOWED_ATTRS = new Set(['class', 'href', 'target', 'rel', 'start', 'type', 'title']);

// Every tag of `html` is allowed, with allowed attributes whose values are quoted and hold
// no markup; hrefs are http(s) / mailto. Returns the number of tags seen.
function assertSafe(html, input) {
  const where = `\ninput: ${JSON.stringify(input)}\noutput: ${html}`;
  let tags = 0;
  const tagRe = /<\/?([a-zA-Z0-9]+)((?:\s+[a-z-]+="[^"<>]*")*)\s*>|<|>/g;
  for (let m; (m = tagRe.exec(html)) !== null;) {
    assert.ok(m[1], `a bare '${m[0]}' in the output${where}`);
    tags++;
    assert.ok(ALLOWED_TAGS.has(m[1].toLowerCase()), `tag <${m[1]}>${where}`);
    for (const a of m[2].matchAll(/([a-z-]+)="([^"]*)"/g)) {
      assert.ok(ALLOWED_ATTRS.has(a[1]), `attribute ${a[1]}${where}`);
      if (a[1] === 'href') assert.match(a[2], /^(https?:\/\/|mailto:)/i, `href${where}`);
    }
  }
  return tags;
}

test('block elements', () => {
  assert.equal(renderMarkdown('# Title'), '<h1>Title</h1>');
  assert.equal(renderMarkdown('### Three ###'), '<h3>Three</h3>');
  assert.equal(renderMarkdown('one\ntwo\n\nthree'), '<p>one\ntwo</p><p>three</p>');
  assert.equal(renderMarkdown('---'), '<hr>');
  assert.equal(renderMarkdown('> quoted\n> more'), '<blockquote><p>quoted\nmore</p></blockquote>');
  assert.equal(renderMarkdown('- a\n- b'), '<ul><li><p>a</p></li><li><p>b</p></li></ul>');
  assert.equal(renderMarkdown('3. c\n4. d'), '<ol start="3"><li><p>c</p></li><li><p>d</p></li></ol>');
  assert.equal(renderMarkdown('- a\n  - nested\n- b'),
    '<ul><li><p>a</p><ul><li><p>nested</p></li></ul></li><li><p>b</p></li></ul>');
  assert.equal(renderMarkdown('| a | b |\n|:--|--:|\n| 1 | 2 |'),
    '<div class="table-wrap"><table><thead><tr><th class="align-left">a</th><th class="align-right">b</th></tr></thead>' +
    '<tbody><tr><td class="align-left">1</td><td class="align-right">2</td></tr></tbody></table></div>');
});

test('code blocks are escaped and highlighted; an unclosed fence runs to the end', () => {
  const html = renderMarkdown('```python\nif x < 1: print("<b>")  # note\n```\nafter');
  assert.match(html, /<code class="language-python"><span class="tok-keyword">if<\/span> x &lt; <span class="tok-number">1<\/span>/);
  assert.match(html, /<span class="tok-string">&quot;&lt;b&gt;&quot;<\/span>/);
  assert.match(html, /<span class="tok-comment"># note<\/span>/);
  assert.match(html, /<p>after<\/p>$/);
  const open = renderMarkdown('text\n```js\nconst a = 1;\nstill code');
  assert.match(open, /still code<\/code><\/pre><\/div>$/);
  assert.equal(renderMarkdown('```\n<i>\n```'),
    '<div class="code-block"><button type="button" class="copy-code" title="Copy">copy</button><pre><code>&lt;i&gt;</code></pre></div>');
});

test('inline spans', () => {
  assert.equal(renderMarkdown('**b** *i* _j_ ~~d~~ `c*d*`'),
    '<p><strong>b</strong> <em>i</em> <em>j</em> <del>d</del> <code>c*d*</code></p>');
  assert.equal(renderMarkdown('2 * 3 * 4 and snake_case_name'), '<p>2 * 3 * 4 and snake_case_name</p>');
  assert.equal(renderMarkdown('[pagoda](https://example.com/a?b=1&c=2)'),
    '<p><a href="https://example.com/a?b=1&amp;c=2" target="_blank" rel="noopener noreferrer">pagoda</a></p>');
  assert.equal(renderMarkdown('see https://example.com/x.'),
    '<p>see <a href="https://example.com/x" target="_blank" rel="noopener noreferrer">https://example.com/x</a>.</p>');
  assert.equal(renderMarkdown('line  \nbreak'), '<p>line<br>\nbreak</p>');
});

test('links other than http(s) and mailto stay text', () => {
  for (const url of ['javascript:alert(1)', 'JaVaScRiPt:alert(1)', 'data:text/html,<script>x</script>',
    'vbscript:x', '/relative', '#frag', ' javascript:alert(1)']) {
    const html = renderMarkdown(`[x](${url}) ![img](${url})`);
    assert.ok(!html.includes('<a'), `${url} -> ${html}`);
    assertSafe(html, url);
  }
});

test('hostile HTML is shown as text', () => {
  const inputs = [
    '<script>alert(1)</script>',
    '<img src=x onerror=alert(1)>',
    '"><svg onload=alert(1)>',
    '[a](https://x.org/"onmouseover="alert(1))',
    '[a](https://x.org/ "title\' onmouseover=alert(1)")',
    '**<b>x</b>** `</code><script>` ~~<i>~~',
    '| <iframe> | b |\n|---|---|\n| <x onclick=y> | z |',
    '```"><script>\nx\n```',
    '# <h1 onclick=x>',
    '- <li>\n  > <blockquote onclick=y>',
    'https://x.org/<script>',
    '\u0000<script>\u00001\u0000',
  ];
  for (const input of inputs) {
    const html = renderMarkdown(input);
    assertSafe(html, input);
    assert.ok(!/<(script|img|svg|iframe|x|b|i)\b/i.test(html), `${input} -> ${html}`);
  }
});

test('random input never yields markup the renderer did not write', () => {
  const pieces = ['<', '>', '&', '"', "'", '`', '```', '*', '**', '_', '[', ']', '(', ')', '!', '#', '|', '-', '~~',
    ':', '/', '\n', '\n\n', ' ', '  ', '> ', '1. ', '- ', 'javascript:', 'https://x.org/', 'mailto:a@b', 'onerror=',
    '<script>', '</code>', 'a', 'word', '\\', '\t', '\u0000', '0'];
  let seed = 12345;
  const rand = (n) => { seed = (seed * 1103515245 + 12345) % 2147483648; return seed % n; };
  let tags = 0;
  for (let i = 0; i < 3000; i++) {
    let input = '';
    const len = 1 + rand(40);
    for (let k = 0; k < len; k++) input += pieces[rand(pieces.length)];
    tags += assertSafe(renderMarkdown(input), input);
  }
  assert.ok(tags > 3000, `the random inputs made only ${tags} tags: the test is not exercising the renderer`);
});

test('deep nesting is bounded', () => {
  const html = renderMarkdown('>'.repeat(5000) + ' x');
  assertSafe(html, 'deep quotes');
  assert.ok((html.match(/<blockquote>/g) || []).length <= 17);
  assertSafe(renderMarkdown(Array.from({ length: 200 }, (_, k) => `${' '.repeat(2 * k)}- item`).join('\n')), 'deep list');
});

test('the highlighter escapes everything and marks only tokens', () => {
  assert.equal(highlight('<a href="x">', 'unknown-lang'), '&lt;a href=&quot;x&quot;&gt;');
  assert.equal(highlight('{"k": [1, true, "<v>"]}', 'json'),
    '{<span class="tok-key">&quot;k&quot;</span>: [<span class="tok-number">1</span>, ' +
    '<span class="tok-keyword">true</span>, <span class="tok-string">&quot;&lt;v&gt;&quot;</span>]}');
  assert.equal(highlight('int main() { return 0; } // <x>', 'cpp'),
    '<span class="tok-keyword">int</span> <span class="tok-func">main</span>() { <span class="tok-keyword">return</span> ' +
    '<span class="tok-number">0</span>; } <span class="tok-comment">// &lt;x&gt;</span>');
  for (const lang of ['js', 'python', 'c', 'sh', 'json', 'sql']) {
    const html = highlight('"unterminated <script> /* x', lang);
    assert.ok(!html.includes('<script'), lang);
    assert.equal(html.replace(/<\/?span[^>]*>/g, ''), escapeHtml('"unterminated <script> /* x'), lang);
  }
});
