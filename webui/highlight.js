// A tiny syntax highlighter for code blocks: one pass of a combined regular expression that
// finds comments, strings, numbers, keywords and function names for a few language families,
// and wraps them in <span class="tok-KIND">. Every piece of the code is HTML-escaped: the
// output holds no markup but those spans. Unknown languages come out escaped and plain.
// Not a parser: a keyword inside an unusual literal may be coloured wrongly; that is the price
// of ~100 lines instead of a library.

const ESCAPES = { '&': '&amp;', '<': '&lt;', '>': '&gt;', '"': '&quot;', "'": '&#39;' };

// The five characters that can end text or an attribute value in HTML, as entities.
export function escapeHtml(text) {
  return String(text).replace(/[&<>"']/g, (c) => ESCAPES[c]);
}

const C_LIKE_TYPES = 'void bool char short int long float double signed unsigned auto const static struct enum union';
const FAMILIES = {
  js: {
    keywords: 'await async break case catch class const continue debugger default delete do else export extends ' +
      'finally for from function if import in instanceof let new of return static super switch this throw try ' +
      'typeof var void while with yield true false null undefined interface type enum implements private public readonly',
    lineComment: '//', blockComment: true, strings: ['"', "'", '`'],
  },
  python: {
    keywords: 'and as assert async await break class continue def del elif else except finally for from global if ' +
      'import in is lambda nonlocal not or pass raise return try while with yield True False None self print',
    lineComment: '#', blockComment: false, strings: ['"""', "'''", '"', "'"],
  },
  c: {
    keywords: `${C_LIKE_TYPES} break case continue default do else extern for goto if inline register restrict return ` +
      'sizeof switch typedef volatile while class namespace template typename public private protected virtual ' +
      'override final new delete this nullptr true false constexpr noexcept using std try catch throw include define ' +
      'package import func go defer chan map range var type interface select fallthrough fn let mut impl trait pub ' +
      'use mod match loop self Self where async await move ref crate super dyn String Vec Option Some None Ok Err ' +
      'boolean byte extends implements instanceof final abstract synchronized null',
    lineComment: '//', blockComment: true, strings: ['"', "'"],
  },
  sh: {
    keywords: 'if then else elif fi for while until do done case esac function in return local export set unset ' +
      'echo exit cd source alias readonly shift trap',
    lineComment: '#', blockComment: false, strings: ['"', "'"],
  },
  json: { keywords: 'true false null', lineComment: null, blockComment: false, strings: ['"'] },
  sql: {
    keywords: 'select from where insert into values update set delete create table drop alter index join left right ' +
      'inner outer on group by order having limit offset as and or not null is in like distinct union all primary key',
    lineComment: '--', blockComment: true, strings: ["'", '"'], caseless: true,
  },
};
const ALIASES = {
  javascript: 'js', js: 'js', mjs: 'js', jsx: 'js', ts: 'js', typescript: 'js', tsx: 'js',
  python: 'python', py: 'python', python3: 'python',
  c: 'c', h: 'c', cpp: 'c', 'c++': 'c', cc: 'c', hpp: 'c', cxx: 'c', java: 'c', cs: 'c', csharp: 'c', go: 'c',
  golang: 'c', rust: 'c', rs: 'c', kotlin: 'c', swift: 'c', scala: 'c',
  sh: 'sh', bash: 'sh', shell: 'sh', zsh: 'sh', console: 'sh',
  json: 'json', jsonc: 'json', sql: 'sql',
};

const reEscape = (s) => s.replace(/[.*+?^${}()|[\]\\]/g, '\\$&');
const compiled = new Map();

function compile(name) {
  if (compiled.has(name)) return compiled.get(name);
  const f = FAMILIES[name];
  const parts = [];
  if (f.blockComment) parts.push('(?<comment>/\\*[\\s\\S]*?(?:\\*/|$)' + (f.lineComment ? `|${reEscape(f.lineComment)}.*` : '') + ')');
  else if (f.lineComment) parts.push(`(?<comment>${reEscape(f.lineComment)}.*)`);
  const strings = f.strings.map((q) => q.length === 3
    ? `${reEscape(q)}[\\s\\S]*?(?:${reEscape(q)}|$)`
    : `${reEscape(q)}(?:\\\\[\\s\\S]|(?!${reEscape(q)})[^\\\\${q === '`' ? '' : '\\n'}])*(?:${reEscape(q)}|$)`);
  parts.push(`(?<string>${strings.join('|')})`);
  parts.push('(?<number>\\b(?:0[xX][\\da-fA-F_]+|\\d[\\d_]*(?:\\.\\d[\\d_]*)?(?:[eE][+-]?\\d+)?)\\b)');
  parts.push(`(?<keyword>\\b(?:${f.keywords.split(' ').map(reEscape).join('|')})\\b)`);
  parts.push('(?<func>\\b[A-Za-z_][\\w]*(?=\\s*\\())');
  const re = new RegExp(parts.join('|'), f.caseless ? 'gi' : 'g');
  compiled.set(name, re);
  return re;
}

export function highlight(code, lang) {
  const family = ALIASES[String(lang || '').toLowerCase()];
  if (!family) return escapeHtml(code);
  const re = compile(family);
  re.lastIndex = 0;
  let out = '';
  let pos = 0;
  for (let m; (m = re.exec(code)) !== null;) {
    if (m[0] === '') { re.lastIndex++; continue; }
    let kind = Object.keys(m.groups).find((k) => m.groups[k] !== undefined);
    // A JSON string followed by ':' is a key.
    if (family === 'json' && kind === 'string' && /^\s*:/.test(code.slice(re.lastIndex))) kind = 'key';
    out += escapeHtml(code.slice(pos, m.index)) + `<span class="tok-${kind}">${escapeHtml(m[0])}</span>`;
    pos = re.lastIndex;
  }
  return out + escapeHtml(code.slice(pos));
}
