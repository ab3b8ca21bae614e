// jinja budgets — the limits one render runs under, so that a hostile template
// (a chat template comes with the model file or --chat-template-file and runs on
// every request) cannot take the server's time, memory or stack.
//
// Contract:
// - Each render owns one Budget (RenderState::budget); while the render runs it
//   is this thread's active_budget(), so the value and method code deep below the
//   interpreter checks sizes before it allocates without passing it around.
// - Exceeding a budget throws BudgetError (a RuntimeError) with one line naming
//   it: "render budget exceeded: a string over 16777216 bytes (max_string_bytes)".
// - Outside a render (no active budget) the checks do nothing: values built from
//   request JSON are as large as the request, which the HTTP layer bounds.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

#include "jinja/value.h"

namespace pagoda::jinja {

// The numbers, and why (measured with this engine; a step is ~100-150 ns):
// - the 41 real templates of the conformance test
//   (tests/chat/chat_template_conformance_test.py) need at most 2,184 steps, 30
//   loop iterations and 7.4 KB of output for its conversations;
// - a conversation as large as the default 8 MiB request body (1,001 messages of
//   8 KB) needs at most 607K steps, 3,006 iterations and 8 MiB of output with
//   Qwen3, DeepSeek-V3.2, Gemma 4, Llama 3.1, Kimi K2 and Nemotron 3;
// so the budgets leave >= 16x headroom in steps and 2x in bytes over the largest
// request, while a hostile template is stopped within about a second and a few
// hundred MB.
struct Limits {
  // One step per statement and per expression evaluated, plus one per 64 bytes of
  // string built and two per list item (a Value is ~90 bytes): building is where a
  // render spends its time and memory, so steps bound both.
  int64_t max_steps = 10'000'000;
  int64_t max_loop_iterations = 1'000'000;      // summed over all loops of one render
  size_t max_output_bytes = size_t{16} << 20;   // 16 MiB: 2x the default 8 MiB request body
  size_t max_string_bytes = size_t{16} << 20;   // any one string: as large as the output may be
  size_t max_list_items = 1'000'000;            // any one list (~90 MB of Values); = loop budget
  int max_call_depth = 100;                     // macro nesting (recursive schema printers use < 10)
  // Statements and expressions evaluated one inside another, macro calls included:
  // a template's nesting (<= kMaxParseDepth per block) times macro depth could run
  // off the stack. A level is a few hundred bytes of stack in a release build and a
  // few KB under AddressSanitizer (3,000 levels overflowed its 8 MB), so 1,000
  // (~3x a recursive schema printer's 10 macro levels x 30) fits either.
  int max_nesting = 1000;
};

// Values nest at most this deep (lists, dicts, namespaces): request JSON is refused
// past 64 levels, so 512 is headroom; it keeps printing, comparing and destroying a
// value (all recursive) far from the stack's end, and stops namespace cycles.
inline constexpr int kMaxValueDepth = 512;

struct BudgetError : RuntimeError {
  explicit BudgetError(const std::string& msg) : RuntimeError("render budget exceeded: " + msg) {}
};

class Budget {
 public:
  explicit Budget(const Limits& limits) : limits_(limits) {}
  const Limits& limits() const { return limits_; }

  void step(int64_t n = 1) {
    steps_ += n;
    if (steps_ > limits_.max_steps) over_steps();
  }
  // Size checks, before the string / list is built.
  void check_string(size_t bytes) const {
    if (bytes > limits_.max_string_bytes) over_string();
  }
  void check_list(size_t items) const {
    if (items > limits_.max_list_items) over_list();
  }
  // Charges what an expression yielded: its size checks plus its steps.
  void charge_string(size_t bytes) {
    check_string(bytes);
    step(static_cast<int64_t>(bytes / 64));
  }
  void charge_list(size_t items) {
    check_list(items);
    step(2 * static_cast<int64_t>(items));
  }
  int64_t steps() const { return steps_; }

  [[noreturn]] void over_steps() const;
  [[noreturn]] void over_string() const;
  [[noreturn]] void over_list() const;

 private:
  const Limits& limits_;
  int64_t steps_ = 0;
};

// The budget of the render running on this thread, or nullptr.
Budget* active_budget();

// Makes `b` this thread's active budget for its lifetime (restores the previous).
class ActiveBudget {
 public:
  explicit ActiveBudget(Budget* b);
  ~ActiveBudget();
  ActiveBudget(const ActiveBudget&) = delete;
  ActiveBudget& operator=(const ActiveBudget&) = delete;

 private:
  Budget* saved_;
};

// Shorthands on the active budget; no-ops outside a render.
inline void check_string_size(size_t bytes) {
  if (Budget* b = active_budget()) b->check_string(bytes);
}
inline void check_list_size(size_t items) {
  if (Budget* b = active_budget()) b->check_list(items);
}

// Guards one level of a recursive walk over a value (print, compare, dump):
// deeper than kMaxValueDepth throws BudgetError (a namespace holding itself).
class ValueDepthGuard {
 public:
  ValueDepthGuard();
  ~ValueDepthGuard();
  ValueDepthGuard(const ValueDepthGuard&) = delete;
  ValueDepthGuard& operator=(const ValueDepthGuard&) = delete;
};

[[noreturn]] void value_too_deep();

}  // namespace pagoda::jinja
