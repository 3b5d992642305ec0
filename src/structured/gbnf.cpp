#include "structured/gbnf.h"

#include <cctype>
#include <set>

#include "core/error.h"

namespace gannet::structured {

int32_t repeat_rule(Grammar& g, const std::vector<Element>& inner, int64_t min, int64_t max, const std::string& name) {
  if (min < 0 || (max >= 0 && max < min)) fail("repetition {", min, ",", max, "} is empty or reversed");
  if (min > 10000 || max > 10000) fail("repetition bounds above 10000 are not supported (got {", min, ",", max, "})");
  const int32_t r = g.new_rule(name);
  std::vector<Element> seq;
  for (int64_t i = 0; i < min; ++i) seq.insert(seq.end(), inner.begin(), inner.end());
  if (max < 0) {
    // star ::= inner star | ()
    const int32_t star = g.new_rule(name + "_star");
    std::vector<Element> a = inner;
    a.push_back(rule_el(star));
    g.add_alt(star, a);
    g.add_alt(star, {});
    seq.push_back(rule_el(star));
  } else if (max > min) {
    // opt_k ::= inner opt_{k-1} | (), opt_1 ::= inner | ()
    int32_t prev = -1;
    for (int64_t k = 1; k <= max - min; ++k) {
      const int32_t opt = g.new_rule(name + "_opt");
      std::vector<Element> a = inner;
      if (prev >= 0) a.push_back(rule_el(prev));
      g.add_alt(opt, a);
      g.add_alt(opt, {});
      prev = opt;
    }
    seq.push_back(rule_el(prev));
  }
  g.add_alt(r, seq);
  return r;
}

namespace {

class Parser {
 public:
  Parser(const std::string& t, Grammar& g) : s_(t), g_(g) {}

  void rules() {
    skip(true);
    while (i_ < s_.size()) {
      const size_t at = i_;
      const std::string name = ident();
      if (name.empty()) error(at, "expected a rule name");
      skip(true);
      if (s_.compare(i_, 3, "::=") != 0) error(i_, "expected '::=' after rule name '" + name + "'");
      i_ += 3;
      const int32_t r = g_.rule(name);
      if (!defined_.insert(name).second) error(at, "rule '" + name + "' is defined twice");
      alternates(r);
      skip(true);
    }
  }

  void run(const std::string& root) {
    rules();
    bool found = false;
    for (size_t r = 0; r < g_.rules().size(); ++r) found |= g_.rules()[r].name == root && g_.defined(int32_t(r));
    if (!found) fail("grammar: no rule named '", root, "' (the root)");
    g_.set_root(g_.rule(root));
    g_.check();
  }

 private:
  [[noreturn]] void error(size_t at, const std::string& what) {
    size_t line = 1, col = 1;
    for (size_t k = 0; k < at && k < s_.size(); ++k) {
      if (s_[k] == '\n') ++line, col = 1;
      else ++col;
    }
    fail("grammar: line ", line, ", column ", col, ": ", what);
  }

  void skip(bool newlines) {
    while (i_ < s_.size()) {
      const char c = s_[i_];
      if (c == '#') {
        while (i_ < s_.size() && s_[i_] != '\n') ++i_;
      } else if (c == ' ' || c == '\t' || c == '\r' || (newlines && c == '\n')) {
        ++i_;
      } else {
        break;
      }
    }
  }

  static bool ident_char(char c) { return std::isalnum((unsigned char)c) || c == '-' || c == '_'; }

  std::string ident() {
    const size_t b = i_;
    while (i_ < s_.size() && ident_char(s_[i_])) ++i_;
    return s_.substr(b, i_ - b);
  }

  // True if an identifier followed by '::=' starts at i_ (the next rule's head).
  bool at_rule_head() {
    size_t k = i_;
    while (k < s_.size() && ident_char(s_[k])) ++k;
    if (k == i_) return false;
    while (k < s_.size() && (s_[k] == ' ' || s_[k] == '\t' || s_[k] == '\r' || s_[k] == '\n')) ++k;
    return s_.compare(k, 3, "::=") == 0;
  }

  // Alternatives into rule r, up to ')' or the end or the next rule's head.
  void alternates(int32_t r) {
    for (;;) {
      g_.add_alt(r, sequence());
      skip(true);
      if (i_ < s_.size() && s_[i_] == '|') {
        ++i_;
        continue;
      }
      return;
    }
  }

  std::vector<Element> sequence() {
    std::vector<Element> seq;
    for (;;) {
      skip(true);
      if (i_ >= s_.size() || s_[i_] == '|' || s_[i_] == ')' || at_rule_head()) return seq;
      const size_t at = i_;
      std::vector<Element> item = primary();
      // Postfix operators.
      skip(false);
      if (i_ < s_.size() && (s_[i_] == '*' || s_[i_] == '+' || s_[i_] == '?' || s_[i_] == '{')) {
        int64_t lo = 0, hi = -1;
        const char op = s_[i_++];
        if (op == '+') lo = 1;
        else if (op == '?') hi = 1;
        else if (op == '{') {
          lo = number(at);
          hi = lo;
          skip(false);
          if (i_ < s_.size() && s_[i_] == ',') {
            ++i_;
            skip(false);
            hi = i_ < s_.size() && std::isdigit((unsigned char)s_[i_]) ? number(at) : -1;
          }
          skip(false);
          if (i_ >= s_.size() || s_[i_] != '}') error(i_, "expected '}' to close a repetition");
          ++i_;
        }
        try {
          item = {rule_el(repeat_rule(g_, item, lo, hi, "rep"))};
        } catch (const Error& e) {
          error(at, e.what());
        }
      }
      seq.insert(seq.end(), item.begin(), item.end());
    }
  }

  int64_t number(size_t at) {
    skip(false);
    const size_t b = i_;
    while (i_ < s_.size() && std::isdigit((unsigned char)s_[i_])) ++i_;
    if (b == i_ || i_ - b > 6) error(at, "expected a repetition count");
    return std::stoll(s_.substr(b, i_ - b));
  }

  // One code point of a literal or class at i_ (escapes decoded, UTF-8 decoded).
  uint32_t code_point() {
    const size_t at = i_;
    if (i_ >= s_.size()) error(at, "unexpected end of grammar");
    unsigned char c = (unsigned char)s_[i_++];
    if (c == '\\') {
      if (i_ >= s_.size()) error(at, "unfinished escape");
      const char e = s_[i_++];
      auto hex = [&](int n) {
        uint32_t v = 0;
        for (int k = 0; k < n; ++k) {
          if (i_ >= s_.size() || !std::isxdigit((unsigned char)s_[i_])) error(at, "bad hexadecimal escape");
          const char h = s_[i_++];
          v = v * 16 + uint32_t(std::isdigit((unsigned char)h) ? h - '0' : std::tolower((unsigned char)h) - 'a' + 10);
        }
        return v;
      };
      switch (e) {
        case 'n': return '\n';
        case 'r': return '\r';
        case 't': return '\t';
        case 'x': return hex(2);
        case 'u': return hex(4);
        case 'U': return hex(8);
        case '\\': case '"': case '\'': case '[': case ']': case '-': case '/': case '^': return uint32_t(e);
        default: error(at, std::string("unknown escape '\\") + e + "'");
      }
    }
    if (c < 0x80) return c;
    // UTF-8 in the grammar text.
    const int n = c >= 0xF0 ? 3 : c >= 0xE0 ? 2 : c >= 0xC0 ? 1 : -1;
    if (n < 0) error(at, "invalid UTF-8 in the grammar");
    uint32_t v = c & (0x3F >> n);
    for (int k = 0; k < n; ++k) {
      if (i_ >= s_.size() || ((unsigned char)s_[i_] & 0xC0) != 0x80) error(at, "invalid UTF-8 in the grammar");
      v = (v << 6) | ((unsigned char)s_[i_++] & 0x3F);
    }
    return v;
  }

  std::vector<Element> primary() {
    const size_t at = i_;
    const char c = s_[i_];
    try {
      if (c == '"') {
        ++i_;
        std::string bytes;
        while (i_ < s_.size() && s_[i_] != '"') bytes += utf8_encode(code_point());
        if (i_ >= s_.size()) error(at, "unterminated string literal");
        ++i_;
        if (bytes.empty()) return {};
        return literal(g_, bytes);
      }
      if (c == '[') {
        ++i_;
        bool neg = false;
        if (i_ < s_.size() && s_[i_] == '^') neg = true, ++i_;
        std::vector<std::pair<uint32_t, uint32_t>> ranges;
        while (i_ < s_.size() && s_[i_] != ']') {
          const uint32_t lo = code_point();
          uint32_t hi = lo;
          if (i_ + 1 < s_.size() && s_[i_] == '-' && s_[i_ + 1] != ']') {
            ++i_;
            hi = code_point();
          }
          ranges.push_back({lo, hi});
        }
        if (i_ >= s_.size()) error(at, "unterminated character class");
        ++i_;
        if (ranges.empty() && !neg) error(at, "empty character class");
        return {rule_el(code_point_class(g_, ranges, neg, "class"))};
      }
      if (c == '.') {
        ++i_;
        return {rule_el(code_point_class(g_, {}, true, "any"))};
      }
      if (c == '(') {
        ++i_;
        const int32_t r = g_.new_rule("group");
        alternates(r);
        skip(true);
        if (i_ >= s_.size() || s_[i_] != ')') error(at, "unclosed '('");
        ++i_;
        return {rule_el(r)};
      }
      if (ident_char(c)) {
        const std::string name = ident();
        return {rule_el(g_.rule(name))};
      }
    } catch (const Error& e) {
      if (std::string(e.what()).rfind("grammar: line", 0) == 0) throw;
      error(at, e.what());
    }
    error(at, std::string("unexpected '") + c + "'");
  }

  const std::string& s_;
  size_t i_ = 0;
  Grammar& g_;
  std::set<std::string> defined_;
};

}  // namespace

Grammar parse_gbnf(const std::string& text, const std::string& root) {
  Grammar g;
  Parser(text, g).run(root);
  return g;
}

void add_gbnf(Grammar& g, const std::string& text) { Parser(text, g).rules(); }

}  // namespace gannet::structured
