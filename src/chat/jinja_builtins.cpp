#include "chat/jinja_builtins.h"

#include <algorithm>
#include <cmath>

#include "core/error.h"

namespace gannet::chat::jinja {

namespace {

bool is_ws(char c) { return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\v' || c == '\f'; }

// Python's str.isspace() for the code point starting at s[k]: its UTF-8 length, or 0.
size_t space_at(const std::string& s, size_t k) {
  const unsigned char c = (unsigned char)s[k];
  if (c < 0x80) return (is_ws(char(c)) || (c >= 0x1c && c <= 0x1f)) ? 1 : 0;
  auto cp3 = [&](size_t at) -> uint32_t {
    return (uint32_t((unsigned char)s[at] & 0x0f) << 12) | (uint32_t((unsigned char)s[at + 1] & 0x3f) << 6) |
           uint32_t((unsigned char)s[at + 2] & 0x3f);
  };
  if (c == 0xc2 && k + 1 < s.size()) {
    const unsigned char d = (unsigned char)s[k + 1];
    return (d == 0x85 || d == 0xa0) ? 2 : 0;
  }
  if ((c == 0xe1 || c == 0xe2 || c == 0xe3) && k + 2 < s.size()) {
    const uint32_t cp = cp3(k);
    const bool sp = cp == 0x1680 || (cp >= 0x2000 && cp <= 0x200a) || cp == 0x2028 || cp == 0x2029 ||
                    cp == 0x202f || cp == 0x205f || cp == 0x3000;
    return sp ? 3 : 0;
  }
  return 0;
}

// Whether s[k..] ends with a whitespace code point ending at `end`: its length, or 0.
size_t space_before(const std::string& s, size_t end) {
  for (size_t n = 1; n <= 3 && n <= end; ++n)
    if (space_at(s, end - n) == n) return n;
  return 0;
}

[[noreturn]] void undefined_error(const Value& v) {
  throw Error(v.str.empty() ? std::string("a value is undefined") : "'" + v.str + "' is undefined");
}

// Positional argument `k`, else keyword `kw`; nullptr when neither was given.
const Value* arg(const Args& a, size_t k, const char* kw) {
  if (k < a.pos.size()) return &a.pos[k];
  for (const auto& [n, v] : a.kw)
    if (n == kw) return &v;
  return nullptr;
}

void check_args(const Args& a, size_t max_pos, std::initializer_list<const char*> kws, const std::string& what) {
  if (a.pos.size() > max_pos) throw Error(what + " takes at most " + std::to_string(max_pos) + " positional arguments");
  for (const auto& [n, v] : a.kw) {
    bool ok = false;
    for (const char* k : kws) ok = ok || n == k;
    if (!ok) throw Error(what + " has no argument '" + n + "'");
  }
}

const std::string& need_str(const Value& v, const std::string& what) {
  if (v.is_undefined()) undefined_error(v);
  if (!v.is_string()) throw Error(what + " needs a string, not " + v.type_name());
  return v.str;
}

int64_t need_int(const Value& v, const std::string& what) {
  if (v.kind == Value::Kind::Int || v.kind == Value::Kind::Bool) return v.i;
  throw Error(what + " needs an integer, not " + v.type_name());
}

std::string strip(const std::string& s, const Value* chars, bool left, bool right) {
  size_t a = 0, b = s.size();
  if (!chars || chars->is_none()) {  // Unicode whitespace, as Python
    if (left)
      while (a < b && space_at(s, a)) a += space_at(s, a);
    if (right)
      while (b > a && space_before(s, b)) b -= space_before(s, b);
    return s.substr(a, b - a);
  }
  auto drop = [&](char c) { return need_str(*chars, "strip").find(c) != std::string::npos; };
  if (left)
    while (a < b && drop(s[a])) ++a;
  if (right)
    while (b > a && drop(s[b - 1])) --b;
  return s.substr(a, b - a);
}

std::string lower(std::string s) {
  for (char& c : s) c = char(std::tolower((unsigned char)c));
  return s;
}

std::string upper(std::string s) {
  for (char& c : s) c = char(std::toupper((unsigned char)c));
  return s;
}

std::string capitalize(const std::string& s) {
  std::string r = lower(s);
  if (!r.empty()) r[0] = char(std::toupper((unsigned char)r[0]));
  return r;
}

std::string title(const std::string& s) {
  std::string r = s;
  bool prev_alpha = false;
  for (char& c : r) {
    const bool alpha = std::isalpha((unsigned char)c);
    if (alpha) c = char(prev_alpha ? std::tolower((unsigned char)c) : std::toupper((unsigned char)c));
    prev_alpha = alpha;
  }
  return r;
}

std::string replace(const std::string& s, const std::string& from, const std::string& to, int64_t count) {
  std::string out;
  if (from.empty()) {  // Python inserts `to` around every character
    const std::vector<std::string> cps = code_points(s);
    int64_t n = 0;
    for (const std::string& cp : cps) {
      if (count < 0 || n < count) out += to, ++n;
      out += cp;
    }
    if (count < 0 || n < count) out += to;
    return out;
  }
  size_t pos = 0;
  int64_t n = 0;
  for (;;) {
    const size_t f = (count >= 0 && n >= count) ? std::string::npos : s.find(from, pos);
    if (f == std::string::npos) break;
    out += s.substr(pos, f - pos) + to;
    pos = f + from.size();
    ++n;
  }
  return out + s.substr(pos);
}

List split(const std::string& s, const Value* sep, int64_t maxsplit) {
  List out;
  if (!sep || sep->is_none()) {
    size_t k = 0;
    int64_t n = 0;
    for (;;) {
      while (k < s.size() && is_ws(s[k])) ++k;
      if (k >= s.size()) break;
      if (maxsplit >= 0 && n >= maxsplit) {
        size_t e = s.size();
        while (e > k && is_ws(s[e - 1])) --e;
        out.emplace_back(s.substr(k, e - k));
        break;
      }
      size_t e = k;
      while (e < s.size() && !is_ws(s[e])) ++e;
      out.emplace_back(s.substr(k, e - k));
      ++n;
      k = e;
    }
    return out;
  }
  const std::string& d = need_str(*sep, "split");
  if (d.empty()) throw Error("split: empty separator");
  size_t pos = 0;
  int64_t n = 0;
  for (;;) {
    const size_t f = (maxsplit >= 0 && n >= maxsplit) ? std::string::npos : s.find(d, pos);
    if (f == std::string::npos) break;
    out.emplace_back(s.substr(pos, f - pos));
    pos = f + d.size();
    ++n;
  }
  out.emplace_back(s.substr(pos));
  return out;
}

bool starts_or_ends(const std::string& s, const Value& what, bool ends) {
  auto one = [&](const Value& p) {
    const std::string& x = need_str(p, ends ? "endswith" : "startswith");
    if (x.size() > s.size()) return false;
    return ends ? s.compare(s.size() - x.size(), x.size(), x) == 0 : s.compare(0, x.size(), x) == 0;
  };
  if (what.is_list()) {
    for (const Value& p : *what.list)
      if (one(p)) return true;
    return false;
  }
  return one(what);
}

// Python's < for the values templates sort and compare.
bool less(const Value& a, const Value& b) {
  if (a.is_number() && b.is_number()) return a.as_double() < b.as_double();
  if (a.is_string() && b.is_string()) return a.str < b.str;
  if (a.is_list() && b.is_list()) {
    const size_t n = std::min(a.list->size(), b.list->size());
    for (size_t k = 0; k < n; ++k) {
      if (less((*a.list)[k], (*b.list)[k])) return true;
      if (less((*b.list)[k], (*a.list)[k])) return false;
    }
    return a.list->size() < b.list->size();
  }
  if (a.is_undefined()) undefined_error(a);
  if (b.is_undefined()) undefined_error(b);
  throw Error(std::string("'<' is not supported between ") + a.type_name() + " and " + b.type_name());
}

// A dotted attribute path ("function.name") of an element, as map / selectattr take.
Value attribute_of(const Value& v, const std::string& path) {
  Value cur = v;
  size_t pos = 0;
  for (;;) {
    const size_t dot = path.find('.', pos);
    const std::string part = path.substr(pos, dot == std::string::npos ? std::string::npos : dot - pos);
    cur = get_attr(cur, part);
    if (dot == std::string::npos) return cur;
    pos = dot + 1;
  }
}

std::string html_escape(const std::string& s) {
  std::string out;
  for (char c : s) {
    switch (c) {
      case '&': out += "&amp;"; break;
      case '<': out += "&lt;"; break;
      case '>': out += "&gt;"; break;
      case '"': out += "&#34;"; break;
      case '\'': out += "&#39;"; break;
      default: out += c;
    }
  }
  return out;
}

// Arguments after the first `skip` positional ones (a filter or test name).
Args rest_args(const Args& a, size_t skip) {
  Args r;
  for (size_t k = skip; k < a.pos.size(); ++k) r.pos.push_back(a.pos[k]);
  r.kw = a.kw;
  return r;
}

List select(const Value& x, Args& a, bool by_attr, bool keep_if) {
  List out;
  const std::string what = by_attr ? (keep_if ? "selectattr" : "rejectattr") : (keep_if ? "select" : "reject");
  std::string attr;
  size_t k = 0;
  if (by_attr) {
    if (a.pos.empty()) throw Error(what + " needs an attribute name");
    attr = need_str(a.pos[0], what);
    k = 1;
  }
  std::string test;
  if (k < a.pos.size()) test = need_str(a.pos[k], what);
  Args targs = rest_args(a, k + 1);
  for (const Value& e : iterate(x)) {
    const Value v = by_attr ? attribute_of(e, attr) : e;
    const bool pass = test.empty() ? v.truthy() : apply_test(test, v, targs);
    if (pass == keep_if) out.push_back(e);
  }
  return out;
}

}  // namespace

int64_t length(const Value& v) {
  switch (v.kind) {
    case Value::Kind::Undefined: return 0;
    case Value::Kind::String: return int64_t(code_points(v.str).size());
    case Value::Kind::List: return int64_t(v.list->size());
    case Value::Kind::Dict:
    case Value::Kind::Namespace: return int64_t(v.dict->items.size());
    default: throw Error(std::string("object of type '") + v.type_name() + "' has no len()");
  }
}

List iterate(const Value& v) {
  switch (v.kind) {
    case Value::Kind::Undefined: return {};
    case Value::Kind::List: return *v.list;
    case Value::Kind::Dict: {
      List keys;
      for (const auto& kv : v.dict->items) keys.emplace_back(kv.first);
      return keys;
    }
    case Value::Kind::String: {
      List chars;
      for (std::string& c : code_points(v.str)) chars.emplace_back(std::move(c));
      return chars;
    }
    default: throw Error(std::string("'") + v.type_name() + "' object is not iterable");
  }
}

Value get_attr(const Value& obj, const std::string& name) {
  if (obj.is_undefined()) {
    throw Error(obj.str.empty() ? "undefined value has no attribute '" + name + "'"
                                : "'" + obj.str + "' is undefined (reading ." + name + ")");
  }
  if (obj.is_dict())
    if (const Value* v = obj.dict->find(name)) return *v;
  return Value::undefined(name);
}

Value get_item(const Value& obj, const Value& key) {
  if (obj.is_undefined()) {
    throw Error(obj.str.empty() ? "undefined value has no item " + key.repr()
                                : "'" + obj.str + "' is undefined (reading [" + key.repr() + "])");
  }
  if (obj.is_dict()) {
    if (key.is_string())
      if (const Value* v = obj.dict->find(key.str)) return *v;
    return Value::undefined(key.to_str());
  }
  if ((obj.is_list() || obj.is_string()) && (key.kind == Value::Kind::Int || key.kind == Value::Kind::Bool)) {
    if (obj.is_list()) {
      const int64_t n = int64_t(obj.list->size());
      const int64_t k = key.i < 0 ? key.i + n : key.i;
      if (k < 0 || k >= n) return Value::undefined();
      return (*obj.list)[size_t(k)];
    }
    const std::vector<std::string> cps = code_points(obj.str);
    const int64_t n = int64_t(cps.size());
    const int64_t k = key.i < 0 ? key.i + n : key.i;
    if (k < 0 || k >= n) return Value::undefined();
    return Value(cps[size_t(k)]);
  }
  if (key.is_string()) return get_attr(obj, key.str);
  return Value::undefined();
}

Value slice(const Value& obj, const Value* start, const Value* stop, const Value* step) {
  if (obj.is_undefined()) undefined_error(obj);
  std::vector<Value> items;
  if (obj.is_list()) items = *obj.list;
  else if (obj.is_string()) items = iterate(obj);
  else throw Error(std::string("'") + obj.type_name() + "' object cannot be sliced");
  const int64_t n = int64_t(items.size());
  const int64_t st = step && !step->is_none() ? need_int(*step, "slice step") : 1;
  if (st == 0) throw Error("slice step cannot be zero");
  auto bound = [&](const Value* v, int64_t dflt) {
    if (!v || v->is_none()) return dflt;
    int64_t k = need_int(*v, "slice index");
    if (k < 0) k += n;
    if (st > 0) return std::clamp<int64_t>(k, 0, n);
    return std::clamp<int64_t>(k, -1, n - 1);
  };
  const int64_t a = bound(start, st > 0 ? 0 : n - 1), b = bound(stop, st > 0 ? n : -1);
  List out;
  for (int64_t k = a; st > 0 ? k < b : k > b; k += st) out.push_back(items[size_t(k)]);
  if (obj.is_list()) return Value(std::move(out));
  std::string s;
  for (const Value& c : out) s += c.str;
  return Value(std::move(s));
}

Value binary_op(const std::string& op, const Value& a, const Value& b) {
  if (op == "~") return Value(a.to_str() + b.to_str());
  if (op == "==") return Value(equal(a, b));
  if (op == "!=") return Value(!equal(a, b));
  if (op == "in" || op == "notin") {
    bool found = false;
    if (b.is_string()) found = b.str.find(need_str(a, "'in' on a string")) != std::string::npos;
    else if (b.is_list()) found = std::any_of(b.list->begin(), b.list->end(), [&](const Value& e) { return equal(a, e); });
    else if (b.is_dict()) found = a.is_string() && b.dict->find(a.str) != nullptr;
    else if (!b.is_undefined()) throw Error(std::string("argument of type '") + b.type_name() + "' is not iterable");
    return Value(op == "in" ? found : !found);
  }
  if (op == "<") return Value(less(a, b));
  if (op == ">") return Value(less(b, a));
  if (op == "<=") return Value(!less(b, a));
  if (op == ">=") return Value(!less(a, b));
  if (a.is_undefined()) undefined_error(a);
  if (b.is_undefined()) undefined_error(b);
  if ((a.kind == Value::Kind::Int && !a.str.empty()) || (b.kind == Value::Kind::Int && !b.str.empty()))
    throw Error("arithmetic on integers beyond 64 bits is not supported");
  if (a.is_number() && b.is_number()) {
    const bool ints = a.kind != Value::Kind::Float && b.kind != Value::Kind::Float;
    if (op == "+") return ints ? Value(a.i + b.i) : Value(a.as_double() + b.as_double());
    if (op == "-") return ints ? Value(a.i - b.i) : Value(a.as_double() - b.as_double());
    if (op == "*") return ints ? Value(a.i * b.i) : Value(a.as_double() * b.as_double());
    if (op == "/") {
      if (b.as_double() == 0) throw Error("division by zero");
      return Value(a.as_double() / b.as_double());
    }
    if (op == "//" || op == "%") {
      if (b.as_double() == 0) throw Error("division by zero");
      if (ints) {
        int64_t q = a.i / b.i, r = a.i % b.i;
        if (r != 0 && ((r < 0) != (b.i < 0))) --q, r += b.i;
        return op == "//" ? Value(q) : Value(r);
      }
      const double q = std::floor(a.as_double() / b.as_double());
      return op == "//" ? Value(q) : Value(a.as_double() - q * b.as_double());
    }
    if (op == "**") {
      if (ints && b.i >= 0) {
        int64_t r = 1;
        for (int64_t k = 0; k < b.i; ++k) r *= a.i;
        return Value(r);
      }
      return Value(std::pow(a.as_double(), b.as_double()));
    }
  }
  if (op == "+" && a.is_string() && b.is_string()) return Value(a.str + b.str);
  if (op == "+" && a.is_list() && b.is_list()) {
    List l = *a.list;
    l.insert(l.end(), b.list->begin(), b.list->end());
    return Value(std::move(l));
  }
  if (op == "*" && (a.is_string() || a.is_list()) && (b.kind == Value::Kind::Int || b.kind == Value::Kind::Bool))
    return binary_op("*", b, a);
  if (op == "*" && (a.kind == Value::Kind::Int || a.kind == Value::Kind::Bool) && (b.is_string() || b.is_list())) {
    if (b.is_string()) {
      std::string s;
      for (int64_t k = 0; k < a.i; ++k) s += b.str;
      return Value(std::move(s));
    }
    List l;
    for (int64_t k = 0; k < a.i; ++k) l.insert(l.end(), b.list->begin(), b.list->end());
    return Value(std::move(l));
  }
  if (op == "%" && a.is_string()) throw Error("'%' string formatting is not supported");
  throw Error("unsupported operand types for " + op + ": '" + a.type_name() + "' and '" + b.type_name() + "'");
}

bool apply_test(const std::string& name, const Value& x, Args& a) {
  using K = Value::Kind;
  const Value* p = arg(a, 0, "value");
  auto need = [&]() -> const Value& {
    if (!p) throw Error("the test '" + name + "' needs an argument");
    return *p;
  };
  if (name == "defined") return !x.is_undefined();
  if (name == "undefined") return x.is_undefined();
  if (name == "none") return x.is_none();
  if (name == "boolean") return x.kind == K::Bool;
  if (name == "true") return x.kind == K::Bool && x.i;
  if (name == "false") return x.kind == K::Bool && !x.i;
  if (name == "integer") return x.kind == K::Int;
  if (name == "float") return x.kind == K::Float;
  if (name == "number") return x.is_number();
  if (name == "string") return x.is_string();
  if (name == "mapping") return x.kind == K::Dict;
  if (name == "iterable") return x.is_string() || x.is_list() || x.kind == K::Dict || x.is_undefined();
  if (name == "sequence") return x.is_string() || x.is_list() || x.kind == K::Dict;
  if (name == "callable") return x.kind == K::Function;
  if (name == "lower") return x.is_string() && lower(x.str) == x.str;
  if (name == "upper") return x.is_string() && upper(x.str) == x.str;
  if (name == "even" || name == "odd") {
    const int64_t v = need_int(x, "the test '" + name + "'");
    return (v % 2 == 0) == (name == "even");
  }
  if (name == "divisibleby") {
    const int64_t d = need_int(need(), "divisibleby");
    if (d == 0) throw Error("divisibleby 0");
    return need_int(x, "divisibleby") % d == 0;
  }
  if (name == "eq" || name == "equalto" || name == "==") return equal(x, need());
  if (name == "ne" || name == "!=") return !equal(x, need());
  if (name == "lt" || name == "lessthan" || name == "<") return less(x, need());
  if (name == "gt" || name == "greaterthan" || name == ">") return less(need(), x);
  if (name == "le" || name == "<=") return !less(need(), x);
  if (name == "ge" || name == ">=") return !less(x, need());
  if (name == "in") return binary_op("in", x, need()).i != 0;
  if (name == "sameas") {
    const Value& o = need();
    if (x.kind != o.kind) return false;
    if (x.kind == K::None || x.kind == K::Undefined) return true;
    if (x.kind == K::Bool) return x.i == o.i;
    if (x.is_list()) return x.list == o.list;
    if (x.is_dict()) return x.dict == o.dict;
    return false;
  }
  throw Error("unknown test '" + name + "'");
}

Value apply_filter(const std::string& name, const Value& x, Args& a) {
  using K = Value::Kind;
  if (name == "trim") {
    check_args(a, 1, {"chars"}, "trim");
    return Value(strip(x.to_str(), arg(a, 0, "chars"), true, true));
  }
  if (name == "tojson") {
    check_args(a, 4, {"ensure_ascii", "indent", "separators", "sort_keys"}, "tojson");
    const Value* ea = arg(a, 0, "ensure_ascii");
    if (ea && ea->truthy()) throw Error("tojson: ensure_ascii=True is not supported");
    const Value* ind = arg(a, 1, "indent");
    int indent = -1;
    if (ind && !ind->is_none()) indent = int(need_int(*ind, "tojson indent"));
    std::string item = indent >= 0 ? "," : ", ", key = ": ";
    if (const Value* sep = arg(a, 2, "separators"); sep && !sep->is_none()) {
      if (!sep->is_list() || sep->list->size() != 2) throw Error("tojson: separators must be a pair of strings");
      item = need_str((*sep->list)[0], "tojson separators");
      key = need_str((*sep->list)[1], "tojson separators");
    }
    const Value* sk = arg(a, 3, "sort_keys");
    return Value(to_json(x, indent, item, key, sk && sk->truthy()));
  }
  if (name == "length" || name == "count") return Value(length(x));
  if (name == "string") return Value(x.to_str());
  if (name == "lower") return Value(lower(x.to_str()));
  if (name == "upper") return Value(upper(x.to_str()));
  if (name == "capitalize") return Value(capitalize(x.to_str()));
  if (name == "title") return Value(title(x.to_str()));
  if (name == "safe") return x;
  if (name == "e" || name == "escape") return Value(html_escape(x.to_str()));
  if (name == "replace") {
    check_args(a, 3, {"old", "new", "count"}, "replace");
    const Value* from = arg(a, 0, "old");
    const Value* to = arg(a, 1, "new");
    if (!from || !to) throw Error("replace needs the old and new strings");
    const Value* c = arg(a, 2, "count");
    return Value(replace(x.to_str(), from->to_str(), to->to_str(), c && !c->is_none() ? need_int(*c, "replace") : -1));
  }
  if (name == "join") {
    check_args(a, 2, {"d", "attribute"}, "join");
    const Value* d = arg(a, 0, "d");
    const Value* attr = arg(a, 1, "attribute");
    std::string out;
    bool first = true;
    for (const Value& e : iterate(x)) {
      if (!first) out += d ? d->to_str() : "";
      first = false;
      out += (attr ? attribute_of(e, need_str(*attr, "join attribute")) : e).to_str();
    }
    return Value(std::move(out));
  }
  if (name == "first" || name == "last") {
    const List items = iterate(x);
    if (items.empty()) return Value::undefined();
    return name == "first" ? items.front() : items.back();
  }
  if (name == "list") return Value(iterate(x));
  if (name == "items") {
    if (x.is_undefined()) return Value(List{});
    if (!x.is_dict()) throw Error(std::string("items needs a mapping, not ") + x.type_name());
    List out;
    for (const auto& [k, v] : x.dict->items) out.push_back(Value::tuple_of(List{Value(k), v}));
    return Value(std::move(out));
  }
  if (name == "dictsort") {
    if (!x.is_dict()) throw Error("dictsort needs a mapping");
    List out;
    for (const auto& [k, v] : x.dict->items) out.push_back(Value::tuple_of(List{Value(k), v}));
    std::stable_sort(out.begin(), out.end(), [](const Value& p, const Value& q) {
      return lower((*p.list)[0].str) < lower((*q.list)[0].str);
    });
    return Value(std::move(out));
  }
  if (name == "default" || name == "d") {
    check_args(a, 2, {"default_value", "boolean"}, "default");
    const Value* d = arg(a, 0, "default_value");
    const Value* boolean = arg(a, 1, "boolean");
    const bool use = x.is_undefined() || (boolean && boolean->truthy() && !x.truthy());
    return use ? (d ? *d : Value("")) : x;
  }
  if (name == "int") {
    if (x.kind == K::Int || x.kind == K::Bool) return Value(x.i);
    if (x.kind == K::Float) return Value(int64_t(x.f));
    const Value* d = arg(a, 0, "default");
    if (x.is_string()) {
      try {
        size_t used = 0;
        const std::string t = strip(x.str, nullptr, true, true);
        const int64_t v = std::stoll(t, &used);
        if (used == t.size()) return Value(v);
      } catch (const std::exception&) {
      }
    }
    return d ? *d : Value(int64_t(0));
  }
  if (name == "float") {
    if (x.is_number()) return Value(x.as_double());
    if (x.is_string()) {
      try {
        size_t used = 0;
        const std::string t = strip(x.str, nullptr, true, true);
        const double v = std::stod(t, &used);
        if (used == t.size()) return Value(v);
      } catch (const std::exception&) {
      }
    }
    const Value* d = arg(a, 0, "default");
    return d ? *d : Value(0.0);
  }
  if (name == "abs") {
    if (x.kind == K::Float) return Value(std::fabs(x.f));
    return Value(x.i < 0 ? -need_int(x, "abs") : need_int(x, "abs"));
  }
  if (name == "round") {
    check_args(a, 2, {"precision", "method"}, "round");
    const Value* pr = arg(a, 0, "precision");
    const double scale = std::pow(10.0, pr ? double(need_int(*pr, "round")) : 0.0);
    const Value* m = arg(a, 1, "method");
    const std::string method = m ? need_str(*m, "round method") : "common";
    double v = x.as_double() * scale;
    if (method == "common") v = std::nearbyint(v);  // Python's round: half to even
    else if (method == "floor") v = std::floor(v);
    else if (method == "ceil") v = std::ceil(v);
    else throw Error("round: method must be common, floor or ceil");
    return Value(v / scale);
  }
  if (name == "reverse") {
    if (x.is_string()) {
      std::vector<std::string> cps = code_points(x.str);
      std::string s;
      for (auto it = cps.rbegin(); it != cps.rend(); ++it) s += *it;
      return Value(std::move(s));
    }
    List l = iterate(x);
    std::reverse(l.begin(), l.end());
    return Value(std::move(l));
  }
  if (name == "sort") {
    check_args(a, 3, {"reverse", "case_sensitive", "attribute"}, "sort");
    const Value* rev = arg(a, 0, "reverse");
    const Value* cs = arg(a, 1, "case_sensitive");
    const Value* attr = arg(a, 2, "attribute");
    List l = iterate(x);
    auto key = [&](const Value& e) {
      Value k = attr ? attribute_of(e, need_str(*attr, "sort attribute")) : e;
      if (k.is_string() && !(cs && cs->truthy())) k.str = lower(k.str);
      return k;
    };
    std::stable_sort(l.begin(), l.end(), [&](const Value& p, const Value& q) { return less(key(p), key(q)); });
    if (rev && rev->truthy()) std::reverse(l.begin(), l.end());
    return Value(std::move(l));
  }
  if (name == "unique") {
    List out;
    for (const Value& e : iterate(x))
      if (std::none_of(out.begin(), out.end(), [&](const Value& o) { return equal(o, e); })) out.push_back(e);
    return Value(std::move(out));
  }
  if (name == "min" || name == "max") {
    const List l = iterate(x);
    if (l.empty()) return Value::undefined();
    Value best = l[0];
    for (const Value& e : l)
      if (name == "min" ? less(e, best) : less(best, e)) best = e;
    return best;
  }
  if (name == "sum") {
    Value s(int64_t(0));
    for (const Value& e : iterate(x)) s = binary_op("+", s, e);
    return s;
  }
  if (name == "map") {
    List out;
    if (const Value* attr = arg(a, 99, "attribute")) {
      const Value* d = arg(a, 99, "default");
      for (const Value& e : iterate(x)) {
        Value v = attribute_of(e, need_str(*attr, "map attribute"));
        out.push_back(v.is_undefined() && d ? *d : v);
      }
      return Value(std::move(out));
    }
    if (a.pos.empty()) throw Error("map needs a filter name or attribute=");
    const std::string f = need_str(a.pos[0], "map");
    Args fargs = rest_args(a, 1);
    for (const Value& e : iterate(x)) out.push_back(apply_filter(f, e, fargs));
    return Value(std::move(out));
  }
  if (name == "select") return Value(select(x, a, false, true));
  if (name == "reject") return Value(select(x, a, false, false));
  if (name == "selectattr") return Value(select(x, a, true, true));
  if (name == "rejectattr") return Value(select(x, a, true, false));
  if (name == "attr") {
    const Value* n = arg(a, 0, "name");
    if (!n) throw Error("attr needs a name");
    return get_attr(x, need_str(*n, "attr"));
  }
  if (name == "indent") {
    check_args(a, 3, {"width", "first", "blank"}, "indent");
    const Value* w = arg(a, 0, "width");
    const std::string pad = w && w->is_string() ? w->str : std::string(size_t(w ? need_int(*w, "indent") : 4), ' ');
    const Value* first = arg(a, 1, "first");
    const Value* blank = arg(a, 2, "blank");
    const std::string s = x.to_str();
    std::string out;
    size_t pos = 0;
    bool line0 = true;
    while (pos <= s.size()) {
      const size_t nl = s.find('\n', pos);
      const std::string line = s.substr(pos, nl == std::string::npos ? std::string::npos : nl - pos);
      const bool indent_it = (line0 ? (first && first->truthy()) : true) && (!line.empty() || (blank && blank->truthy()));
      out += (indent_it ? pad : "") + line;
      if (nl == std::string::npos) break;
      out += '\n';
      pos = nl + 1;
      line0 = false;
    }
    return Value(std::move(out));
  }
  if (name == "wordcount") return Value(int64_t(split(x.to_str(), nullptr, -1).size()));
  throw Error("unknown filter '" + name + "'");
}

Value call_method(const Value& obj, const std::string& name, Args& a) {
  if (obj.is_string()) {
    const std::string& s = obj.str;
    if (name == "strip" || name == "lstrip" || name == "rstrip")
      return Value(strip(s, arg(a, 0, "chars"), name != "rstrip", name != "lstrip"));
    if (name == "startswith" || name == "endswith") {
      if (a.pos.empty()) throw Error(name + " needs an argument");
      return Value(starts_or_ends(s, a.pos[0], name == "endswith"));
    }
    if (name == "split") {
      const Value* m = arg(a, 1, "maxsplit");
      return Value(split(s, arg(a, 0, "sep"), m ? need_int(*m, "split") : -1));
    }
    if (name == "splitlines") {
      List out;
      size_t pos = 0;
      while (pos < s.size()) {
        size_t nl = s.find('\n', pos);
        if (nl == std::string::npos) nl = s.size();
        std::string line = s.substr(pos, nl - pos);
        if (!line.empty() && line.back() == '\r') line.pop_back();
        out.emplace_back(std::move(line));
        pos = nl + 1;
      }
      return Value(std::move(out));
    }
    if (name == "replace") {
      if (a.pos.size() < 2) throw Error("replace needs the old and new strings");
      return Value(replace(s, need_str(a.pos[0], "replace"), need_str(a.pos[1], "replace"),
                           a.pos.size() > 2 ? need_int(a.pos[2], "replace") : -1));
    }
    if (name == "upper") return Value(upper(s));
    if (name == "lower") return Value(lower(s));
    if (name == "title") return Value(title(s));
    if (name == "capitalize") return Value(capitalize(s));
    if (name == "find" || name == "rfind" || name == "index" || name == "rindex") {
      if (a.pos.empty()) throw Error(name + " needs an argument");
      const std::string& x = need_str(a.pos[0], name);
      const size_t f = name[0] == 'r' ? s.rfind(x) : s.find(x);
      if (f == std::string::npos) {
        if (name == "index" || name == "rindex") throw Error("substring not found");
        return Value(int64_t(-1));
      }
      return Value(int64_t(code_points(s.substr(0, f)).size()));
    }
    if (name == "count") {
      if (a.pos.empty()) throw Error("count needs an argument");
      const std::string& x = need_str(a.pos[0], "count");
      if (x.empty()) return Value(int64_t(code_points(s).size()) + 1);
      int64_t n = 0;
      for (size_t f = s.find(x); f != std::string::npos; f = s.find(x, f + x.size())) ++n;
      return Value(n);
    }
    if (name == "join") {
      if (a.pos.empty()) throw Error("join needs an argument");
      std::string out;
      bool first = true;
      for (const Value& e : iterate(a.pos[0])) {
        if (!first) out += s;
        first = false;
        out += need_str(e, "join");
      }
      return Value(std::move(out));
    }
    if (name == "isdigit" || name == "isalpha" || name == "isalnum" || name == "isspace") {
      if (s.empty()) return Value(false);
      for (unsigned char c : s) {
        const bool ok = name == "isdigit" ? std::isdigit(c) : name == "isalpha" ? std::isalpha(c)
                        : name == "isalnum" ? std::isalnum(c) : is_ws(char(c));
        if (!ok) return Value(false);
      }
      return Value(true);
    }
    throw Error("str has no method '" + name + "'");
  }
  if (obj.kind == Value::Kind::Dict) {
    if (name == "get") {
      if (a.pos.empty()) throw Error("get needs a key");
      const Value* v = a.pos[0].is_string() ? obj.dict->find(a.pos[0].str) : nullptr;
      if (v) return *v;
      return a.pos.size() > 1 ? a.pos[1] : Value::none();
    }
    if (name == "items") return apply_filter("items", obj, a);
    if (name == "keys") return Value(iterate(obj));
    if (name == "values") {
      List out;
      for (const auto& kv : obj.dict->items) out.push_back(kv.second);
      return Value(std::move(out));
    }
    if (name == "update" || name == "pop" || name == "setdefault" || name == "clear" || name == "popitem")
      throw Error("dict." + name + " is not allowed: template values are immutable");
    throw Error("dict has no method '" + name + "'");
  }
  if (obj.is_list()) {
    if (name == "index" || name == "count") {
      if (a.pos.empty()) throw Error(name + " needs an argument");
      int64_t n = 0;
      for (size_t k = 0; k < obj.list->size(); ++k) {
        if (!equal((*obj.list)[k], a.pos[0])) continue;
        if (name == "index") return Value(int64_t(k));
        ++n;
      }
      if (name == "index") throw Error("the value is not in the list");
      return Value(n);
    }
    if (name == "append" || name == "extend" || name == "pop" || name == "insert" || name == "remove" ||
        name == "clear" || name == "sort" || name == "reverse")
      throw Error("list." + name + " is not allowed: template values are immutable");
    throw Error("list has no method '" + name + "'");
  }
  if (obj.is_undefined()) undefined_error(obj);
  throw Error(std::string("'") + obj.type_name() + "' has no method '" + name + "'");
}

}  // namespace gannet::chat::jinja
