#include "chat/jinja_template.h"

#include <ctime>
#include <unordered_map>

#include "core/error.h"
#include "chat/jinja_builtins.h"
#include "chat/jinja_parser.h"

namespace gannet::chat::jinja {

namespace {

constexpr const char* kLinePrefix = "chat template line ";

// Loop nesting and macro recursion are bounded so that a hostile template fails cleanly.
constexpr int kMaxDepth = 256;
constexpr size_t kMaxOutput = size_t(64) << 20;

class Renderer {
 public:
  Renderer(const std::function<std::string(const std::string&)>& clock) : clock_(clock) {}

  std::string run(const Body& body, const Value& context) {
    scopes_.emplace_back();
    install_globals();
    if (context.is_dict())
      for (const auto& [k, v] : context.dict->items) scopes_[0][k] = v;
    std::string out;
    exec(body, out);
    return out;
  }

 private:
  enum class Flow { Normal, Break, Continue };
  using Scope = std::unordered_map<std::string, Value>;

  [[noreturn]] static void fail_at(int line, const std::string& what) {
    throw Error(kLinePrefix + std::to_string(line) + ": " + what);
  }

  void install_globals() {
    Scope& g = scopes_[0];
    g["raise_exception"] = Value::function([](Args& a) -> Value {
      throw TemplateRaised(a.pos.empty() ? std::string("the chat template raised an error") : a.pos[0].to_str());
    });
    g["namespace"] = Value::function([](Args& a) {
      Dict d;
      for (const Value& p : a.pos) {
        if (!p.is_dict()) throw Error("namespace() takes a mapping or keyword arguments");
        for (const auto& [k, v] : p.dict->items) d.set(k, v);
      }
      for (auto& [k, v] : a.kw) d.set(k, v);
      return Value::namespace_of(std::move(d));
    });
    g["dict"] = Value::function([](Args& a) {
      Dict d;
      for (auto& [k, v] : a.kw) d.set(k, v);
      return Value(std::move(d));
    });
    g["range"] = Value::function([](Args& a) {
      int64_t start = 0, stop = 0, step = 1;
      auto num = [](const Value& v) {
        if (v.kind != Value::Kind::Int) throw Error("range() takes integers");
        return v.i;
      };
      if (a.pos.size() == 1) stop = num(a.pos[0]);
      else if (a.pos.size() == 2 || a.pos.size() == 3) {
        start = num(a.pos[0]), stop = num(a.pos[1]);
        if (a.pos.size() == 3) step = num(a.pos[2]);
      } else throw Error("range() takes 1 to 3 arguments");
      if (step == 0) throw Error("range() step must not be zero");
      List l;
      for (int64_t k = start; step > 0 ? k < stop : k > stop; k += step) {
        if (l.size() >= 1000000) throw Error("range() is too long");
        l.emplace_back(k);
      }
      return Value(std::move(l));
    });
    g["strftime_now"] = Value::function([this](Args& a) {
      if (a.pos.empty() || !a.pos[0].is_string()) throw Error("strftime_now needs a format string");
      return Value(clock_(a.pos[0].str));
    });
  }

  Value lookup(const std::string& name) const {
    for (size_t k = scopes_.size(); k-- > barrier_;)
      if (auto it = scopes_[k].find(name); it != scopes_[k].end()) return it->second;
    if (barrier_ > 0)
      if (auto it = scopes_[0].find(name); it != scopes_[0].end()) return it->second;
    return Value::undefined(name);
  }

  void assign(const std::string& name, Value v) { scopes_.back()[name] = std::move(v); }

  void emit(std::string& out, const std::string& s, int line) {
    if (out.size() + s.size() > kMaxOutput) fail_at(line, "the rendered text exceeds 64 MiB");
    out += s;
  }

  Args eval_args(const Expr& e, size_t skip) {
    Args a;
    for (size_t k = skip; k < e.args.size(); ++k) a.pos.push_back(eval(*e.args[k]));
    for (const auto& [n, x] : e.kwargs) a.kw.emplace_back(n, eval(*x));
    return a;
  }

  Value eval(const Expr& e) {
    try {
      return eval_inner(e);
    } catch (const Error& err) {
      if (std::string_view(err.what()).starts_with(kLinePrefix)) throw;
      fail_at(e.line, err.what());
    }
  }

  Value eval_inner(const Expr& e) {
    using K = Expr::Kind;
    switch (e.kind) {
      case K::Literal: return e.value;
      case K::Name: return lookup(e.name);
      case K::Attr: return get_attr(eval(*e.args[0]), e.name);
      case K::Item: {
        Value obj = eval(*e.args[0]);
        return get_item(obj, eval(*e.args[1]));
      }
      case K::Slice: {
        Value obj = eval(*e.args[0]);
        Value parts[3];
        const Value* ptr[3] = {nullptr, nullptr, nullptr};
        for (int k = 0; k < 3; ++k)
          if (e.args[size_t(k) + 1]) parts[k] = eval(*e.args[size_t(k) + 1]), ptr[k] = &parts[k];
        return slice(obj, ptr[0], ptr[1], ptr[2]);
      }
      case K::Call: return call(e);
      case K::Filter: {
        Value x = eval(*e.args[0]);
        Args a = eval_args(e, 1);
        return apply_filter(e.name, x, a);
      }
      case K::Test: {
        Value x = eval(*e.args[0]);
        Args a = eval_args(e, 1);
        return Value(apply_test(e.name, x, a) != e.negate);
      }
      case K::Not: return Value(!eval(*e.args[0]).truthy());
      case K::Neg:
      case K::Pos: {
        Value x = eval(*e.args[0]);
        if (!x.is_number()) fail_at(e.line, std::string("bad operand type for unary ") + (e.kind == K::Neg ? "-" : "+") + ": '" + x.type_name() + "'");
        if (e.kind == K::Pos) return x.kind == Value::Kind::Float ? x : Value(x.i);
        return x.kind == Value::Kind::Float ? Value(-x.f) : Value(-x.i);
      }
      case K::Binary: {
        Value a = eval(*e.args[0]);
        Value b = eval(*e.args[1]);
        return binary_op(e.name, a, b);
      }
      case K::And: {
        Value a = eval(*e.args[0]);
        return a.truthy() ? eval(*e.args[1]) : a;
      }
      case K::Or: {
        Value a = eval(*e.args[0]);
        return a.truthy() ? a : eval(*e.args[1]);
      }
      case K::Cond:
        if (eval(*e.args[1]).truthy()) return eval(*e.args[0]);
        return e.args[2] ? eval(*e.args[2]) : Value::undefined();
      case K::List:
      case K::Tuple: {
        List l;
        for (const ExprPtr& x : e.args) l.push_back(eval(*x));
        return e.kind == K::Tuple ? Value::tuple_of(std::move(l)) : Value(std::move(l));
      }
      case K::Dict: {
        Dict d;
        for (size_t k = 0; k + 1 < e.args.size(); k += 2) {
          Value key = eval(*e.args[k]);
          if (!key.is_string()) fail_at(e.line, "dict keys must be strings here");
          d.set(key.str, eval(*e.args[k + 1]));
        }
        return Value(std::move(d));
      }
    }
    fail_at(e.line, "unknown expression");
  }

  Value call(const Expr& e) {
    const Expr& callee = *e.args[0];
    if (callee.kind == Expr::Kind::Attr) {
      Value obj = eval(*callee.args[0]);
      Args a = eval_args(e, 1);
      if (obj.is_dict())
        if (const Value* v = obj.dict->find(callee.name); v && v->kind == Value::Kind::Function) return (*v->fn)(a);
      if (obj.kind == Value::Kind::Namespace) fail_at(e.line, "'" + callee.name + "' is not callable");
      return call_method(obj, callee.name, a);
    }
    Value f = eval(callee);
    if (f.kind != Value::Kind::Function) {
      if (f.is_undefined()) fail_at(e.line, "'" + f.str + "' is undefined");
      fail_at(e.line, std::string("'") + f.type_name() + "' object is not callable");
    }
    Args a = eval_args(e, 1);
    return (*f.fn)(a);
  }

  Value call_macro(const Node& m, Args& a) {
    if (depth_ >= kMaxDepth) fail_at(m.line, "macros nest too deeply");
    if (a.pos.size() > m.params.size()) fail_at(m.line, "macro '" + m.text + "' takes " + std::to_string(m.params.size()) + " arguments");
    Scope params;
    for (size_t k = 0; k < m.params.size(); ++k) {
      const auto& [name, def] = m.params[k];
      Value v;
      bool given = false;
      if (k < a.pos.size()) v = a.pos[k], given = true;
      for (const auto& [n, x] : a.kw)
        if (n == name) v = x, given = true;
      if (!given) v = def ? eval(*def) : Value::undefined(name);
      params[name] = std::move(v);
    }
    for (const auto& [n, x] : a.kw) {
      bool known = false;
      for (const auto& p : m.params) known = known || p.first == n;
      if (!known) fail_at(m.line, "macro '" + m.text + "' has no argument '" + n + "'");
    }
    const size_t saved_barrier = barrier_;
    scopes_.push_back(std::move(params));
    barrier_ = scopes_.size() - 1;
    ++depth_;
    std::string out;
    try {
      exec(m.body, out);
    } catch (...) {
      --depth_;
      barrier_ = saved_barrier;
      scopes_.pop_back();
      throw;
    }
    --depth_;
    barrier_ = saved_barrier;
    scopes_.pop_back();
    return Value(std::move(out));
  }

  void bind(const std::vector<std::string>& targets, const Value& v, int line) {
    if (targets.size() == 1) return assign(targets[0], v);
    if (!v.is_list() || v.list->size() != targets.size())
      fail_at(line, "cannot unpack " + std::string(v.type_name()) + " into " + std::to_string(targets.size()) + " names");
    for (size_t k = 0; k < targets.size(); ++k) assign(targets[k], (*v.list)[k]);
  }

  Flow exec(const Body& body, std::string& out) {
    for (const auto& n : body) {
      const Flow f = exec_node(*n, out);
      if (f != Flow::Normal) return f;
    }
    return Flow::Normal;
  }

  Flow exec_node(const Node& n, std::string& out) {
    using K = Node::Kind;
    switch (n.kind) {
      case K::Text: emit(out, n.text, n.line); return Flow::Normal;
      case K::Output: emit(out, eval(*n.expr).to_str(), n.line); return Flow::Normal;
      case K::If:
        for (const auto& [cond, body] : n.branches)
          if (!cond || eval(*cond).truthy()) return exec(body, out);
        return Flow::Normal;
      case K::For: return exec_for(n, out);
      case K::Set:
        if (n.attr_target) {
          Value obj = lookup(n.targets[0]);
          if (obj.kind != Value::Kind::Namespace)
            fail_at(n.line, "cannot set '" + n.targets[1] + "' on '" + n.targets[0] + "', which is not a namespace");
          obj.dict->set(n.targets[1], eval(*n.expr));
        } else {
          bind(n.targets, eval(*n.expr), n.line);
        }
        return Flow::Normal;
      case K::SetBlock: {
        std::string s;
        exec(n.body, s);
        assign(n.text, Value(std::move(s)));
        return Flow::Normal;
      }
      case K::Macro: {
        const Node* m = &n;
        assign(n.text, Value::function([this, m](Args& a) { return call_macro(*m, a); }));
        return Flow::Normal;
      }
      case K::Break: return Flow::Break;
      case K::Continue: return Flow::Continue;
      case K::FilterBlock: {
        std::string s;
        exec(n.body, s);
        Args a;
        try {
          emit(out, apply_filter(n.text, Value(std::move(s)), a).to_str(), n.line);
        } catch (const Error& err) {
          if (std::string_view(err.what()).starts_with(kLinePrefix)) throw;
          fail_at(n.line, err.what());
        }
        return Flow::Normal;
      }
      case K::Scope: return exec(n.body, out);
    }
    return Flow::Normal;
  }

  Flow exec_for(const Node& n, std::string& out) {
    if (depth_ >= kMaxDepth) fail_at(n.line, "loops nest too deeply");
    List items;
    try {
      items = iterate(eval(*n.expr));
    } catch (const Error& err) {
      if (std::string_view(err.what()).starts_with(kLinePrefix)) throw;
      fail_at(n.line, err.what());
    }
    scopes_.emplace_back();
    ++depth_;
    struct Pop {
      Renderer* r;
      ~Pop() { r->scopes_.pop_back(), --r->depth_; }
    } pop{this};
    if (n.cond) {
      List kept;
      for (const Value& it : items) {
        bind(n.targets, it, n.line);
        if (eval(*n.cond).truthy()) kept.push_back(it);
      }
      items = std::move(kept);
    }
    if (items.empty()) {
      exec(n.else_body, out);
      return Flow::Normal;
    }
    const int64_t len = int64_t(items.size());
    for (int64_t k = 0; k < len; ++k) {
      Dict loop;
      loop.set("index", Value(k + 1));
      loop.set("index0", Value(k));
      loop.set("revindex", Value(len - k));
      loop.set("revindex0", Value(len - k - 1));
      loop.set("first", Value(k == 0));
      loop.set("last", Value(k == len - 1));
      loop.set("length", Value(len));
      loop.set("depth", Value(int64_t(1)));
      loop.set("depth0", Value(int64_t(0)));
      loop.set("previtem", k > 0 ? items[size_t(k - 1)] : Value::undefined("previtem"));
      loop.set("nextitem", k + 1 < len ? items[size_t(k + 1)] : Value::undefined("nextitem"));
      assign("loop", Value(std::move(loop)));
      bind(n.targets, items[size_t(k)], n.line);
      const Flow f = exec(n.body, out);
      if (f == Flow::Break) break;
    }
    return Flow::Normal;
  }

  const std::function<std::string(const std::string&)>& clock_;
  std::vector<Scope> scopes_;
  size_t barrier_ = 0;  // inside a macro: its scope's index (scopes between it and 0 hidden)
  int depth_ = 0;
};

std::string local_strftime(const std::string& format) {
  const std::time_t now = std::time(nullptr);
  std::tm tm{};
  localtime_r(&now, &tm);
  char buf[256];
  const size_t n = std::strftime(buf, sizeof buf, format.c_str(), &tm);
  return std::string(buf, n);
}

}  // namespace

Template::Template(std::string_view source)
    : body_(std::make_shared<const Body>(parse_template(source))), strftime_now_(local_strftime) {}

std::string Template::render(const Value& context) const {
  Renderer r(strftime_now_);
  return r.run(*body_, context);
}

}  // namespace gannet::chat::jinja
