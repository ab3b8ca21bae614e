// Unit tests of the Jinja engine (src/jinja/): each language feature against the
// output python3-jinja2 gives in transformers' environment (trim_blocks,
// lstrip_blocks, loopcontrols, immutable sandbox) and error cases. Budgets and
// hostile templates are in jinja_hostile_test.cpp; the whole-template comparison
// with the reference is tests/chat/chat_template_conformance_test.py.
#include <gtest/gtest.h>

#include <string>
#include <thread>
#include <vector>

#include "jinja/jinja_render.h"

namespace pagoda::jinja_test {
namespace {

int syntax_error_line(const std::string& src) {
  try {
    jinja::Template t(src);
  } catch (const jinja::SyntaxError& e) {
    return e.line;
  }
  return -1;
}

// ---- whitespace control ---------------------------------------------------------

TEST(JinjaWhitespace, TrimBlocksEatsOneNewlineAfterBlockTag) {
  EXPECT_EQ(render("{% if true %}\nA\n{% endif %}\nB"), "A\nB");
  EXPECT_EQ(render("{% if true %}\n\nA{% endif %}"), "\nA");
}

TEST(JinjaWhitespace, TrimBlocksDoesNotApplyToPrintTags) { EXPECT_EQ(render("{{ 'a' }}\nb"), "a\nb"); }

TEST(JinjaWhitespace, LstripBlocksRemovesIndentBeforeBlockTagsOnly) {
  EXPECT_EQ(render("  {% if true %}x{% endif %}"), "x");
  EXPECT_EQ(render("a\n    {% if true %}x\n    {% endif %}y"), "a\nx\ny");
  EXPECT_EQ(render("  {{ 'x' }}"), "  x");
  EXPECT_EQ(render("a  {% if true %}x{% endif %}"), "a  x");
}

TEST(JinjaWhitespace, PlusDisablesLstrip) { EXPECT_EQ(render("  {%+ if true %}x{% endif %}"), "  x"); }

TEST(JinjaWhitespace, MinusStripsAllWhitespaceOnThatSide) {
  EXPECT_EQ(render("a  \n {{- 'b' -}} \n\n c"), "abc");
  EXPECT_EQ(render("a\n\n{%- if true -%}\n\n b {%- endif %}"), "ab");
}

TEST(JinjaWhitespace, CommentsAreRemovedWithTheSameRules) {
  EXPECT_EQ(render("a\n  {# note #}\nb"), "a\nb");
  EXPECT_EQ(render("a {#- x -#} b"), "ab");
}

TEST(JinjaWhitespace, OneTrailingNewlineOfTheSourceIsDropped) {
  EXPECT_EQ(render("x\n"), "x");
  EXPECT_EQ(render("x\n\n"), "x\n");
  EXPECT_EQ(render("a\r\nb"), "a\nb");
}

// ---- values and printing ----------------------------------------------------------

TEST(JinjaValues, PrintsLikePythonStr) {
  EXPECT_EQ(render("{{ true }} {{ none }} {{ 1 }} {{ 1.0 }} {{ 0.1 }} {{ 1e-5 }} {{ 1e16 }} {{ 3/2 }}"),
            "True None 1 1.0 0.1 1e-05 1e+16 1.5");
  EXPECT_EQ(render("{{ ['a', 1, none, {'k': \"it's\"}] }}"), "['a', 1, None, {'k': \"it's\"}]");
  EXPECT_EQ(render("{{ (1,) }} {{ (1, 2) }}"), "(1,) (1, 2)");
}

TEST(JinjaValues, StringLiteralEscapesDecodeAsPython) {
  EXPECT_EQ(render(R"({{ "a\n\t\x41\u4f60\d" }})"), "a\n\tA\xe4\xbd\xa0\\d");
  EXPECT_EQ(render("{{ 'ab' 'cd' }}"), "abcd");
}

TEST(JinjaValues, ArithmeticFollowsPython) {
  EXPECT_EQ(render("{{ 7 // 2 }} {{ -7 // 2 }} {{ -7 % 3 }} {{ 2 ** 10 }} {{ 7 / 7 }} {{ 1 + 2.5 }} {{ 'a' + 'b' }}"),
            "3 -4 2 1024 1.0 3.5 ab");
  EXPECT_EQ(render("{{ 'ab' * 2 }} {{ [1] + [2] }} {{ 1 ~ 'x' ~ none }} {{ true + 1 }}"), "abab [1, 2] 1xNone 2");
}

TEST(JinjaValues, ComparisonsAndMembership) {
  EXPECT_EQ(render("{{ 1 == 1.0 }} {{ 'a' < 'b' }} {{ 'b' in 'abc' }} {{ 2 not in [1] }} {{ 'k' in {'k': 1} }}"),
            "True True True True True");
  EXPECT_EQ(render("{{ 1 < 2 < 3 }} {{ 3 > 2 > 2 }}"), "True False");
}

TEST(JinjaValues, AndOrReturnOperands) { EXPECT_EQ(render("{{ 0 or 'x' }} {{ 'a' and 'b' }} {{ '' and 1 }}."), "x b ."); }

TEST(JinjaValues, SlicingAndIndexing) {
  EXPECT_EQ(render("{{ 'hello'[::-1] }} {{ [1,2,3][1:] }} {{ [1,2,3][-1] }} {{ 'héllo'[1] }} {{ [1,2,3][:-1] }}"),
            "olleh [2, 3] 3 é [1, 2]");
}

TEST(JinjaValues, AttributeAndItemLookupBothWorkOnDicts) {
  ordered_json ctx = {{"m", {{"content", "hi"}, {"role", "user"}}}};
  EXPECT_EQ(render("{{ m.content }} {{ m['role'] }} [{{ m.missing }}] {{ m.missing is defined }}", ctx), "hi user [] False");
}

// ---- undefined --------------------------------------------------------------------

TEST(JinjaUndefined, PrintsEmptyIsFalsyAndIteratesAsEmpty) {
  EXPECT_EQ(render("[{{ x }}]{% if not x %}f{% endif %}{% for a in x %}n{% endfor %}{{ x is defined }}{{ x|length }}"),
            "[]fFalse0");
  EXPECT_EQ(render("{{ x|default('d') }} {{ ''|default('e', true) }} {{ x == x }} {{ x == none }}"), "d e True False");
}

TEST(JinjaUndefined, AttributeAccessOnUndefinedRaises) {
  EXPECT_THROW(render("{{ x.y }}"), jinja::RuntimeError);
  EXPECT_THROW(render("{{ x.y is defined }}"), jinja::RuntimeError);
  EXPECT_THROW(render("{{ x + 1 }}"), jinja::RuntimeError);
}

// ---- statements ---------------------------------------------------------------------

TEST(JinjaStatements, ForLoopVariables) {
  EXPECT_EQ(render("{% for x in 'abc' %}{{ loop.index }}{{ loop.index0 }}{{ loop.revindex }}{{ loop.first }}"
                   "{{ loop.last }}{{ loop.length }}|{% endfor %}"),
            "103TrueFalse3|212FalseFalse3|321FalseTrue3|");
  EXPECT_EQ(render("{% for x in [1,2,3] %}{{ loop.previtem }}<{{ x }}>{{ loop.nextitem }};{% endfor %}"),
            "<1>2;1<2>3;2<3>;");
}

TEST(JinjaStatements, ForWithFilterElseAndUnpacking) {
  EXPECT_EQ(render("{% for x in [1,2,3,4] if x is even %}{{ x }}{{ loop.length }}{% endfor %}"), "2242");
  EXPECT_EQ(render("{% for x in [] %}a{% else %}empty{% endfor %}"), "empty");
  EXPECT_EQ(render("{% for k, v in {'a': 1, 'b': 2}.items() %}{{ k }}={{ v }};{% endfor %}"), "a=1;b=2;");
  EXPECT_EQ(render("{% for k in {'z': 1, 'a': 2} %}{{ k }}{% endfor %}"), "za");
}

TEST(JinjaStatements, BreakAndContinue) {
  EXPECT_EQ(render("{% for x in range(10) %}{% if x == 1 %}{% continue %}{% endif %}{% if x == 4 %}{% break %}{% endif %}"
                   "{{ x }}{% endfor %}"),
            "023");
}

TEST(JinjaStatements, IfElifElse) {
  EXPECT_EQ(render("{% for x in [1,2,3] %}{% if x == 1 %}a{% elif x == 2 %}b{% else %}c{% endif %}{% endfor %}"), "abc");
}

TEST(JinjaStatements, SetInsideLoopDoesNotLeakButNamespaceDoes) {
  EXPECT_EQ(render("{% set x = 5 %}{% for i in range(3) %}{{ x }}{% set x = i %}{% endfor %}{{ x }}"), "5555");
  EXPECT_EQ(render("{% set ns = namespace(n=0) %}{% for i in range(3) %}{% set ns.n = ns.n + i %}{% endfor %}{{ ns.n }}"),
            "3");
}

TEST(JinjaStatements, BlockSetAndTupleSet) {
  EXPECT_EQ(render("{% set x %}a{{ 1 }}{% endset %}[{{ x }}]{% set a, b = 1, 2 %}{{ b }}{{ a }}"), "[a1]21");
  EXPECT_EQ(render("{% set x | upper %}ab{% endset %}{{ x }}"), "AB");
}

TEST(JinjaStatements, MacrosWithDefaultsAndKeywords) {
  EXPECT_EQ(render("{% macro m(a, b='d') %}{{ a }}-{{ b }}{% endmacro %}{{ m(1) }} {{ m(1, 2) }} {{ m(b=3, a=4) }}"),
            "1-d 1-2 4-3");
  EXPECT_EQ(render("{% set x = 1 %}{% macro m() %}{{ x }}{% endmacro %}{% set x = 2 %}{{ m() }}"), "2");
}

TEST(JinjaStatements, FilterBlock) { EXPECT_EQ(render("{% filter trim %}  a  {% endfilter %}|"), "a|"); }

TEST(JinjaStatements, InlineIf) {
  EXPECT_EQ(render("{{ 'y' if true else 'n' }}{{ 'y' if false else 'n' }}[{{ 'y' if false }}]"), "yn[]");
}

// ---- filters, tests, methods ---------------------------------------------------------

TEST(JinjaFilters, StringFilters) {
  EXPECT_EQ(render("{{ '  a b  '|trim }}|{{ 'aB'|upper }}{{ 'aB'|lower }}|{{ 'hello world'|title }}|{{ 'hI'|capitalize }}"),
            "a b|ABab|Hello World|Hi");
  EXPECT_EQ(render("{{ 'aaa'|replace('a', 'b', 2) }} {{ 'a\nb'|indent(2) }} {{ 'x y z'|wordcount }}"), "bba a\n  b 3");
}

TEST(JinjaFilters, TojsonMatchesJsonDumps) {
  ordered_json ctx = {{"v", {{"b", 1}, {"a", {1.5, "é\"\n", nullptr, true}}, {"e", ordered_json::object()}}}};
  EXPECT_EQ(render("{{ v|tojson }}", ctx), R"({"b": 1, "a": [1.5, "é\"\n", null, true], "e": {}})");
  EXPECT_EQ(render("{{ v|tojson(indent=2, sort_keys=true) }}", ctx),
            "{\n  \"a\": [\n    1.5,\n    \"é\\\"\\n\",\n    null,\n    true\n  ],\n  \"b\": 1,\n  \"e\": {}\n}");
  EXPECT_EQ(render("{{ 'é'|tojson(ensure_ascii=true) }} {{ [1,2]|tojson(separators=(',', ':')) }}"), "\"\\u00e9\" [1,2]");
}

TEST(JinjaFilters, SequenceFilters) {
  ordered_json ctx = {{"ms", {{{"role", "user"}, {"n", 2}}, {{"role", "tool"}, {"n", 1}}, {{"role", "user"}, {"n", 3}}}}};
  EXPECT_EQ(render("{{ ms|selectattr('role', 'equalto', 'user')|map(attribute='n')|list }}", ctx), "[2, 3]");
  EXPECT_EQ(render("{{ ms|rejectattr('role', 'eq', 'user')|list|length }}", ctx), "1");
  EXPECT_EQ(render("{{ ms|map(attribute='role')|unique|join(',') }}", ctx), "user,tool");
  EXPECT_EQ(render("{{ ms|sort(attribute='n')|map(attribute='n')|join }} {{ [3,1,2]|sort(reverse=true) }}", ctx),
            "123 [3, 2, 1]");
  EXPECT_EQ(render("{{ {'b': 1, 'A': 2}|dictsort }} {{ [1,2]|first }}{{ [1,2]|last }} {{ 'ab'|list }}"),
            "[('A', 2), ('b', 1)] 12 ['a', 'b']");
  EXPECT_EQ(render("{{ ['1', '2.5', 'x']|map('int')|list }} {{ '2.5'|float }} {{ 2.567|round(2) }} {{ -3|abs }}"),
            "[1, 2, 0] 2.5 2.57 3");
}

TEST(JinjaFilters, GeneratorResultsBehaveLikeJinja2) {
  EXPECT_EQ(render("{{ 'y' if []|select else 'n' }}"), "y");
  EXPECT_THROW(render("{{ [1]|select|length }}"), jinja::RuntimeError);
  EXPECT_THROW(render("{{ [1]|select|tojson }}"), jinja::RuntimeError);
}

TEST(JinjaFilters, GeneratorsAreConsumedByIteration) {
  EXPECT_EQ(render("{% set g = [1, 2, 3]|select %}{{ g|first }}{{ g|list }}{{ g|list }}"), "1[2, 3][]");
}

TEST(JinjaFilters, SafeStringPlusPlainStringEscapesThePlainOne) {
  EXPECT_EQ(render("{{ 'a'|safe + '<\"b\">' }} {{ 'a' ~ '<b>'|safe }}"), "a&lt;&#34;b&#34;&gt; a<b>");
}

TEST(JinjaTests, TypeAndValueTests) {
  EXPECT_EQ(render("{{ 'a' is string }}{{ 1 is number }}{{ 1 is integer }}{{ 1.0 is float }}{{ {} is mapping }}"
                   "{{ [] is iterable }}{{ 'a' is sequence }}{{ none is none }}{{ true is boolean }}{{ false is false }}"),
            "TrueTrueTrueTrueTrueTrueTrueTrueTrueTrue");
  EXPECT_EQ(render("{{ 3 is odd }}{{ 4 is even }}{{ 9 is divisibleby 3 }}{{ 1 is in [1] }}{{ 'ab' is lower }}"
                   "{{ 1 is not equalto 2 }}{{ x is undefined }}"),
            "TrueTrueTrueTrueTrueTrueTrue");
}

TEST(JinjaMethods, PythonStringMethods) {
  EXPECT_EQ(render("{{ 'a,b,,c'.split(',') }} {{ ' a  b '.split() }} {{ 'a-b-c'.rsplit('-', 1) }}"),
            "['a', 'b', '', 'c'] ['a', 'b'] ['a-b', 'c']");
  EXPECT_EQ(render("{{ '\\n\\nx\\n'.lstrip('\\n') }}|{{ 'xxay'.strip('xy') }}|{{ 'abc'.startswith('ab') }}"
                   "{{ 'abc'.endswith(('x', 'c')) }}|{{ 'aXa'.replace('a', 'b') }}|{{ 'abcb'.find('b') }}{{ 'abcb'.count('b') }}"),
            "x\n|a|TrueTrue|bXb|12");
}

TEST(JinjaMethods, DictMethods) {
  ordered_json ctx = {{"d", {{"a", 1}}}};
  EXPECT_EQ(render("{{ d.get('a') }} {{ d.get('b') }} {{ d.get('b', 2) }} {{ d.keys()|list }} {{ d.values()|list }}", ctx),
            "1 None 2 ['a'] [1]");
}

TEST(JinjaMethods, MutatingMethodsAreUnsafeInTheSandbox) {
  EXPECT_THROW(render("{% set l = [] %}{{ l.append(1) }}"), jinja::RuntimeError);
  EXPECT_THROW(render("{% set d = {} %}{{ d.update({'a': 1}) }}"), jinja::RuntimeError);
}

// ---- errors and limits ----------------------------------------------------------------

TEST(JinjaErrors, SyntaxErrorsCarryTheLine) {
  EXPECT_EQ(syntax_error_line("a\nb\n{% if x %}\n{{ 1 + }}\n{% endif %}"), 4);
  EXPECT_EQ(syntax_error_line("{% for x in y %}\n\nx"), 3);  // reported at the end of the template
  EXPECT_EQ(syntax_error_line("\n{{ 'unterminated }}"), 2);
  EXPECT_EQ(syntax_error_line("\n\n{# open comment"), 3);
}

TEST(JinjaErrors, UnknownFilterTestOrTagFailsAtLoadTime) {
  EXPECT_EQ(syntax_error_line("\n{{ x|frobnicate }}"), 2);
  EXPECT_EQ(syntax_error_line("{{ x is frobnicated }}"), 1);
  EXPECT_EQ(syntax_error_line("\n\n{% generation %}x{% endgeneration %}"), 3);
  EXPECT_EQ(syntax_error_line("{{ 'a'.frobnicate() }}"), 1);
}

TEST(JinjaErrors, UnknownFilterInsideIfFailsOnlyWhenReachedAsJinja2Does) {
  EXPECT_EQ(render("{% if false %}{{ x|from_json }}{% endif %}ok"), "ok");
  EXPECT_THROW(render("{% if true %}{{ x|from_json }}{% endif %}"), jinja::RuntimeError);
  EXPECT_EQ(syntax_error_line("{% if true %}{% for a in b %}{{ x|from_json }}{% endfor %}{% endif %}"), 1);
}


TEST(JinjaValues, IllFormedUtf8ReadsAsReplacementCharacters) {
  // common/utf8.h's decoder, as Python's bytes.decode(errors="replace"): "a\xE2\x82(" is
  // 'a', U+FFFD (the maximal ill-formed subpart), '('.
  jinja::Template t("{{ s | length }} {{ s[1] }} {{ s | reverse }}");
  EXPECT_EQ(t.render({{"s", jinja::Value(std::string("a\xE2\x82("))}}), "3 \xEF\xBF\xBD (\xEF\xBF\xBD" "a");
}

TEST(JinjaValues, ChainedComparisonsCompareNeighbours) {
  // jinja2 / Python: a < b < c > d is (a < b) and (b < c) and (c > d); python3-jinja2
  // prints exactly this (before, the third comparison took (b < c) as its left side).
  EXPECT_EQ(render("{{ 0 < 2 < 3 > 1 }} {{ 1 < 2 < 3 < 4 }} {{ 1 < 3 < 2 < 4 }} {{ 3 > 2 > 1 == 1 }}"),
            "True True False True");
}

TEST(JinjaTemplate, ConcurrentRendersOfOneTemplateAreIndependent) {
  jinja::Template t("{% set ns = namespace(s='') %}{% for m in messages %}{% set ns.s = ns.s ~ m %}{% endfor %}{{ ns.s }}");
  std::vector<std::thread> threads;
  std::vector<std::string> outs(8);
  for (int k = 0; k < 8; ++k)
    threads.emplace_back([&, k] {
      jinja::List msgs;
      for (int i = 0; i < 200; ++i) msgs.emplace_back(std::to_string(k));
      for (int rep = 0; rep < 20; ++rep) outs[k] = t.render({{"messages", jinja::Value::list(msgs)}});
    });
  for (auto& th : threads) th.join();
  for (int k = 0; k < 8; ++k) EXPECT_EQ(outs[k], std::string(200, static_cast<char>('0' + k)));
}

}  // namespace
}  // namespace pagoda::jinja_test
