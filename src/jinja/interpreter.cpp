// jinja::Template: parsing entry point and the tree-walking interpreter
// (see template.h). Scopes follow jinja2: each for-loop iteration and each
// macro call gets a child scope (so `set` inside a loop does not leak out,
// which is why templates use namespace()); if-blocks share their parent's.
#include <algorithm>
#include <climits>
#include <cmath>
#include <cstdint>
#include <memory>
#include <pthread.h>

#include "jinja/budget.h"
#include "jinja/builtins.h"
#include "jinja/lexer.h"
#include "jinja/parser.h"
#include "jinja/template.h"

namespace pagoda::jinja {

namespace {

struct Scope {
  std::shared_ptr<Scope> parent;
  std::vector<std::pair<std::string, Value>> vars;

  const Value* lookup(const std::string& name) const {
    for (const Scope* s = this; s; s = s->parent.get())
      for (const auto& [k, v] : s->vars)
        if (k == name) return &v;
    return nullptr;
  }
  void set(const std::string& name, Value v) {
    for (auto& [k, old] : vars)
      if (k == name) {
        old = std::move(v);
        return;
      }
    vars.emplace_back(name, std::move(v));
  }
};
using ScopePtr = std::shared_ptr<Scope>;

[[noreturn]] void fail(const std::string& msg) { throw RuntimeError(msg); }

// a OP b on int64, failing on overflow (Python ints are unbounded; no template
// needs more than 64 bits).
template <typename F>
int64_t checked(F op, int64_t a, int64_t b) {
  int64_t r = 0;
  if (op(a, b, &r)) fail("integer overflow");
  return r;
}
bool add_ovf(int64_t a, int64_t b, int64_t* r) { return __builtin_add_overflow(a, b, r); }
bool sub_ovf(int64_t a, int64_t b, int64_t* r) { return __builtin_sub_overflow(a, b, r); }
bool mul_ovf(int64_t a, int64_t b, int64_t* r) { return __builtin_mul_overflow(a, b, r); }

// One level of interpreter recursion (a statement or an expression inside
// another, across macro calls): bounded by Limits::max_nesting, so that nesting
// the parser allows (kMaxParseDepth) times macro depth stays off the stack's end.
// The lowest stack address a render on this thread may use: a quarter of the
// thread's stack (at least 256 KB) stays free below it. 0 when unknown.
uintptr_t stack_floor() {
  pthread_attr_t attr;
  if (pthread_getattr_np(pthread_self(), &attr) != 0) return 0;
  void* addr = nullptr;
  size_t size = 0;
  int rc = pthread_attr_getstack(&attr, &addr, &size);
  pthread_attr_destroy(&attr);
  if (rc != 0 || size == 0) return 0;
  return reinterpret_cast<uintptr_t>(addr) + std::max<size_t>(size / 4, size_t{256} << 10);
}

class Nesting {
 public:
  explicit Nesting(RenderState& st) : st_(st) {
    if (st_.nesting >= st_.limits->max_nesting)
      throw BudgetError("evaluation nested deeper than " + std::to_string(st_.limits->max_nesting) +
                        " levels (max_nesting)");
    // The backstop for frames larger than planned (sanitizer builds, small thread stacks).
    if (reinterpret_cast<uintptr_t>(__builtin_frame_address(0)) < st_.stack_floor)
      throw BudgetError("evaluation nested deeper than this thread's stack allows (max_nesting)");
    ++st_.nesting;
  }
  ~Nesting() { --st_.nesting; }
  Nesting(const Nesting&) = delete;
  Nesting& operator=(const Nesting&) = delete;

 private:
  RenderState& st_;
};

class Interpreter {
 public:
  explicit Interpreter(RenderState& st) : st_(st) {}

  void exec(const Body& body, const ScopePtr& scope) {
    for (const StmtPtr& s : body) {
      try {
        exec_stmt(*s, scope);
      } catch (RuntimeError& e) {
        if (e.line == 0) e.line = s->line;
        throw;
      }
      if (st_.flow != RenderState::Flow::Normal) return;
    }
  }

 private:
  void write(const std::string& s) {
    st_.total_bytes += s.size();
    if (st_.total_bytes > st_.limits->max_output_bytes)
      throw BudgetError("output over " + std::to_string(st_.limits->max_output_bytes) + " bytes (max_output_bytes)");
    st_.out->append(s);
  }

  std::string render_to_string(const Body& body, const ScopePtr& scope) {
    std::string buf;
    std::string* saved = st_.out;
    st_.out = &buf;
    try {
      exec(body, scope);
    } catch (...) {
      st_.out = saved;
      throw;
    }
    st_.out = saved;
    return buf;
  }

  void assign(const ScopePtr& scope, const std::vector<std::string>& targets, const Value& v) {
    if (targets.size() == 1) {
      scope->set(targets[0], v);
      return;
    }
    List items = iterate(v);
    if (items.size() != targets.size())
      fail(items.size() > targets.size() ? "too many values to unpack (expected " + std::to_string(targets.size()) + ")"
                                         : "not enough values to unpack (expected " + std::to_string(targets.size()) +
                                               ", got " + std::to_string(items.size()) + ")");
    for (size_t i = 0; i < targets.size(); ++i) scope->set(targets[i], items[i]);
  }

  void exec_stmt(const Stmt& s, const ScopePtr& scope) {
    Nesting nesting(st_);
    st_.budget.step();
    switch (s.kind) {
      case Stmt::Kind::Data: write(s.text); return;
      case Stmt::Kind::Print: write(eval(*s.expr, scope).to_str()); return;
      case Stmt::Kind::If:
        for (const auto& [cond, body] : s.branches)
          if (eval(*cond, scope).truthy()) {
            exec(body, scope);
            return;
          }
        exec(s.else_body, scope);
        return;
      case Stmt::Kind::For: exec_for(s, scope); return;
      case Stmt::Kind::Set: {
        Value v = eval(*s.expr, scope);
        if (!s.ns_attr.empty()) {
          const Value* ns = scope->lookup(s.targets[0]);
          if (!ns || !ns->is_namespace()) fail("cannot assign attribute on non-namespace object");
          ns->dict_ref().set(Value(s.ns_attr), std::move(v));
        } else {
          assign(scope, s.targets, v);
        }
        return;
      }
      case Stmt::Kind::SetBlock: {
        Value v(render_to_string(s.body, scope));
        if (s.filter) v = eval_filter_chain(*s.filter, v, scope);
        scope->set(s.targets[0], std::move(v));
        return;
      }
      case Stmt::Kind::FilterBlock:
        write(eval_filter_chain(*s.filter, Value(render_to_string(s.body, scope)), scope).to_str());
        return;
      case Stmt::Kind::Macro: scope->set(s.name, make_macro(s, scope)); return;
      case Stmt::Kind::Break: st_.flow = RenderState::Flow::Break; return;
      case Stmt::Kind::Continue: st_.flow = RenderState::Flow::Continue; return;
    }
  }

  void exec_for(const Stmt& s, const ScopePtr& scope) {
    Value seq = eval(*s.expr, scope);
    if (seq.is_none()) fail("'NoneType' object is not iterable");
    List items = iterate(seq);
    st_.budget.charge_list(items.size());
    if (s.cond) {
      List kept;
      for (const Value& item : items) {
        auto tmp = std::make_shared<Scope>();
        tmp->parent = scope;
        assign(tmp, s.targets, item);
        if (eval(*s.cond, tmp).truthy()) kept.push_back(item);
      }
      items = std::move(kept);
    }
    if (items.empty()) {
      auto child = std::make_shared<Scope>();
      child->parent = scope;
      exec(s.else_body, child);
      return;
    }
    int64_t n = static_cast<int64_t>(items.size());
    for (int64_t i = 0; i < n; ++i) {
      st_.budget.step(10);  // an iteration builds its scope and loop variables: ~10 steps' time
      if (++st_.iterations > st_.limits->max_loop_iterations)
        throw BudgetError("more than " + std::to_string(st_.limits->max_loop_iterations) +
                          " loop iterations (max_loop_iterations)");
      auto child = std::make_shared<Scope>();
      child->parent = scope;
      assign(child, s.targets, items[static_cast<size_t>(i)]);
      Value loop = Value::dict();
      Dict& d = loop.dict_ref();
      d.entries.reserve(12);  // add(): scalars, and items no deeper than the list they come from
      d.add(Value("index"), Value(i + 1));
      d.add(Value("index0"), Value(i));
      d.add(Value("revindex"), Value(n - i));
      d.add(Value("revindex0"), Value(n - i - 1));
      d.add(Value("first"), Value(i == 0));
      d.add(Value("last"), Value(i == n - 1));
      d.add(Value("length"), Value(n));
      d.add(Value("depth"), Value(1));
      d.add(Value("depth0"), Value(0));
      if (i > 0) d.add(Value("previtem"), items[static_cast<size_t>(i - 1)]);
      if (i + 1 < n) d.add(Value("nextitem"), items[static_cast<size_t>(i + 1)]);
      d.add(Value("cycle"), Value::callable("cycle", [i](RenderState&, CallArgs& a) -> Value {
                               if (a.pos.empty()) fail("no items for cycling given");
                               return a.pos[static_cast<size_t>(i) % a.pos.size()];
                             }));
      child->set("loop", std::move(loop));
      exec(s.body, child);
      if (st_.flow == RenderState::Flow::Break) {
        st_.flow = RenderState::Flow::Normal;
        break;
      }
      st_.flow = RenderState::Flow::Normal;
    }
  }

  Value make_macro(const Stmt& s, const ScopePtr& def_scope) {
    const Stmt* stmt = &s;
    Interpreter* self = this;
    // The macro lives in def_scope, so it holds it weakly (a strong reference
    // would be a cycle); keep_alive_ keeps the scope until the render ends.
    keep_alive_.push_back(def_scope);
    std::weak_ptr<Scope> weak_scope = def_scope;
    return Value::callable(s.name, [stmt, self, weak_scope](RenderState& st, CallArgs& a) -> Value {
      ScopePtr def_scope = weak_scope.lock();
      if (st.depth >= st.limits->max_call_depth)
        throw BudgetError("macro calls nested deeper than " + std::to_string(st.limits->max_call_depth) +
                          " (max_call_depth)");
      if (a.pos.size() > stmt->params.size())
        fail("macro '" + stmt->name + "' takes not more than " + std::to_string(stmt->params.size()) + " argument(s)");
      auto scope = std::make_shared<Scope>();
      scope->parent = def_scope;
      for (const auto& [k, v] : a.kw)
        if (std::find(stmt->params.begin(), stmt->params.end(), k) == stmt->params.end())
          fail("macro '" + stmt->name + "' takes no keyword argument '" + k + "'");
      for (size_t i = 0; i < stmt->params.size(); ++i) {
        const std::string& p = stmt->params[i];
        const Value* given = nullptr;
        if (i < a.pos.size()) given = &a.pos[i];
        for (const auto& [k, v] : a.kw)
          if (k == p) given = &v;
        if (given)
          scope->set(p, *given);
        else if (stmt->defaults[i])
          scope->set(p, self->eval(*stmt->defaults[i], scope));
        else
          scope->set(p, Value::undefined("parameter '" + p + "' was not provided"));
      }
      ++st.depth;
      std::string out;
      try {
        out = self->render_to_string(stmt->body, scope);
      } catch (...) {
        --st.depth;
        throw;
      }
      --st.depth;
      st.flow = RenderState::Flow::Normal;
      return Value(std::move(out));
    });
  }

  Value eval_filter_chain(const Expr& f, const Value& input, const ScopePtr& scope) {
    Value in = f.children[0] ? eval_filter_chain(*f.children[0], input, scope) : input;
    if (!f.deferred_error.empty()) fail(f.deferred_error);
    CallArgs args = eval_args(f, scope);
    return f.filter(st_, in, args);
  }

  CallArgs eval_args(const Expr& e, const ScopePtr& scope) {
    CallArgs a;
    for (size_t i = 1; i < e.children.size(); ++i) a.pos.push_back(eval(*e.children[i], scope));
    for (const auto& [k, v] : e.kwargs) a.kw.emplace_back(k, eval(*v, scope));
    return a;
  }

 public:
  // Every expression costs a step, plus what its value cost to build where it
  // was built (a lookup shares what it finds: strings and lists are not copied).
  Value eval(const Expr& e, const ScopePtr& scope) {
    Nesting nesting(st_);
    st_.budget.step();
    Value v = eval_node(e, scope);
    bool built = e.kind != Expr::Kind::Name && e.kind != Expr::Kind::Getattr && e.kind != Expr::Kind::Getitem &&
                 e.kind != Expr::Kind::Literal;
    if (built && v.is_string()) st_.budget.charge_string(v.str().size());
    if (built && v.is_list()) st_.budget.charge_list(v.items().size());
    return v;
  }

 private:
  Value eval_node(const Expr& e, const ScopePtr& scope) {
    switch (e.kind) {
      case Expr::Kind::Literal: return e.value;
      case Expr::Kind::Name: {
        if (const Value* v = scope->lookup(e.name)) return *v;
        return Value::undefined("'" + e.name + "' is undefined");
      }
      case Expr::Kind::List:
      case Expr::Kind::Tuple: {
        List items;
        for (const auto& c : e.children) items.push_back(eval(*c, scope));
        return e.kind == Expr::Kind::List ? Value::list(std::move(items)) : Value::tuple(std::move(items));
      }
      case Expr::Kind::Dict: {
        Value d = Value::dict();
        for (size_t i = 0; i + 1 < e.children.size(); i += 2) {
          Value k = eval(*e.children[i], scope);
          if (k.is_list() && k.kind() == Value::Kind::List) fail("unhashable type: 'list'");
          if (k.is_dict()) fail("unhashable type: 'dict'");
          d.dict_ref().set(k, eval(*e.children[i + 1], scope));
        }
        return d;
      }
      case Expr::Kind::Getattr: return get_attr(eval(*e.children[0], scope), e.name);
      case Expr::Kind::Getitem: return get_item(eval(*e.children[0], scope), eval(*e.children[1], scope));
      case Expr::Kind::Slice: {
        Value obj = eval(*e.children[0], scope);
        auto part = [&](size_t i) { return e.children[i] ? eval(*e.children[i], scope) : Value::none(); };
        return slice(obj, part(1), part(2), part(3));
      }
      case Expr::Kind::Call: {
        if (!e.deferred_error.empty()) fail(e.deferred_error);
        Value callee = eval(*e.children[0], scope);
        CallArgs a = eval_args(e, scope);
        return call_value(st_, callee, a);
      }
      case Expr::Kind::Filter: {
        if (!e.deferred_error.empty()) fail(e.deferred_error);
        Value in = eval(*e.children[0], scope);
        CallArgs a = eval_args(e, scope);
        return e.filter(st_, in, a);
      }
      case Expr::Kind::Test: {
        if (!e.deferred_error.empty()) fail(e.deferred_error);
        Value v = eval(*e.children[0], scope);
        CallArgs a = eval_args(e, scope);
        return Value(e.test(st_, v, a) != e.negated);
      }
      case Expr::Kind::Unary: {
        Value v = eval(*e.children[0], scope);
        if (e.name == "not") return Value(!v.truthy());
        if (v.is_float()) return Value(e.name == "-" ? -v.as_double() : v.as_double());
        if (v.is_int() || v.is_bool()) return Value(e.name == "-" ? checked(sub_ovf, 0, v.as_int()) : v.as_int());
        fail("bad operand type for unary " + e.name + ": '" + v.type_name() + "'");
      }
      case Expr::Kind::CondExpr:
        if (eval(*e.children[1], scope).truthy()) return eval(*e.children[0], scope);
        return e.children[2] ? eval(*e.children[2], scope) : Value::undefined("the inline if had no else");
      case Expr::Kind::Binary: return eval_binary(e, scope);
    }
    fail("bad expression");
  }

 private:
  Value eval_binary(const Expr& e, const ScopePtr& scope) {
    const std::string& op = e.name;
    Value a = eval(*e.children[0], scope);
    if (op == "and") return a.truthy() ? eval(*e.children[1], scope) : a;
    if (op == "or") return a.truthy() ? a : eval(*e.children[1], scope);
    Value b = eval(*e.children[1], scope);
    if (op == "~") {
      std::string s = a.to_str();
      std::string t = b.to_str();
      st_.budget.check_string(s.size() + t.size());
      return Value(s + t);
    }
    if (op == "==") return Value(equals(a, b));
    if (op == "!=") return Value(!equals(a, b));
    if (op == "<") return Value(less(a, b));
    if (op == ">") return Value(less(b, a));
    if (op == "<=") return Value(less(a, b) || equals(a, b));
    if (op == ">=") return Value(less(b, a) || equals(a, b));
    if (op == "in") return Value(value_in(a, b));
    if (op == "not in") return Value(!value_in(a, b));
    return arith(op, a, b);
  }

  Value arith(const std::string& op, const Value& a, const Value& b) {
    if (a.is_undefined() || b.is_undefined())
      fail((a.is_undefined() ? a : b).str().empty() ? "arithmetic on an undefined value" : (a.is_undefined() ? a : b).str());
    bool nums = a.is_number() && b.is_number();
    bool ints = nums && !a.is_float() && !b.is_float();
    if (op == "+") {
      if (ints) return Value(checked(add_ovf, a.as_int(), b.as_int()));
      if (nums) return Value(a.as_double() + b.as_double());
      if (a.is_string() && b.is_string()) {
        st_.budget.check_string(a.str().size() + b.str().size());
        if (a.is_markup() || b.is_markup())  // markupsafe: the plain operand is escaped
          return Value::markup((a.is_markup() ? a.str() : html_escape(a.str())) +
                               (b.is_markup() ? b.str() : html_escape(b.str())));
        return Value(a.str() + b.str());
      }
      if (a.is_list() && b.is_list() && a.kind() == b.kind()) {
        st_.budget.check_list(a.items().size() + b.items().size());
        List items = a.items();
        items.insert(items.end(), b.items().begin(), b.items().end());
        return a.kind() == Value::Kind::Tuple ? Value::tuple(std::move(items)) : Value::list(std::move(items));
      }
    } else if (op == "-") {
      if (ints) return Value(checked(sub_ovf, a.as_int(), b.as_int()));
      if (nums) return Value(a.as_double() - b.as_double());
    } else if (op == "*") {
      if (ints) return Value(checked(mul_ovf, a.as_int(), b.as_int()));
      if (nums) return Value(a.as_double() * b.as_double());
      const Value* seq = a.is_string() || a.is_list() ? &a : b.is_string() || b.is_list() ? &b : nullptr;
      const Value* cnt = seq == &a ? &b : &a;
      if (seq && (cnt->is_int() || cnt->is_bool())) {
        int64_t n = std::max<int64_t>(0, cnt->as_int());
        // Checked before building: n * unit may not even fit in 64 bits.
        size_t unit = seq->is_string() ? seq->str().size() : seq->items().size();
        size_t max = seq->is_string() ? st_.limits->max_string_bytes : st_.limits->max_list_items;
        if (unit && static_cast<uint64_t>(n) > max / unit) {
          if (seq->is_string()) st_.budget.over_string();
          st_.budget.over_list();
        }
        if (seq->is_string()) {
          std::string out;
          for (int64_t i = 0; i < n; ++i) out += seq->str();
          return Value(std::move(out));
        }
        List items;
        for (int64_t i = 0; i < n; ++i) items.insert(items.end(), seq->items().begin(), seq->items().end());
        return seq->kind() == Value::Kind::Tuple ? Value::tuple(std::move(items)) : Value::list(std::move(items));
      }
    } else if (op == "/") {
      if (nums) {
        if (b.as_double() == 0) fail("division by zero");
        return Value(a.as_double() / b.as_double());
      }
    } else if (op == "//" || op == "%") {
      if (ints) {
        int64_t x = a.as_int(), y = b.as_int();
        if (y == 0) fail("integer division or modulo by zero");
        if (x == INT64_MIN && y == -1) fail("integer overflow");
        int64_t q = x / y, m = x % y;
        if (m != 0 && ((m < 0) != (y < 0))) {
          --q;
          m += y;
        }
        return Value(op == "//" ? q : m);
      }
      if (nums) {
        double x = a.as_double(), y = b.as_double();
        if (y == 0) fail("float division by zero");
        if (op == "//") return Value(std::floor(x / y));
        double m = std::fmod(x, y);
        if (m != 0 && ((m < 0) != (y < 0))) m += y;
        return Value(m);
      }
      if (op == "%" && a.is_string()) fail("printf-style string formatting ('%') is not supported");
    } else if (op == "**") {
      if (ints && b.as_int() >= 0) {
        int64_t base = a.as_int(), result = 1;
        for (int64_t i = 0; i < b.as_int(); ++i) {
          result = checked(mul_ovf, result, base);
          if (result == 0 || result == 1) break;
        }
        return Value(result);
      }
      if (nums) return Value(std::pow(a.as_double(), b.as_double()));
    }
    fail("unsupported operand type(s) for " + op + ": '" + a.type_name() + "' and '" + b.type_name() + "'");
  }

  RenderState& st_;
  std::vector<ScopePtr> keep_alive_;
};

}  // namespace

Template::Template(const std::string& source, Limits limits) : body_(parse(tokenize(source))), limits_(limits) {}
Template::~Template() = default;

std::string Template::render(const std::vector<std::pair<std::string, Value>>& vars) const {
  RenderState st(limits_);
  st.stack_floor = stack_floor();
  ActiveBudget active(&st.budget);
  struct ClearNamespaces {  // on every way out, errors included
    RenderState& st;
    ~ClearNamespaces() {
      for (Value& ns : st.namespaces) ns.dict_ref().entries.clear();
    }
  } clear_namespaces{st};
  std::string out;
  st.out = &out;
  auto globals = std::make_shared<Scope>();
  globals->vars.emplace_back("namespace", Value::callable("namespace", [](RenderState& st, CallArgs& a) -> Value {
                               Value ns = Value::make_namespace();
                               st.namespaces.push_back(ns);
                               for (const Value& p : a.pos) {
                                 if (!p.is_dict()) fail("namespace() positional argument must be a mapping");
                                 for (const auto& [k, v] : p.dict_ref().entries) ns.dict_ref().set(k, v);
                               }
                               for (const auto& [k, v] : a.kw) ns.dict_ref().set(Value(k), v);
                               return ns;
                             }));
  globals->vars.emplace_back("range", Value::callable("range", [](RenderState& st, CallArgs& a) -> Value {
                               int64_t start = 0, stop = 0, step = 1;
                               auto num = [](const Value& v) {
                                 if (!v.is_int() && !v.is_bool()) fail("range() arguments must be integers");
                                 return v.as_int();
                               };
                               if (a.pos.size() == 1) {
                                 stop = num(a.pos[0]);
                               } else if (a.pos.size() >= 2) {
                                 start = num(a.pos[0]);
                                 stop = num(a.pos[1]);
                                 if (a.pos.size() > 2) step = num(a.pos[2]);
                               } else {
                                 fail("range expected at least 1 argument");
                               }
                               if (step == 0) fail("range() arg 3 must not be zero");
                               // Its length first (in 128 bits: stop - start may overflow).
                               __int128 span = step > 0 ? __int128{stop} - start : __int128{start} - stop;
                               __int128 count = span <= 0 ? 0 : (span - 1) / (step > 0 ? step : -__int128{step}) + 1;
                               if (count > static_cast<__int128>(st.limits->max_list_items)) st.budget.over_list();
                               List items;
                               items.reserve(static_cast<size_t>(count));
                               for (int64_t i = 0; i < static_cast<int64_t>(count); ++i) items.emplace_back(start + i * step);
                               return Value::list(std::move(items));
                             }));
  globals->vars.emplace_back("dict", Value::callable("dict", [](RenderState&, CallArgs& a) -> Value {
                               Value d = Value::dict();
                               if (!a.pos.empty() && a.pos[0].is_dict()) {
                                 d.dict_ref().entries = a.pos[0].dict_ref().entries;
                                 d.dict_ref().depth = a.pos[0].dict_ref().depth;
                               }
                               for (const auto& [k, v] : a.kw) d.dict_ref().set(Value(k), v);
                               return d;
                             }));
  auto root = std::make_shared<Scope>();
  root->parent = globals;
  for (const auto& [k, v] : vars) root->set(k, v);
  Interpreter interp(st);
  interp.exec(body_, root);
  return out;
}

}  // namespace pagoda::jinja
