// The Jinja engine's budgets (src/jinja/budget.h) and bounded parsing: each
// hostile template ends quickly with a one-line error naming the limit it hit,
// where before it crashed (SIGSEGV), ran for minutes or allocated until memory ran out.
#include <gtest/gtest.h>

#include <pthread.h>

#include <chrono>
#include <string>
#include <utility>
#include <vector>

#include "jinja/jinja_render.h"

namespace pagoda::jinja_test {
namespace {

TEST(JinjaLimits, OutputSizeIsBounded) {
  jinja::Limits limits;
  limits.max_output_bytes = 1000;
  EXPECT_THROW(render("{% for i in range(100) %}0123456789ABCDEF{% endfor %}", {}, limits), jinja::RuntimeError);
  EXPECT_THROW(render("{{ 'x' * 100000 }}", {}, limits), jinja::RuntimeError);
}

TEST(JinjaLimits, LoopIterationsAreBounded) {
  jinja::Limits limits;
  limits.max_loop_iterations = 50;
  EXPECT_THROW(render("{% for i in range(10) %}{% for j in range(10) %}{% endfor %}{% endfor %}", {}, limits),
               jinja::RuntimeError);
}

TEST(JinjaLimits, MacroRecursionIsBounded) {
  EXPECT_THROW(render("{% macro f(n) %}{{ f(n + 1) }}{% endmacro %}{{ f(0) }}"), jinja::BudgetError);
}

// ---- hostile templates: every one ends with a one-line error naming its limit --------------

// The message of the error a template raises, when loading or rendering ("" if none).
std::string error_of(const std::string& src, jinja::Limits limits = {}) {
  try {
    render(src, {}, limits);
  } catch (const jinja::SyntaxError& e) {
    return e.what();
  } catch (const jinja::RuntimeError& e) {
    return e.what();
  }
  return "";
}

// Seconds a call takes.
template <typename F>
double seconds(F&& f) {
  auto t0 = std::chrono::steady_clock::now();
  f();
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

std::string repeat(const std::string& s, int n) {
  std::string out;
  for (int i = 0; i < n; ++i) out += s;
  return out;
}

void expect_names(const std::string& err, const std::string& what) {
  EXPECT_NE(err.find(what), std::string::npos) << err;
  EXPECT_EQ(err.find('\n'), std::string::npos) << err;
}

// Before the budgets: ran for minutes and allocated until memory ran out.
TEST(JinjaHostile, DoublingAStringStopsAtTheStringBudgetQuickly) {
  std::string err;
  double s = seconds([&] {
    err = error_of("{% set ns = namespace(s='ab') %}{% for i in range(64) %}{% set ns.s = ns.s ~ ns.s %}{% endfor %}"
                   "{{ ns.s }}");
  });
  expect_names(err, "render budget exceeded: a string over 16777216 bytes (max_string_bytes)");
  EXPECT_LT(s, 20.0);  // ~0.1 s: it stops at 16 MiB, the 25th doubling (bounds catch hangs, not speed)
  expect_names(error_of("{% set ns = namespace(s='ab') %}{% for i in range(64) %}{% set ns.s = ns.s + ns.s %}"
                        "{% endfor %}"),
               "(max_string_bytes)");
  expect_names(error_of("{{ 'ab' * 4611686018427387904 }}"), "(max_string_bytes)");  // n * len overflows 64 bits
}

TEST(JinjaHostile, GrowingListsStopAtTheListBudget) {
  expect_names(error_of("{% set ns = namespace(l=[1]) %}{% for i in range(64) %}{% set ns.l = ns.l + ns.l %}"
                        "{% endfor %}"),
               "render budget exceeded: a list over 1000000 items (max_list_items)");
  expect_names(error_of("{{ [1, 2] * 4611686018427387904 }}"), "(max_list_items)");
  expect_names(error_of("{{ range(1000000000000) | length }}"), "(max_list_items)");
  jinja::Limits small;
  small.max_list_items = 1000;
  expect_names(error_of("{{ (',' * 5000).split(',') | length }}", small), "(max_list_items)");
  expect_names(error_of("{{ ('x' * 5000) | list | length }}", small), "(max_list_items)");
  EXPECT_EQ(render("{{ (',' * 999).split(',') | length }}", {}, small), "1000");
}

TEST(JinjaHostile, FunctionsThatMultiplyTheirInputCheckBeforeBuilding) {
  jinja::Limits small;
  small.max_string_bytes = 100000;
  // 10,000 x 10,000 bytes: a replace, a join, an indent and a repr that each
  // build 100 MB from a 10 KB string.
  expect_names(error_of("{% set s = 'x' * 10000 %}{{ s.replace('x', s) }}", small), "(max_string_bytes)");
  expect_names(error_of("{% set s = 'x' * 10000 %}{{ s | replace('x', s) }}", small), "(max_string_bytes)");
  expect_names(error_of("{% set s = 'x' * 10000 %}{{ s.join([s] * 10000) }}", small), "(max_string_bytes)");
  expect_names(error_of("{% set s = 'x' * 10000 %}{{ ([s] * 10000) | join(s) }}", small), "(max_string_bytes)");
  expect_names(error_of("{% set s = '\\n' * 10000 %}{{ s | indent(10000, blank=true) }}", small), "(max_string_bytes)");
  expect_names(error_of("{% set s = 'x' * 10000 %}{{ [s] * 10000 }}", small), "(max_string_bytes)");
  expect_names(error_of("{% set s = 'x' * 10000 %}{{ ([s] * 10000) | tojson }}", small), "(max_string_bytes)");
  expect_names(error_of("{{ [1, [2, [3]]] | tojson(indent=1000000000000) }}"), "(max_string_bytes)");
  expect_names(error_of("{{ 'a' | indent(1000000000000) }}"), "(max_string_bytes)");
}

TEST(JinjaHostile, LongRendersStopAtTheStepBudget) {
  jinja::Limits small;
  small.max_steps = 100000;
  expect_names(error_of("{% for i in range(100000) %}{% set x = i + 1 + 1 + 1 %}{% endfor %}", small),
               "render budget exceeded: more than 100000 steps (max_steps)");
  // Copying big strings costs steps by the byte: 1,000 x 2 MB would be 2 GB of copies.
  double s = seconds([&] {
    expect_names(error_of("{% set s = 'x' * 1000000 %}{% for i in range(1000) %}{% set y = s ~ s %}{% endfor %}"),
                 "(max_steps)");
  });
  // The default budget lets ~640 MB of copies through (a step per 64 bytes): 0.85 s in release
  // and 20.2 s under ASan on 2 cores at load 15 (its allocator poisons every 2 MB buffer).
  EXPECT_LT(s, 60.0);  // a bound that catches a hang, not a speed check
}

TEST(JinjaHostile, DeepOrCyclicValuesStopAtTheValueDepth) {
  expect_names(error_of("{% set ns = namespace(l=[]) %}{% for i in range(100000) %}{% set ns.l = [ns.l] %}{% endfor %}"),
               "render budget exceeded: a value nested deeper than 512 levels (max_value_depth)");
  expect_names(error_of("{% set ns = namespace(n=none) %}{% for i in range(100000) %}"
                        "{% set ns.n = namespace(next=ns.n) %}{% endfor %}"),
               "(max_value_depth)");
  // A namespace holding itself prints, compares and dumps without end in a naive walk.
  expect_names(error_of("{% set ns = namespace() %}{% set ns.me = ns %}{{ ns }}"), "(max_value_depth)");
  // Namespaces compare by identity, as in jinja2: no walk.
  EXPECT_EQ(render("{% set ns = namespace() %}{% set ns.me = ns %}{{ [ns] == [ns] }}"), "True");
}

TEST(JinjaHostile, DeepNestingFailsAtLoadTimeNotWithAStackOverflow) {
  const std::string depth = "template nested deeper than 256 levels";
  // Before: SIGSEGV (unbounded recursion) for the nested ones, and left-deep chains
  // (no recursion while parsing) built trees that overflowed the stack when evaluated.
  for (const auto& [open, close] : std::vector<std::pair<std::string, std::string>>{
           {"(", ")"}, {"[", "]"}, {"{1: ", "}"}, {"x(", ")"}, {"not ", ""}, {"-", ""}, {"1 if x else ", ""}}) {
    std::string src = "{{ " + repeat(open, 100000) + "1" + repeat(close, 100000) + " }}";
    expect_names(error_of(src), depth);
  }
  for (const char* link : {" ~ 'a'", " + 1", " or x", "|trim", ".a", "[0]", "()", " < 1"})
    expect_names(error_of("{{ 'a'" + repeat(link, 100000) + " }}"), depth);
  // Before: the lexer rescanned to the end of the template at every tag (quadratic).
  std::string err;
  double s = seconds([&] { err = error_of(repeat("{% if true %}", 50000) + "x" + repeat("{% endif %}", 50000)); });
  expect_names(err, depth);
  EXPECT_LT(s, 20.0);
  s = seconds([&] { EXPECT_EQ(render(repeat("{% if true %}x{% endif %}", 50000)).size(), 50000u); });
  EXPECT_LT(s, 20.0);
  // Nesting within the limit is fine.
  EXPECT_EQ(render("{{ " + repeat("(", 200) + "1" + repeat(")", 200) + " }}"), "1");
  EXPECT_EQ(render(repeat("{% if true %}", 200) + "x" + repeat("{% endif %}", 200)), "x");
}

TEST(JinjaHostile, MacroRecursionTimesNestingStopsAtTheNestingBudget) {
  expect_names(error_of("{% macro f(n) %}{{ " + repeat("[", 200) + "f(n + 1)" + repeat("]", 200) +
                        " }}{% endmacro %}{{ f(0) }}"),
               "render budget exceeded: evaluation nested deeper than ");
  expect_names(error_of("{% macro f(n) %}" + repeat("{% if true %}", 200) + "{{ f(n + 1) }}" +
                        repeat("{% endif %}", 200) + "{% endmacro %}{{ f(0) }}"),
               "(max_nesting)");
  // Release builds stop at the level count, sanitizer builds (bigger frames) may
  // stop at the stack backstop first; both name max_nesting.
}

TEST(JinjaHostile, DeepRecursionOnASmallThreadStackStopsBeforeItsEnd) {
  // 1,000 levels fit an 8 MB stack, not a 512 KB one: the stack backstop ends the
  // render there (the template is parsed on this thread, as a server loads it).
  struct Job {
    jinja::Template tmpl{"{% macro f(n) %}" + repeat("{% if true %}", 200) + "{{ f(n + 1) }}" +
                         repeat("{% endif %}", 200) + "{% endmacro %}{{ f(0) }}"};
    std::string err;
  } job;
  pthread_attr_t attr;
  pthread_attr_init(&attr);
  pthread_attr_setstacksize(&attr, size_t{512} << 10);
  pthread_t th;
  ASSERT_EQ(pthread_create(
                &th, &attr,
                [](void* p) -> void* {
                  auto* job = static_cast<Job*>(p);
                  try {
                    job->tmpl.render({});
                  } catch (const jinja::RuntimeError& e) {
                    job->err = e.what();
                  }
                  return nullptr;
                },
                &job),
            0);
  pthread_join(th, nullptr);
  pthread_attr_destroy(&attr);
  expect_names(job.err, "render budget exceeded: evaluation nested deeper than this thread's stack allows (max_nesting)");
}
}  // namespace
}  // namespace pagoda::jinja_test
