#!/usr/bin/python3
"""Independent reference for the named pre-tokenizers: Python's `re` engine.

Reads a JSON file {"rows": [{"name": str, "regexes": [str, ...]}], "texts": [str, ...]}
and prints {"name": [[piece, ...] per text]} as JSON: each row's regexes applied in
order, each re-splitting every piece of the one before with the text between matches
kept as pieces of its own (HF Split, behavior Isolated), empty pieces dropped.

`re` has no \\p{..} classes and no \\x{..} escapes, so the PCRE2 patterns are
rewritten: \\p{X} becomes the explicit ranges of every code point whose Unicode
general category starts with X (from Python's own unicodedata tables, not PCRE2's),
\\x{H} the character itself. Everything else is passed through: both engines are
leftmost-first backtracking engines with the same meaning for the syntax the table
uses (classes, alternation, greedy quantifiers, (?!..), (?:..), $).
"""
import json
import re
import sys
import unicodedata

_CATEGORIES = None
_CATEGORY_RANGES = {}


def category_ranges(prefix):
    """Class body (no brackets) for every code point whose category starts with prefix."""
    global _CATEGORIES
    if prefix in _CATEGORY_RANGES:
        return _CATEGORY_RANGES[prefix]
    if _CATEGORIES is None:
        _CATEGORIES = [unicodedata.category(chr(cp)) for cp in range(0x110000)]
    parts = []
    start = None
    for cp in range(0x110001):
        inside = cp < 0x110000 and _CATEGORIES[cp] != 'Cs' and _CATEGORIES[cp].startswith(prefix)
        if inside and start is None:
            start = cp
        elif not inside and start is not None:
            end = cp - 1
            parts.append('\\U%08X' % start if start == end else '\\U%08X-\\U%08X' % (start, end))
            start = None
    _CATEGORY_RANGES[prefix] = ''.join(parts)
    return _CATEGORY_RANGES[prefix]


def translate(pattern):
    out = []
    i = 0
    in_class = False
    while i < len(pattern):
        c = pattern[i]
        if c == '\\':
            nxt = pattern[i + 1]
            if nxt == 'p' and pattern[i + 2] == '{':
                end = pattern.index('}', i)
                body = category_ranges(pattern[i + 3:end])
                out.append(body if in_class else '[' + body + ']')
                i = end + 1
                continue
            if nxt == 'x' and pattern[i + 2] == '{':
                end = pattern.index('}', i)
                out.append('\\U%08X' % int(pattern[i + 3:end], 16))
                i = end + 1
                continue
            out.append(pattern[i:i + 2])
            i += 2
            continue
        if c == '[' and not in_class:
            in_class = True
            out.append(c)
            # A ']' or '^]' right after '[' is literal in both engines.
            if pattern[i + 1:i + 2] == '^':
                out.append('^')
                i += 1
            i += 1
            continue
        if c == ']' and in_class:
            in_class = False
        elif c == '[' and in_class:
            out.append('\\[')  # literal '[' inside a class (Python warns on a bare one)
            i += 1
            continue
        out.append(c)
        i += 1
    return ''.join(out)


def cut(regexes, text):
    pieces = [text] if text else []
    for pattern in regexes:
        rx = re.compile(pattern)
        nxt = []
        for piece in pieces:
            prev = 0
            for m in rx.finditer(piece):
                if m.end() == m.start():
                    continue
                if m.start() > prev:
                    nxt.append(piece[prev:m.start()])
                nxt.append(m.group(0))
                prev = m.end()
            if prev < len(piece):
                nxt.append(piece[prev:])
        pieces = nxt
    return pieces


def main():
    with open(sys.argv[1], encoding='utf-8') as f:
        spec = json.load(f)
    result = {}
    for row in spec['rows']:
        regexes = [translate(r) for r in row['regexes']]
        result[row['name']] = [cut(regexes, t) for t in spec['texts']]
    json.dump(result, sys.stdout, ensure_ascii=True)


if __name__ == '__main__':
    main()
