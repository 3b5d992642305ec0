#include "structured/json_schema.h"

#include <algorithm>
#include <cmath>
#include <map>
#include <optional>
#include <nlohmann/json.hpp>
#include <set>

#include "core/error.h"
#include "structured/gbnf.h"
#include "structured/json_grammar.h"
#include "structured/regex.h"

namespace gannet::structured {

namespace {

using Json = nlohmann::ordered_json;

// The JSON building blocks every schema grammar may use; @ marks where the whitespace
// policy puts its `ws`.
const char* kPreamble = R"G(
jv ::= jobj | jarr | jstr | jnum | "true" | "false" | "null"
jobj ::= "{" @ ( jmem ( $, jmem )* @ )? "}"
jmem ::= jstr $: jv
jarr ::= "[" @ ( jv ( $, jv )* @ )? "]"
jstr ::= "\"" jchar* "\""
jchar ::= [^"\\\x00-\x1F] | "\\" ( ["\\/bfnrt] | "u" [0-9a-fA-F]{4} )
jnum ::= "-"? ( "0" | [1-9] [0-9]* ) ( "." [0-9]+ )? ( [eE] [-+]? [0-9]+ )?
jint ::= "-"? ( "0" | [1-9] [0-9]* )
juint ::= "0" | [1-9] [0-9]*
)G";

// Formats as regular expressions over the decoded string (see json_schema.h for the
// definition each follows).
const std::string kYear = "([1-9]\\d{3}|0[1-9]\\d{2}|00[1-9]\\d|000[1-9])";
const std::string kDate = "(" + kYear +
                          "-((0[13578]|1[02])-(0[1-9]|[12]\\d|3[01])|(0[469]|11)-(0[1-9]|[12]\\d|30)|02-(0[1-9]|1\\d|2[0-8]))"
                          "|(\\d{2}(0[48]|[2468][048]|[13579][26])|(0[48]|[2468][048]|[13579][26])00)-02-29)";
const std::string kTime = "([01]\\d|2[0-3]):[0-5]\\d:[0-5]\\d(\\.\\d+)?([Zz]|[+-]([01]\\d|2[0-3]):[0-5]\\d)";
const std::string kOctet = "(25[0-5]|2[0-4]\\d|1\\d\\d|[1-9]?\\d)";
const std::string kEmail =
    "([A-Za-z0-9!#$%&'*+/=?^_`{|}~.-]+|\"([ !#-\\[\\]-~]|\\\\[ -~])*\")"  // dot-string (dots anywhere) or quoted
    "@([A-Za-z0-9-]+(\\.[A-Za-z0-9-]+)*"                                    // domain labels
    "|\\[(" + kOctet + "(\\." + kOctet + "){3}|IPv6:[0-9A-Fa-f:.]+)\\])";   // or an address literal
const std::map<std::string, std::string> kFormats = {
    {"date", kDate},
    {"time", kTime},
    {"date-time", kDate + "[Tt]" + kTime},
    {"uuid", "[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}"},
    {"email", kEmail},
};

const std::set<std::string> kAnnotations = {"title",  "description", "default",    "examples", "$schema",
                                            "$id",    "$comment",    "deprecated", "readOnly", "writeOnly"};
const std::set<std::string> kKeywords = {"type",      "properties", "required", "additionalProperties", "enum",
                                         "const",     "anyOf",      "oneOf",    "allOf",                "items",
                                         "prefixItems", "minItems", "maxItems", "minLength",            "maxLength",
                                         "pattern",   "format",     "$ref",     "$defs",                "definitions",
                                         "minimum",   "maximum",    "exclusiveMinimum", "exclusiveMaximum"};

// A GBNF literal for these bytes.
std::string lit(const std::string& bytes) {
  std::string out = "\"";
  for (unsigned char c : bytes) {
    if (c == '"' || c == '\\') out += '\\', out += char(c);
    else if (c < 0x20) {
      char buf[8];
      std::snprintf(buf, sizeof buf, "\\x%02X", c);
      out += buf;
    } else {
      out += char(c);
    }
  }
  return out + "\"";
}

class Compiler {
 public:
  Compiler(const Json& root, const JsonWhitespace& ws) : root_(root) {
    if (ws.python) {
      comma_ = " \", \" ";
      colon_ = " \": \" ";
    } else if (!ws.compact) {
      if (ws.max_run < 1 || ws.max_run > 64) fail("JSON whitespace: max_run must be in [1, 64], got ", ws.max_run);
      W = " ws ";
      comma_ = " ws \",\" ws ";
      colon_ = " ws \":\" ws ";
      text_ = "ws ::= [ \\t\\n\\r]{0," + std::to_string(ws.max_run) + "}\n";
    }
  }

  Grammar run() {
    const std::string top = rule_for(root_, "");
    std::string pre = kPreamble;
    for (size_t at; (at = pre.find('@')) != std::string::npos;) pre.replace(at, 1, W == " " ? "" : "ws");
    for (size_t at; (at = pre.find("$,")) != std::string::npos;) pre.replace(at, 2, comma_);
    for (size_t at; (at = pre.find("$:")) != std::string::npos;) pre.replace(at, 2, colon_);
    add_gbnf(g_, pre + text_ + "root ::= " + top + "\n");
    g_.set_root(g_.rule("root"));
    g_.check();
    return std::move(g_);
  }

 private:
  [[noreturn]] void bad(const std::string& ptr, const std::string& what) {
    fail("JSON schema at '", ptr.empty() ? "#" : "#" + ptr, "': ", what);
  }

  std::string fresh(const std::string& hint) { return "s" + std::to_string(n_++) + "-" + hint; }

  // An enum or const value: its compact text, with whitespace allowed between its tokens
  // as everywhere else (clients write {"k": "v"} for the value {"k":"v"} too).
  std::string value(const Json& v) {
    if (!v.is_array() && !v.is_object()) return lit(v.dump());
    std::string out = "( " + lit(v.is_array() ? "[" : "{") + W;
    bool first = true;
    for (auto it = v.begin(); it != v.end(); ++it, first = false) {
      if (!first) out += comma_;
      if (v.is_object()) out += lit(Json(it.key()).dump()) + colon_;
      out += value(*it);
    }
    return out + W + lit(v.is_array() ? "]" : "}") + " )";
  }

  // The name of a rule matching schema s (at JSON pointer ptr).
  std::string rule_for(const Json& s, const std::string& ptr) {
    if (s.is_boolean()) {
      if (!s.get<bool>()) bad(ptr, "the schema false matches nothing");
      return "jv";
    }
    if (!s.is_object()) bad(ptr, "a schema must be an object or a boolean");
    for (auto it = s.begin(); it != s.end(); ++it)
      if (!kKeywords.count(it.key()) && !kAnnotations.count(it.key()))
        bad(ptr + "/" + it.key(), "keyword '" + it.key() + "' is not supported");
    if (s.contains("$ref")) {
      if (s.size() > 1)
        for (auto it = s.begin(); it != s.end(); ++it)
          if (it.key() != "$ref" && it.key() != "$defs" && it.key() != "definitions" && !kAnnotations.count(it.key()))
            bad(ptr + "/" + it.key(), "keywords next to $ref are not supported");
      return ref(s["$ref"], ptr + "/$ref");
    }
    const std::string name = fresh("node");
    std::vector<std::string> alts;
    // Keywords beside the combinator or value list (annotations aside).
    auto siblings = [&](std::initializer_list<const char*> except) {
      Json out = Json::object();
      for (auto it = s.begin(); it != s.end(); ++it) {
        bool skip = kAnnotations.count(it.key()) || it.key() == "$defs" || it.key() == "definitions";
        for (const char* e : except) skip |= it.key() == e;
        if (!skip) out[it.key()] = it.value();
      }
      return out;
    };
    if (s.contains("allOf")) {
      if (!s["allOf"].is_array() || s["allOf"].empty()) bad(ptr + "/allOf", "allOf must be a non-empty array");
      // One schema with every branch's keywords (and the siblings of allOf) merged in.
      Json merged = siblings({"allOf"});
      for (size_t i = 0; i < s["allOf"].size(); ++i)
        merge(merged, s["allOf"][i], ptr + "/allOf/" + std::to_string(i), 0);
      alts.push_back(rule_for(merged, ptr));
    } else if (s.contains("anyOf") || s.contains("oneOf")) {
      const char* k = s.contains("anyOf") ? "anyOf" : "oneOf";
      if (s.contains("anyOf") && s.contains("oneOf")) bad(ptr + "/oneOf", "anyOf together with oneOf is not supported");
      if (!s[k].is_array() || s[k].empty()) bad(ptr + "/" + k, std::string(k) + " must be a non-empty array");
      const Json common = siblings({k});
      for (size_t i = 0; i < s[k].size(); ++i) {
        const std::string at = ptr + "/" + k + "/" + std::to_string(i);
        if (common.empty()) {
          alts.push_back(rule_for(s[k][i], at));
        } else {  // the keywords beside anyOf hold in every branch
          Json branch = common;
          merge(branch, s[k][i], at, 0);
          alts.push_back(rule_for(branch, at));
        }
      }
    } else if (s.contains("enum") || s.contains("const")) {
      const Json other = siblings({"enum", "const", "type"});
      if (!other.empty()) bad(ptr + "/" + other.begin().key(), "'" + other.begin().key() + "' beside enum / const is not supported");
      std::vector<Json> values;
      if (s.contains("const")) values.push_back(s["const"]);
      if (s.contains("enum")) {
        if (!s["enum"].is_array() || s["enum"].empty()) bad(ptr + "/enum", "enum must be a non-empty array");
        if (s.contains("const")) {
          if (std::find(s["enum"].begin(), s["enum"].end(), s["const"]) == s["enum"].end()) values.clear();
        } else {
          values.assign(s["enum"].begin(), s["enum"].end());
        }
      }
      if (s.contains("type")) {  // the values of the listed types only
        const std::vector<std::string> types = type_list(s["type"]);
        std::vector<Json> kept;
        for (const Json& v : values) {
          const char* t = v.is_null() ? "null" : v.is_boolean() ? "boolean" : v.is_number_integer() ? "integer"
                        : v.is_number() ? "number" : v.is_string() ? "string" : v.is_array() ? "array" : "object";
          bool ok = false;
          for (const std::string& x : types) ok |= x == t || (x == "number" && std::string(t) == "integer");
          if (ok) kept.push_back(v);
        }
        values = kept;
      }
      if (values.empty()) bad(ptr + (s.contains("enum") ? "/enum" : "/const"), "no value satisfies every keyword");
      for (const Json& v : values) alts.push_back(value(v));
    } else {
      std::vector<std::string> types;
      if (s.contains("type")) {
        const Json& t = s["type"];
        if (t.is_string()) types.push_back(t.get<std::string>());
        else if (t.is_array())
          for (const Json& x : t) {
            if (!x.is_string()) bad(ptr + "/type", "type names must be strings");
            types.push_back(x.get<std::string>());
          }
        else bad(ptr + "/type", "type must be a string or an array of strings");
      } else if (s.contains("properties") || s.contains("additionalProperties") || s.contains("required")) {
        types.push_back("object");
      } else if (s.contains("items") || s.contains("prefixItems")) {
        types.push_back("array");
      } else if (s.contains("pattern") || s.contains("format") || s.contains("minLength") || s.contains("maxLength")) {
        types.push_back("string");
      }
      if (types.empty()) alts.push_back("jv");
      for (const std::string& t : types) alts.push_back(typed(s, t, ptr));
    }
    std::string body;
    for (size_t i = 0; i < alts.size(); ++i) body += (i ? " | " : "") + alts[i];
    text_ += name + " ::= " + body + "\n";
    return name;
  }

  // The schema a $ref names (nullptr when it does not resolve).
  const Json* resolve(const std::string& target) const {
    if (target == "#") return &root_;
    for (const char* defs : {"#/$defs/", "#/definitions/"}) {
      const std::string p = defs;
      if (target.rfind(p, 0) == 0) {
        const std::string key = target.substr(p.size()), coll = p.substr(2, p.size() - 3);
        if (root_.contains(coll) && root_[coll].contains(key)) return &root_[coll][key];
      }
    }
    return nullptr;
  }

  static std::vector<std::string> type_list(const Json& t) {
    std::vector<std::string> out;
    if (t.is_string()) out.push_back(t.get<std::string>());
    else if (t.is_array())
      for (const Json& x : t)
        if (x.is_string()) out.push_back(x.get<std::string>());
    return out;
  }

  // allOf: merges branch `src` (at ptr) into dst. Properties present in both become an
  // allOf of the two; required lists are joined; types intersect; lower bounds take the
  // larger, upper bounds the smaller; any other keyword must agree or be absent on one side.
  void merge(Json& dst, const Json& src, const std::string& ptr, int depth) {
    if (depth > 32) bad(ptr, "allOf nests or refers to itself too deeply to merge");
    if (src.is_boolean()) {
      if (!src.get<bool>()) bad(ptr, "the schema false matches nothing");
      return;
    }
    if (!src.is_object()) bad(ptr, "a schema must be an object or a boolean");
    for (auto it = src.begin(); it != src.end(); ++it) {
      const std::string& k = it.key();
      const Json& v = it.value();
      const std::string at = ptr + "/" + k;
      if (kAnnotations.count(k) || k == "$defs" || k == "definitions") continue;
      if (!kKeywords.count(k)) bad(at, "keyword '" + k + "' is not supported");
      if (k == "$ref") {
        if (!v.is_string()) bad(at, "$ref must be a string");
        const Json* node = resolve(v.get<std::string>());
        if (!node) bad(at, "$ref '" + v.get<std::string>() + "' does not resolve (only #, #/$defs/NAME and #/definitions/NAME)");
        merge(dst, *node, v.get<std::string>().substr(1), depth + 1);
      } else if (k == "allOf") {
        if (!v.is_array()) bad(at, "allOf must be a non-empty array");
        for (size_t i = 0; i < v.size(); ++i) merge(dst, v[i], at + "/" + std::to_string(i), depth + 1);
      } else if (!dst.contains(k)) {
        dst[k] = v;
      } else if (dst[k] == v) {
        continue;
      } else if (k == "properties") {
        if (!v.is_object() || !dst[k].is_object()) bad(at, "properties must be an object");
        for (auto p = v.begin(); p != v.end(); ++p) {
          Json& d = dst[k];
          if (!d.contains(p.key())) d[p.key()] = p.value();
          else if (d[p.key()] != p.value()) d[p.key()] = Json{{"allOf", Json::array({d[p.key()], p.value()})}};
        }
      } else if (k == "required") {
        if (!v.is_array() || !dst[k].is_array()) bad(at, "required must be an array of names");
        for (const Json& name : v)
          if (std::find(dst[k].begin(), dst[k].end(), name) == dst[k].end()) dst[k].push_back(name);
      } else if (k == "type") {
        const std::vector<std::string> a = type_list(dst[k]), b = type_list(v);
        if (a.empty() || b.empty()) bad(at, "type must be a string or an array of strings");
        Json both = Json::array();
        for (const std::string& x : a)
          for (const std::string& y : b) {
            std::string t = x == y ? x : (x == "integer" && y == "number") || (x == "number" && y == "integer") ? "integer" : "";
            if (!t.empty() && std::find(both.begin(), both.end(), t) == both.end()) both.push_back(t);
          }
        if (both.empty()) bad(at, "allOf: the branches' types have nothing in common");
        dst[k] = both.size() == 1 ? both[0] : both;
      } else if (k == "minimum" || k == "exclusiveMinimum" || k == "minItems" || k == "minLength" || k == "maximum" ||
                 k == "exclusiveMaximum" || k == "maxItems" || k == "maxLength") {
        if (!v.is_number() || !dst[k].is_number()) bad(at, k + " must be a number");
        const bool lower = k.rfind("min", 0) == 0 || k == "exclusiveMinimum";
        if (lower ? v.get<double>() > dst[k].get<double>() : v.get<double>() < dst[k].get<double>()) dst[k] = v;
      } else {
        bad(at, "allOf: the branches give '" + k + "' different values, which cannot be merged");
      }
    }
  }

  std::string ref(const Json& r, const std::string& ptr) {
    if (!r.is_string()) bad(ptr, "$ref must be a string");
    const std::string target = r.get<std::string>();
    if (auto it = refs_.find(target); it != refs_.end()) return it->second;
    const Json* node = resolve(target);
    if (!node) bad(ptr, "$ref '" + target + "' does not resolve (only #, #/$defs/NAME and #/definitions/NAME)");
    // Named before it is compiled, so a recursive reference finds it.
    const std::string name = fresh("ref");
    refs_[target] = name;
    const std::string body = rule_for(*node, target.substr(1));
    text_ += name + " ::= " + body + "\n";
    return name;
  }

  int64_t count(const Json& s, const char* k, const std::string& ptr, int64_t dflt) {
    if (!s.contains(k)) return dflt;
    if (!s[k].is_number_integer() || s[k].get<int64_t>() < 0 || s[k].get<int64_t>() > 10000)
      bad(ptr + "/" + k, std::string(k) + " must be an integer in [0, 10000]");
    return s[k].get<int64_t>();
  }

  std::string typed(const Json& s, const std::string& t, const std::string& ptr) {
    if (t == "null") return "\"null\"";
    if (t == "boolean") return "( \"true\" | \"false\" )";
    if (t == "number") {
      for (const char* k : {"minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum"})
        if (s.contains(k)) bad(ptr + "/" + k, std::string(k) + " is supported for integers only");
      return "jnum";
    }
    if (t == "integer") return integer_rule(s, ptr);
    if (t == "string") return string_rule(s, ptr);
    if (t == "array") return array_rule(s, ptr);
    if (t == "object") return object_rule(s, ptr);
    bad(ptr + "/type", "unknown type '" + t + "'");
  }

  // Integers in [lo, hi] (either side open), decimal without leading zeros.
  std::string integer_rule(const Json& s, const std::string& ptr) {
    constexpr int64_t kLimit = int64_t(1) << 53;  // bounds beyond doubles' exact integers are refused
    std::optional<int64_t> lo, hi;
    auto bound = [&](const char* k, bool exclusive, bool is_min) {
      if (!s.contains(k)) return;
      const Json& v = s[k];
      if (!v.is_number()) bad(ptr + "/" + k, std::string(k) + " must be a number");
      const double d = v.get<double>();
      if (!(std::fabs(d) < double(kLimit))) bad(ptr + "/" + k, std::string(k) + " beyond 2^53 is not supported");
      // The tightest integer bound: ceil for minimums, floor for maximums.
      int64_t b = is_min ? int64_t(std::ceil(d)) : int64_t(std::floor(d));
      if (exclusive && double(b) == d) b += is_min ? 1 : -1;
      if (is_min) lo = lo ? std::max(*lo, b) : b;
      else hi = hi ? std::min(*hi, b) : b;
    };
    bound("minimum", false, true);
    bound("exclusiveMinimum", true, true);
    bound("maximum", false, false);
    bound("exclusiveMaximum", true, false);
    if (lo && hi && *lo > *hi) bad(ptr + "/minimum", "the integer range is empty");
    if (!lo && !hi) return "jint";
    std::vector<std::string> alts;
    // Non-negative part [max(lo, 0), hi].
    if (!hi || *hi >= 0) for (const std::string& p : nonneg_range(std::max<int64_t>(lo.value_or(0), 0), hi)) alts.push_back(p);
    // Negative part: -x for x in [max(1, -hi), -lo].
    if (!lo || *lo < 0) {
      const int64_t a = hi && *hi < 0 ? -*hi : 1;
      std::optional<int64_t> b;
      if (lo) b = -*lo;
      for (const std::string& p : nonneg_range(a, b)) alts.push_back("\"-\" " + p);
    }
    std::string body;
    for (size_t i = 0; i < alts.size(); ++i) body += (i ? " | " : "") + std::string("( ") + alts[i] + " )";
    const std::string name = fresh("int");
    text_ += name + " ::= " + body + "\n";
    return name;
  }

  // GBNF sequences for the decimal integers in [a, b] (b open when absent), a >= 0.
  static std::vector<std::string> nonneg_range(int64_t a, std::optional<int64_t> b) {
    std::vector<std::string> out;
    auto digits = [](int64_t v) { return std::to_string(v); };
    auto pow10 = [](size_t n) {
      int64_t p = 1;
      for (size_t i = 0; i < n; ++i) p *= 10;
      return p;
    };
    const size_t la = digits(a).size();
    const size_t lb = b ? digits(*b).size() : la;
    for (size_t L = la; L <= lb; ++L) {
      const int64_t lo = std::max<int64_t>(a, L == 1 ? 0 : pow10(L - 1));
      const int64_t hi = b ? std::min<int64_t>(*b, pow10(L) - 1) : pow10(L) - 1;
      if (lo > hi) continue;
      same_length(digits(lo), digits(hi), "", &out);
    }
    if (!b) out.push_back("[1-9] [0-9]{" + std::to_string(la) + ",}");  // every longer number
    return out;
  }

  // Strings of equal length between lo and hi, digit by digit (leading zeros allowed
  // past the first position), each as GBNF after `prefix`.
  static void same_length(const std::string& lo, const std::string& hi, const std::string& prefix,
                          std::vector<std::string>* out) {
    const size_t n = lo.size();
    auto cls = [](char x, char y) { return x == y ? "\"" + std::string(1, x) + "\"" : "[" + std::string(1, x) + "-" + std::string(1, y) + "]"; };
    auto any = [](size_t k) { return k == 0 ? std::string() : " [0-9]{" + std::to_string(k) + "}"; };
    if (n == 1) {
      out->push_back(prefix + cls(lo[0], hi[0]));
      return;
    }
    if (lo[0] == hi[0]) {
      same_length(lo.substr(1), hi.substr(1), prefix + cls(lo[0], lo[0]) + " ", out);
      return;
    }
    const std::string lo_rest = lo.substr(1), hi_rest = hi.substr(1);
    char first_full = lo[0], last_full = hi[0];
    if (lo_rest != std::string(n - 1, '0')) {
      same_length(lo_rest, std::string(n - 1, '9'), prefix + cls(lo[0], lo[0]) + " ", out);
      ++first_full;
    }
    if (hi_rest != std::string(n - 1, '9')) {
      same_length(std::string(n - 1, '0'), hi_rest, prefix + cls(hi[0], hi[0]) + " ", out);
      --last_full;
    }
    if (first_full <= last_full) out->push_back(prefix + cls(first_full, last_full) + any(n - 1));
  }

  std::string string_rule(const Json& s, const std::string& ptr) {
    std::string pattern;
    if (s.contains("format")) {
      if (!s["format"].is_string() || !kFormats.count(s["format"].get<std::string>()))
        bad(ptr + "/format", "format '" + s["format"].dump() + "' is not supported (date, time, date-time, uuid, email)");
      pattern = kFormats.at(s["format"].get<std::string>());
    }
    if (s.contains("pattern")) {
      if (!pattern.empty()) bad(ptr + "/pattern", "pattern together with format is not supported");
      if (!s["pattern"].is_string()) bad(ptr + "/pattern", "pattern must be a string");
      pattern = s["pattern"].get<std::string>();
      // Patterns search (ECMAScript semantics): unanchored sides match anything.
      const bool start = !pattern.empty() && pattern[0] == '^';
      const bool end = !pattern.empty() && pattern.back() == '$' && (pattern.size() < 2 || pattern[pattern.size() - 2] != '\\');
      pattern = (start ? "" : "[^]*") + std::string("(?:") + pattern.substr(start ? 1 : 0, pattern.size() - (start ? 1 : 0) - (end ? 1 : 0)) + ")" + (end ? "" : "[^]*");
    }
    if (!pattern.empty()) {
      if (s.contains("minLength") || s.contains("maxLength"))
        bad(ptr + "/minLength", "minLength / maxLength together with pattern or format are not supported");
      int32_t r;
      try {
        r = add_regex(g_, pattern, "pattern");
        g_.json_escape(r);  // the decoded string matches: quotes, backslashes, controls escaped
      } catch (const Error& e) {
        bad(ptr + (s.contains("pattern") ? "/pattern" : "/format"), e.what());
      }
      return "\"\\\"\" " + g_.rules()[size_t(r)].name + " \"\\\"\"";
    }
    const int64_t lo = count(s, "minLength", ptr, 0), hi = count(s, "maxLength", ptr, -1);
    if (hi >= 0 && hi < lo) bad(ptr + "/maxLength", "maxLength is below minLength");
    if (lo == 0 && hi < 0) return "jstr";
    return "\"\\\"\" jchar{" + std::to_string(lo) + "," + (hi >= 0 ? std::to_string(hi) : "") + "} \"\\\"\"";
  }

  std::string array_rule(const Json& s, const std::string& ptr) {
    std::vector<std::string> prefix;
    if (s.contains("prefixItems")) {
      if (!s["prefixItems"].is_array()) bad(ptr + "/prefixItems", "prefixItems must be an array");
      for (size_t i = 0; i < s["prefixItems"].size(); ++i)
        prefix.push_back(rule_for(s["prefixItems"][i], ptr + "/prefixItems/" + std::to_string(i)));
    }
    const bool no_more = s.contains("items") && s["items"].is_boolean() && !s["items"].get<bool>();
    const std::string item = no_more ? "" : s.contains("items") ? rule_for(s["items"], ptr + "/items") : "jv";
    int64_t lo = count(s, "minItems", ptr, 0), hi = count(s, "maxItems", ptr, -1);
    if (hi >= 0 && hi < lo) bad(ptr + "/maxItems", "maxItems is below minItems");
    if (!prefix.empty()) {
      // Every length in [minItems, maxItems] (items: false caps it at the prefix's): the
      // first min(length, prefix) items match their prefixItems, the rest match items.
      const int64_t P = int64_t(prefix.size());
      if (no_more && lo > P)
        bad(ptr + "/minItems", "minItems " + std::to_string(lo) + " exceeds the " + std::to_string(P) +
                                   " prefixItems while items is false: no array is valid");
      const int64_t K = hi >= 0 ? std::min(hi, P) : P;  // prefix positions an array can reach
      if (K == 0) return "( \"[\"" + W + "\"]\" )";
      std::string rest;  // after all P prefix items
      if (K == P && !no_more && hi != P)
        rest = " (" + comma_ + item + " ){" + std::to_string(std::max<int64_t>(lo - P, 0)) + "," +
               (hi >= 0 ? std::to_string(hi - P) : "") + "}";
      std::string chain = prefix[size_t(K - 1)] + rest;  // from prefix item K-1 on
      for (int64_t i = K - 1; i-- > 0;)
        chain = prefix[size_t(i)] + " (" + comma_ + chain + " )" + (i + 1 >= lo ? "?" : "");
      return "( \"[\"" + W + "( " + chain + " )" + (lo == 0 ? "?" : "") + W + "\"]\" )";
    }
    if (no_more || hi == 0) return "( \"[\"" + W + "\"]\" )";
    const std::string more = "(" + comma_ + item + " ){" + std::to_string(lo > 0 ? lo - 1 : 0) + "," +
                             (hi >= 0 ? std::to_string(hi - 1) : "") + "}";
    if (lo == 0) return "( \"[\"" + W + "( " + item + " " + more + W + ")? \"]\" )";
    return "( \"[\"" + W + item + " " + more + W + "\"]\" )";
  }

  std::string object_rule(const Json& s, const std::string& ptr) {
    std::vector<std::pair<std::string, std::string>> props;  // (member rule, key)
    std::set<std::string> required;
    if (s.contains("required")) {
      if (!s["required"].is_array()) bad(ptr + "/required", "required must be an array of names");
      for (const Json& k : s["required"]) {
        if (!k.is_string()) bad(ptr + "/required", "required must be an array of names");
        required.insert(k.get<std::string>());
      }
    }
    if (s.contains("properties")) {
      if (!s["properties"].is_object()) bad(ptr + "/properties", "properties must be an object");
      for (auto it = s["properties"].begin(); it != s["properties"].end(); ++it) {
        const std::string v = rule_for(it.value(), ptr + "/properties/" + it.key());
        const std::string m = fresh("member");
        text_ += m + " ::= " + lit(Json(it.key()).dump()) + colon_ + v + "\n";
        props.push_back({m, it.key()});
      }
    }
    for (const std::string& k : required) {
      bool found = false;
      for (auto& p : props) found |= p.second == k;
      if (!found) bad(ptr + "/required", "required property '" + k + "' is not in properties");
    }
    std::string extra;
    if (s.contains("additionalProperties")) {
      const Json& a = s["additionalProperties"];
      if (!(a.is_boolean() && !a.get<bool>())) {
        const std::string v = a.is_boolean() ? "jv" : rule_for(a, ptr + "/additionalProperties");
        extra = fresh("extra");
        text_ += extra + " ::= jstr" + colon_ + v + "\n";
      }
    }
    // head_i: the members from i on when none was written yet; tail_i: after one was.
    const size_t n = props.size();
    std::vector<std::string> head(n + 1), tail(n + 1);
    for (size_t i = 0; i <= n; ++i) head[i] = fresh("head"), tail[i] = fresh("tail");
    // With whitespace, a member's separator is ws "," ws; the object's ends are "{" ws and
    // ws "}".
    const std::string sep = comma_;
    text_ += tail[n] + " ::= " + (extra.empty() ? "\"\"" : "(" + sep + extra + " )*") + "\n";
    text_ += head[n] + " ::= " + (extra.empty() ? "\"\"" : "( " + extra + " (" + sep + extra + " )* )?") + "\n";
    for (size_t i = n; i-- > 0;) {
      const bool req = required.count(props[i].second) > 0;
      text_ += tail[i] + " ::=" + sep + props[i].first + " " + tail[i + 1] + (req ? "" : " | " + tail[i + 1]) + "\n";
      text_ += head[i] + " ::= " + props[i].first + " " + tail[i + 1] + (req ? "" : " | " + head[i + 1]) + "\n";
    }
    if (W == " ") return "( \"{\" " + head[0] + " \"}\" )";
    return "( \"{\" ws " + head[0] + " ws \"}\" )";
  }

  const Json& root_;
  std::string W = " ";  // inside brackets: " " (compact, json.dumps) or " ws "
  std::string comma_ = " \",\" ";  // between members and items: W "," W, or ", " (json.dumps)
  std::string colon_ = " \":\" ";  // between a key and its value: W ":" W, or ": " (json.dumps)
  Grammar g_;
  std::string text_;
  std::map<std::string, std::string> refs_;
  int64_t n_ = 0;
};

}  // namespace

Grammar compile_json_schema(const std::string& schema_json, const JsonWhitespace& ws) {
  Json j;
  try {
    j = Json::parse(schema_json);
  } catch (const std::exception& e) {
    fail("JSON schema: not valid JSON: ", e.what());
  }
  return Compiler(j, ws).run();
}

}  // namespace gannet::structured
