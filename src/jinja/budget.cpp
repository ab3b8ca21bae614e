// jinja budgets (see budget.h).
#include "jinja/budget.h"

namespace pagoda::jinja {

namespace {
thread_local Budget* t_active = nullptr;
thread_local int t_value_depth = 0;
}  // namespace

void Budget::over_steps() const {
  throw BudgetError("more than " + std::to_string(limits_.max_steps) + " steps (max_steps)");
}
void Budget::over_string() const {
  throw BudgetError("a string over " + std::to_string(limits_.max_string_bytes) + " bytes (max_string_bytes)");
}
void Budget::over_list() const {
  throw BudgetError("a list over " + std::to_string(limits_.max_list_items) + " items (max_list_items)");
}

Budget* active_budget() { return t_active; }

ActiveBudget::ActiveBudget(Budget* b) : saved_(t_active) { t_active = b; }
ActiveBudget::~ActiveBudget() { t_active = saved_; }

void value_too_deep() {
  throw BudgetError("a value nested deeper than " + std::to_string(kMaxValueDepth) + " levels (max_value_depth)");
}

ValueDepthGuard::ValueDepthGuard() {
  if (++t_value_depth > kMaxValueDepth + 8) {  // + 8: the walk's own frames above the value's depth
    --t_value_depth;
    value_too_deep();
  }
}
ValueDepthGuard::~ValueDepthGuard() { --t_value_depth; }

}  // namespace pagoda::jinja
