// jinja::parse (see parser.h). A recursive-descent copy of jinja2/parser.py:
// condexpr > or > and > not > compare > + - > ~ > * / // % > ** > unary >
// primary/postfix/filters/tests, with jinja2's tuple and subscript rules.
#include "jinja/parser.h"

#include <initializer_list>

#include "jinja/builtins.h"

namespace pagoda::jinja {

namespace {

using T = Token::Type;

class Parser {
 public:
  explicit Parser(const std::vector<Token>& toks) : t_(toks) {}

  Body parse_all() {
    std::string end;
    Body body = parse_body({}, &end);
    if (!pending_.empty()) throw SyntaxError(pending_[0].first, pending_[0].second);
    return body;
  }

 private:
  const Token& cur() const { return t_[i_]; }
  const Token& peek(size_t k = 1) const { return t_[std::min(i_ + k, t_.size() - 1)]; }
  const Token& next() { return t_[i_ < t_.size() - 1 ? i_++ : i_]; }
  bool is_op(const char* op) const { return cur().type == T::Op && cur().value == op; }
  bool is_name(const char* n) const { return cur().type == T::Name && cur().value == n; }
  [[noreturn]] void fail(const std::string& msg) const { throw SyntaxError(msg, cur().line); }
  std::string describe(const Token& t) const {
    switch (t.type) {
      case T::Eof: return "end of template";
      case T::BlockEnd: return "end of statement block";
      case T::VarEnd: return "end of print statement";
      default: return "'" + t.value + "'";
    }
  }
  void expect_op(const char* op) {
    if (!is_op(op)) fail(std::string("expected '") + op + "', got " + describe(cur()));
    next();
  }
  std::string expect_name() {
    if (cur().type != T::Name) fail("expected a name, got " + describe(cur()));
    return next().value;
  }
  // One level of parser recursion (a block or a nested expression); the
  // recursion is bounded by kMaxParseDepth like the trees it builds.
  class Nest {
   public:
    explicit Nest(Parser& p) : p_(p) {
      if (p_.nesting_ >= kMaxParseDepth) p_.too_deep();
      ++p_.nesting_;
    }
    ~Nest() { --p_.nesting_; }
    Nest(const Nest&) = delete;
    Nest& operator=(const Nest&) = delete;

   private:
    Parser& p_;
  };
  [[noreturn]] void too_deep() const {
    fail("template nested deeper than " + std::to_string(kMaxParseDepth) +
         " levels (blocks, parentheses, brackets or operator chains)");
  }
  // Appends a child to `e`, keeping e->depth = 1 + its deepest child: left-deep
  // chains (a ~ b ~ c ..., x|f|g ..., a.b.c ...) grow a tree without recursing.
  void add(Expr* e, ExprPtr child) {
    if (child) grow(e, *child);
    e->children.push_back(std::move(child));
  }
  void grow(Expr* e, const Expr& child) {
    e->depth = std::max(e->depth, child.depth + 1);
    if (e->depth > kMaxParseDepth) too_deep();
  }

  void expect_block_end() {
    if (cur().type != T::BlockEnd) fail("expected end of statement block, got " + describe(cur()));
    next();
  }

  // Parses statements until a block tag named in `ends`; leaves the stream after
  // that tag's name and stores it in *end ("" at end of template).
  Body parse_body(std::initializer_list<const char*> ends, std::string* end) {
    Body body;
    while (true) {
      const Token& tok = cur();
      if (tok.type == T::Eof) {
        if (ends.size() != 0) {
          std::string names;
          for (const char* e : ends) names += std::string(names.empty() ? "" : " or ") + "'" + e + "'";
          fail("unexpected end of template, expected " + names);
        }
        *end = "";
        return body;
      }
      if (tok.type == T::Data) {
        auto s = std::make_unique<Stmt>();
        s->kind = Stmt::Kind::Data;
        s->line = tok.line;
        s->text = tok.value;
        body.push_back(std::move(s));
        next();
      } else if (tok.type == T::VarBegin) {
        next();
        auto s = std::make_unique<Stmt>();
        s->kind = Stmt::Kind::Print;
        s->line = tok.line;
        s->expr = parse_tuple(false, true, {}, false);
        if (cur().type != T::VarEnd) fail("expected end of print statement, got " + describe(cur()));
        next();
        body.push_back(std::move(s));
      } else if (tok.type == T::BlockBegin) {
        next();
        if (cur().type != T::Name) fail("tag name expected");
        std::string name = cur().value;
        for (const char* e : ends)
          if (name == e) {
            next();
            *end = name;
            return body;
          }
        body.push_back(parse_statement());
      } else {
        fail("unexpected " + describe(tok));
      }
    }
  }

  StmtPtr parse_statement() {
    Nest nest(*this);
    const Token& tag = next();
    auto s = std::make_unique<Stmt>();
    s->line = tag.line;
    const std::string& n = tag.value;
    std::string end;
    if (n == "if") {
      s->kind = Stmt::Kind::If;
      ++soft_;
      while (true) {
        ExprPtr cond = parse_tuple(false, true, {}, false);
        expect_block_end();
        Body b = parse_body({"elif", "else", "endif"}, &end);
        s->branches.emplace_back(std::move(cond), std::move(b));
        if (end == "elif") continue;
        if (end == "else") {
          expect_block_end();
          s->else_body = parse_body({"endif"}, &end);
        }
        break;
      }
      --soft_;
      expect_block_end();
    } else if (n == "for") {
      s->kind = Stmt::Kind::For;
      int saved = soft_;
      soft_ = 0;
      parse_targets(s.get(), false);
      if (!is_name("in")) fail("expected 'in', got " + describe(cur()));
      next();
      s->expr = parse_tuple(false, false, {"recursive"}, false);
      if (is_name("if")) {
        next();
        s->cond = parse_expression(true);
      }
      if (is_name("recursive")) fail("unsupported: recursive for loops");
      expect_block_end();
      s->body = parse_body({"endfor", "else"}, &end);
      if (end == "else") {
        expect_block_end();
        s->else_body = parse_body({"endfor"}, &end);
      }
      expect_block_end();
      soft_ = saved;
    } else if (n == "set") {
      parse_targets(s.get(), true);
      if (is_op("=")) {
        next();
        s->kind = Stmt::Kind::Set;
        s->expr = parse_tuple(false, true, {}, false);
        expect_block_end();
      } else {
        if (s->targets.size() != 1 || !s->ns_attr.empty()) fail("a block set needs one plain name");
        s->kind = Stmt::Kind::SetBlock;
        int saved = soft_;
        soft_ = 0;
        if (is_op("|")) s->filter = parse_filter_chain();
        expect_block_end();
        s->body = parse_body({"endset"}, &end);
        expect_block_end();
        soft_ = saved;
      }
    } else if (n == "macro") {
      s->kind = Stmt::Kind::Macro;
      int saved = soft_;
      soft_ = 0;
      s->name = expect_name();
      expect_op("(");
      while (!is_op(")")) {
        if (!s->params.empty()) expect_op(",");
        if (is_op(")")) break;
        s->params.push_back(expect_name());
        if (is_op("=")) {
          next();
          s->defaults.push_back(parse_expression(true));
        } else {
          s->defaults.push_back(nullptr);
        }
      }
      next();
      expect_block_end();
      s->body = parse_body({"endmacro"}, &end);
      if (cur().type == T::Name) next();
      expect_block_end();
      soft_ = saved;
    } else if (n == "filter") {
      s->kind = Stmt::Kind::FilterBlock;
      int saved = soft_;
      soft_ = 0;
      s->filter = parse_filter_chain(false);
      expect_block_end();
      s->body = parse_body({"endfilter"}, &end);
      expect_block_end();
      soft_ = saved;
    } else if (n == "break" || n == "continue") {
      s->kind = n == "break" ? Stmt::Kind::Break : Stmt::Kind::Continue;
      expect_block_end();
    } else {
      throw SyntaxError("unsupported tag '" + n + "'", tag.line);
    }
    return s;
  }

  // `a`, `a, b`, `(a, b)` or (for set) `ns.attr`.
  void parse_targets(Stmt* s, bool allow_ns) {
    bool paren = is_op("(");
    if (paren) next();
    while (true) {
      s->targets.push_back(expect_name());
      if (allow_ns && is_op(".") && s->targets.size() == 1) {
        next();
        s->ns_attr = expect_name();
        break;
      }
      if (!is_op(",")) break;
      next();
      if (cur().type != T::Name) break;
    }
    if (paren) expect_op(")");
  }

  // A filter chain applied to a value supplied later (filter blocks, block set):
  // the innermost Filter node has a null input. `leading_pipe`: starts at '|'.
  ExprPtr parse_filter_chain(bool leading_pipe = true) {
    ExprPtr node;
    bool first = true;
    while ((first && !leading_pipe) || is_op("|")) {
      if (!(first && !leading_pipe)) next();
      first = false;
      node = parse_filter(std::move(node));
    }
    return node;
  }

  bool is_tuple_end(std::initializer_list<const char*> extra) const {
    if (cur().type == T::VarEnd || cur().type == T::BlockEnd || cur().type == T::Eof || is_op(")")) return true;
    for (const char* e : extra)
      if (is_name(e)) return true;
    return false;
  }

  ExprPtr make(Expr::Kind k, int line) {
    auto e = std::make_unique<Expr>();
    e->kind = k;
    e->line = line;
    return e;
  }

  ExprPtr parse_tuple(bool simplified, bool with_condexpr, std::initializer_list<const char*> extra, bool explicit_parens) {
    int line = cur().line;
    std::vector<ExprPtr> args;
    bool is_tuple = false;
    while (true) {
      if (!args.empty()) expect_op(",");
      if (is_tuple_end(extra)) break;
      args.push_back(simplified ? parse_primary() : parse_expression(with_condexpr));
      if (is_op(","))
        is_tuple = true;
      else
        break;
    }
    if (!is_tuple) {
      if (!args.empty()) return std::move(args[0]);
      if (!explicit_parens) fail("expected an expression, got " + describe(cur()));
    }
    auto t = make(Expr::Kind::Tuple, line);
    for (auto& a : args) add(t.get(), std::move(a));
    return t;
  }

  ExprPtr parse_expression(bool with_condexpr) { return with_condexpr ? parse_condexpr() : parse_or(); }

  ExprPtr parse_condexpr() {
    int line = cur().line;
    size_t pending_before = pending_.size();
    ExprPtr e1 = parse_or();
    bool soft = false;
    while (is_name("if")) {
      next();
      if (!soft) {
        soft = true;
        ++soft_;
        pending_.resize(pending_before);  // the `then` operand is soft too
      }
      ExprPtr cond = parse_or();
      ExprPtr e3;
      if (is_name("else")) {
        next();
        Nest nest(*this);
        e3 = parse_condexpr();
      }
      auto c = make(Expr::Kind::CondExpr, line);
      add(c.get(), std::move(e1));
      add(c.get(), std::move(cond));
      add(c.get(), std::move(e3));
      e1 = std::move(c);
    }
    if (soft) --soft_;
    return e1;
  }

  ExprPtr binary(std::string op, ExprPtr l, ExprPtr r, int line) {
    auto b = make(Expr::Kind::Binary, line);
    b->name = std::move(op);
    add(b.get(), std::move(l));
    add(b.get(), std::move(r));
    return b;
  }

  ExprPtr parse_or() {
    ExprPtr l = parse_and();
    while (is_name("or")) {
      int line = next().line;
      l = binary("or", std::move(l), parse_and(), line);
    }
    return l;
  }
  ExprPtr parse_and() {
    ExprPtr l = parse_not();
    while (is_name("and")) {
      int line = next().line;
      l = binary("and", std::move(l), parse_not(), line);
    }
    return l;
  }
  ExprPtr parse_not() {
    if (is_name("not")) {
      Nest nest(*this);
      int line = next().line;
      auto u = make(Expr::Kind::Unary, line);
      u->name = "not";
      add(u.get(), parse_not());
      return u;
    }
    return parse_compare();
  }
  ExprPtr parse_compare() {
    int line = cur().line;
    ExprPtr l = parse_math1();
    ExprPtr result;
    const Expr* prev_right = nullptr;
    while (true) {
      std::string op;
      if (cur().type == T::Op && (cur().value == "==" || cur().value == "!=" || cur().value == "<" ||
                                  cur().value == "<=" || cur().value == ">" || cur().value == ">=")) {
        op = next().value;
      } else if (is_name("in")) {
        next();
        op = "in";
      } else if (is_name("not") && peek().type == T::Name && peek().value == "in") {
        next();
        next();
        op = "not in";
      } else {
        break;
      }
      ExprPtr r = parse_math1();
      const Expr* right = r.get();
      // Chained comparisons: a < b < c is (a < b) and (b < c); the middle
      // operand is a copy of the previous comparison's right side (re-evaluated).
      if (!result)
        result = binary(op, std::move(l), std::move(r), line);
      else
        result = binary("and", std::move(result), binary(op, clone(*prev_right), std::move(r), line), line);
      prev_right = right;
    }
    return result ? std::move(result) : std::move(l);
  }
  ExprPtr parse_math1() {
    ExprPtr l = parse_concat();
    while (is_op("+") || is_op("-")) {
      const Token& t = next();
      l = binary(t.value, std::move(l), parse_concat(), t.line);
    }
    return l;
  }
  ExprPtr parse_concat() {
    ExprPtr l = parse_math2();
    while (is_op("~")) {
      int line = next().line;
      l = binary("~", std::move(l), parse_math2(), line);
    }
    return l;
  }
  ExprPtr parse_math2() {
    ExprPtr l = parse_pow();
    while (is_op("*") || is_op("/") || is_op("//") || is_op("%")) {
      const Token& t = next();
      l = binary(t.value, std::move(l), parse_pow(), t.line);
    }
    return l;
  }
  ExprPtr parse_pow() {
    ExprPtr l = parse_unary(true);
    while (is_op("**")) {
      int line = next().line;
      l = binary("**", std::move(l), parse_unary(true), line);
    }
    return l;
  }
  ExprPtr parse_unary(bool with_filter) {
    Nest nest(*this);
    ExprPtr node;
    if (is_op("-") || is_op("+")) {
      const Token& t = next();
      node = make(Expr::Kind::Unary, t.line);
      node->name = t.value;
      add(node.get(), parse_unary(false));
    } else {
      node = parse_primary();
    }
    node = parse_postfix(std::move(node));
    if (with_filter) node = parse_filter_expr(std::move(node));
    return node;
  }

  ExprPtr parse_primary() {
    const Token& t = cur();
    int line = t.line;
    if (t.type == T::Name) {
      next();
      auto e = make(Expr::Kind::Literal, line);
      if (t.value == "true" || t.value == "True") {
        e->value = Value(true);
      } else if (t.value == "false" || t.value == "False") {
        e->value = Value(false);
      } else if (t.value == "none" || t.value == "None") {
        e->value = Value::none();
      } else {
        e->kind = Expr::Kind::Name;
        e->name = t.value;
      }
      return e;
    }
    if (t.type == T::String) {
      std::string s;
      while (cur().type == T::String) s += next().value;
      auto e = make(Expr::Kind::Literal, line);
      e->value = Value(std::move(s));
      return e;
    }
    if (t.type == T::Int || t.type == T::Float) {
      next();
      auto e = make(Expr::Kind::Literal, line);
      try {
        e->value = t.type == T::Int ? Value(static_cast<int64_t>(std::stoll(t.value))) : Value(std::stod(t.value));
      } catch (const std::exception&) {
        throw SyntaxError("number out of range: " + t.value, line);
      }
      return e;
    }
    if (is_op("(")) {
      next();
      ExprPtr e = parse_tuple(false, true, {}, true);
      expect_op(")");
      return e;
    }
    if (is_op("[")) {
      next();
      auto e = make(Expr::Kind::List, line);
      while (!is_op("]")) {
        if (!e->children.empty()) expect_op(",");
        if (is_op("]")) break;
        add(e.get(), parse_expression(true));
      }
      next();
      return e;
    }
    if (is_op("{")) {
      next();
      auto e = make(Expr::Kind::Dict, line);
      while (!is_op("}")) {
        if (!e->children.empty()) expect_op(",");
        if (is_op("}")) break;
        add(e.get(), parse_expression(true));
        expect_op(":");
        add(e.get(), parse_expression(true));
      }
      next();
      return e;
    }
    fail("unexpected " + describe(t));
  }

  ExprPtr parse_postfix(ExprPtr node) {
    while (true) {
      if (is_op(".")) {
        int line = next().line;
        if (cur().type == T::Name) {
          auto e = make(Expr::Kind::Getattr, line);
          e->name = next().value;
          add(e.get(), std::move(node));
          node = std::move(e);
        } else if (cur().type == T::Int) {
          auto e = make(Expr::Kind::Getitem, line);
          add(e.get(), std::move(node));
          auto k = make(Expr::Kind::Literal, line);
          k->value = Value(static_cast<int64_t>(std::stoll(next().value)));
          add(e.get(), std::move(k));
          node = std::move(e);
        } else {
          fail("expected a name after '.'");
        }
      } else if (is_op("[")) {
        int line = next().line;
        node = parse_subscript(std::move(node), line);
      } else if (is_op("(")) {
        node = parse_call(std::move(node));
      } else {
        return node;
      }
    }
  }

  ExprPtr parse_subscript(ExprPtr obj, int line) {
    std::vector<ExprPtr> keys;
    while (!is_op("]")) {
      if (!keys.empty()) expect_op(",");
      keys.push_back(parse_subscribed());
    }
    next();
    if (keys.size() == 1 && keys[0] && keys[0]->kind == Expr::Kind::Slice && !keys[0]->children[0]) {
      grow(keys[0].get(), *obj);
      keys[0]->children[0] = std::move(obj);
      return std::move(keys[0]);
    }
    auto e = make(Expr::Kind::Getitem, line);
    add(e.get(), std::move(obj));
    if (keys.size() == 1) {
      add(e.get(), std::move(keys[0]));
    } else {
      auto t = make(Expr::Kind::Tuple, line);
      for (auto& k : keys) add(t.get(), std::move(k));
      add(e.get(), std::move(t));
    }
    return e;
  }

  // An index, or a Slice node with a null object (filled in by the caller).
  ExprPtr parse_subscribed() {
    int line = cur().line;
    std::vector<ExprPtr> args;
    if (is_op(":")) {
      next();
      args.push_back(nullptr);
    } else {
      ExprPtr node = parse_expression(true);
      if (!is_op(":")) return node;
      next();
      args.push_back(std::move(node));
    }
    if (is_op(":")) {
      args.push_back(nullptr);
    } else if (!is_op("]") && !is_op(",")) {
      args.push_back(parse_expression(true));
    } else {
      args.push_back(nullptr);
    }
    if (is_op(":")) {
      next();
      args.push_back(!is_op("]") && !is_op(",") ? parse_expression(true) : nullptr);
    } else {
      args.push_back(nullptr);
    }
    auto s = make(Expr::Kind::Slice, line);
    s->children.push_back(nullptr);
    for (auto& a : args) add(s.get(), std::move(a));
    return s;
  }

  void parse_call_args(Expr* e) {
    expect_op("(");
    bool first = true;
    while (!is_op(")")) {
      if (!first) expect_op(",");
      first = false;
      if (is_op(")")) break;
      if (is_op("*") || is_op("**")) fail("unsupported: *args / **kwargs in calls");
      if (cur().type == T::Name && peek().type == T::Op && peek().value == "=") {
        std::string k = next().value;
        next();
        ExprPtr v = parse_expression(true);
        grow(e, *v);
        e->kwargs.emplace_back(k, std::move(v));
      } else {
        if (!e->kwargs.empty()) fail("positional argument after keyword argument");
        add(e, parse_expression(true));
      }
    }
    next();
  }

  ExprPtr parse_call(ExprPtr callee) {
    auto e = make(Expr::Kind::Call, cur().line);
    if (callee->kind == Expr::Kind::Getattr && !is_method(callee->name) && callee->name != "cycle")
      unsupported("method", callee->name, e.get());
    add(e.get(), std::move(callee));
    parse_call_args(e.get());
    return e;
  }

  void unsupported(const char* what, const std::string& name, Expr* e) {
    std::string msg = std::string("unsupported ") + what + " '" + name + "'";
    e->deferred_error = msg;
    if (soft_ == 0) pending_.emplace_back(msg, cur().line);
  }

  ExprPtr parse_filter(ExprPtr input) {
    auto e = make(Expr::Kind::Filter, cur().line);
    e->name = expect_name();
    while (is_op(".")) {
      next();
      e->name += "." + expect_name();
    }
    e->filter = find_filter(e->name);
    if (!e->filter) unsupported("filter", e->name, e.get());
    add(e.get(), std::move(input));
    if (is_op("(")) parse_call_args(e.get());
    return e;
  }

  ExprPtr parse_filter_expr(ExprPtr node) {
    while (true) {
      if (is_op("|")) {
        next();
        node = parse_filter(std::move(node));
      } else if (is_name("is")) {
        node = parse_test(std::move(node));
      } else if (is_op("(")) {
        node = parse_call(std::move(node));
      } else {
        return node;
      }
    }
  }

  ExprPtr parse_test(ExprPtr node) {
    auto e = make(Expr::Kind::Test, next().line);
    if (is_name("not")) {
      next();
      e->negated = true;
    }
    e->name = expect_name();
    while (is_op(".")) {
      next();
      e->name += "." + expect_name();
    }
    e->test = find_test(e->name);
    if (!e->test) unsupported("test", e->name, e.get());
    add(e.get(), std::move(node));
    if (is_op("(")) {
      parse_call_args(e.get());
    } else if ((cur().type == T::Name || cur().type == T::String || cur().type == T::Int || cur().type == T::Float ||
                is_op("(") || is_op("[") || is_op("{")) &&
               !is_name("else") && !is_name("or") && !is_name("and")) {
      if (is_name("is")) fail("you cannot chain multiple tests with is");
      add(e.get(), parse_postfix(parse_primary()));
    }
    return e;
  }

  static ExprPtr clone(const Expr& e) {
    auto c = std::make_unique<Expr>();
    c->kind = e.kind;
    c->line = e.line;
    c->value = e.value;
    c->name = e.name;
    c->negated = e.negated;
    c->depth = e.depth;
    c->filter = e.filter;
    c->test = e.test;
    c->deferred_error = e.deferred_error;
    for (const auto& ch : e.children) c->children.push_back(ch ? clone(*ch) : nullptr);
    for (const auto& [k, v] : e.kwargs) c->kwargs.emplace_back(k, clone(*v));
    return c;
  }

  const std::vector<Token>& t_;
  size_t i_ = 0;
  // Unknown names seen outside a soft frame: load errors, unless an enclosing
  // inline if (found later) makes them soft.
  std::vector<std::pair<std::string, int>> pending_;
  int nesting_ = 0;  // parser recursion depth (Nest)
  int soft_ = 0;  // > 0 while inside an {% if %} (jinja2's soft frame) or an inline if
};

}  // namespace

Body parse(const std::vector<Token>& tokens) { return Parser(tokens).parse_all(); }

}  // namespace pagoda::jinja
