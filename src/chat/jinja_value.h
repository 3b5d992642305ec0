// The values a chat template computes with: Python's objects as Jinja sees them (None,
// bool, int, float, str, list, dict, a namespace, a macro or built-in function) plus
// Jinja's Undefined. Lists and dicts are shared by reference, as in Python, so a
// namespace set in a loop is seen after it. Dicts keep insertion order (Python 3.7+).
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

namespace gannet::chat::jinja {

struct Value;
using List = std::vector<Value>;

struct Dict {
  std::vector<std::pair<std::string, Value>> items;
  const Value* find(std::string_view key) const;
  Value* find(std::string_view key);
  void set(const std::string& key, Value v);
};

// Arguments of a call: positional, then keyword (in call order).
struct Args {
  std::vector<Value> pos;
  std::vector<std::pair<std::string, Value>> kw;
};

// A callable: a macro of the template or a global such as raise_exception.
using Function = std::function<Value(Args&)>;

struct Value {
  enum class Kind { Undefined, None, Bool, Int, Float, String, List, Dict, Namespace, Function };

  Value() = default;  // Undefined
  static Value none() { Value v; v.kind = Kind::None; return v; }
  static Value undefined(std::string name = "") { Value v; v.str = std::move(name); return v; }
  Value(bool b) : kind(Kind::Bool), i(b) {}
  Value(int64_t x) : kind(Kind::Int), i(x) {}
  Value(int x) : kind(Kind::Int), i(x) {}
  Value(double x) : kind(Kind::Float), f(x) {}
  Value(std::string s) : kind(Kind::String), str(std::move(s)) {}
  Value(const char* s) : kind(Kind::String), str(s) {}
  Value(List l) : kind(Kind::List), list(std::make_shared<List>(std::move(l))) {}
  Value(Dict d) : kind(Kind::Dict), dict(std::make_shared<Dict>(std::move(d))) {}
  static Value tuple_of(List l) { Value v(std::move(l)); v.tuple = true; return v; }
  static Value namespace_of(Dict d) { Value v(std::move(d)); v.kind = Kind::Namespace; return v; }
  static Value function(Function fn) { Value v; v.kind = Kind::Function; v.fn = std::make_shared<Function>(std::move(fn)); return v; }
  static Value from_json(const nlohmann::ordered_json& j);

  Kind kind = Kind::Undefined;
  int64_t i = 0;                    // Bool, Int
  double f = 0;                     // Float
  std::string str;                  // String; Undefined: the name not found; Int: digits beyond 64 bits
  std::shared_ptr<List> list;       // List
  std::shared_ptr<Dict> dict;       // Dict, Namespace
  std::shared_ptr<Function> fn;     // Function
  bool tuple = false;               // List: a tuple (printed as (a, b))

  bool is_undefined() const { return kind == Kind::Undefined; }
  bool is_none() const { return kind == Kind::None; }
  bool is_number() const { return kind == Kind::Int || kind == Kind::Float || kind == Kind::Bool; }
  bool is_string() const { return kind == Kind::String; }
  bool is_list() const { return kind == Kind::List; }
  bool is_dict() const { return kind == Kind::Dict || kind == Kind::Namespace; }
  double as_double() const { return kind == Kind::Float ? f : double(i); }

  bool truthy() const;
  // Python's str(): what {{ v }} prints (Undefined prints nothing).
  std::string to_str() const;
  // Python's repr() (inside printed lists and dicts).
  std::string repr() const;
  const char* type_name() const;
};

// Python's == (1 == 1.0 == True; lists and dicts element-wise; Undefined equals only
// Undefined).
bool equal(const Value& a, const Value& b);

// json.dumps(v, ensure_ascii=False, indent=indent, separators=..., sort_keys=...): what
// transformers' tojson filter gives. indent < 0: none. Throws for values JSON has no
// form for (Undefined, functions).
std::string to_json(const Value& v, int indent, std::string_view item_sep, std::string_view key_sep, bool sort_keys);

// float.__repr__: shortest round-trip digits, exponent form below 1e-4 and from 1e16.
std::string python_float_repr(double x);

// Code points of a UTF-8 string (ill-formed bytes become one code point each, as bytes).
std::vector<std::string> code_points(std::string_view s);

}  // namespace gannet::chat::jinja
