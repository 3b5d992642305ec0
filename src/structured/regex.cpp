#include "structured/regex.h"

#include <algorithm>
#include <cctype>

#include "core/error.h"
#include "structured/gbnf.h"

namespace gannet::structured {

namespace {

using Ranges = std::vector<std::pair<uint32_t, uint32_t>>;

const Ranges kDigit = {{'0', '9'}};
const Ranges kWord = {{'0', '9'}, {'A', 'Z'}, {'_', '_'}, {'a', 'z'}};
const Ranges kSpace = {{'\t', '\r'}, {' ', ' '}, {0xA0, 0xA0}, {0x1680, 0x1680}, {0x2000, 0x200A},
                       {0x2028, 0x2029}, {0x202F, 0x202F}, {0x205F, 0x205F}, {0x3000, 0x3000}, {0xFEFF, 0xFEFF}};

Ranges complement(const Ranges& r) {
  Ranges sorted = r, out;
  std::sort(sorted.begin(), sorted.end());
  uint32_t next = 0;
  for (auto [lo, hi] : sorted) {
    if (lo > next) out.push_back({next, lo - 1});
    next = std::max(next, hi + 1);
  }
  if (next <= 0x10FFFF) out.push_back({next, 0x10FFFF});
  return out;
}

class RegexParser {
 public:
  RegexParser(Grammar& g, const std::string& p, const std::string& name) : g_(g), p_(p), name_(name) {}

  int32_t run() {
    if (i_ < p_.size() && p_[i_] == '^') ++i_;
    const int32_t r = g_.new_rule(name_);
    alternation(r, 0);
    if (i_ < p_.size()) error("unexpected ')'");
    return r;
  }

 private:
  [[noreturn]] void error(const std::string& what) { fail("regex /", p_, "/ at offset ", i_, ": ", what); }

  void alternation(int32_t r, int depth) {
    for (;;) {
      g_.add_alt(r, sequence(depth));
      if (i_ < p_.size() && p_[i_] == '|') {
        ++i_;
        continue;
      }
      return;
    }
  }

  std::vector<Element> sequence(int depth) {
    std::vector<Element> seq;
    while (i_ < p_.size() && p_[i_] != '|' && !(p_[i_] == ')' && depth > 0)) {
      if (p_[i_] == ')') error("unbalanced ')'");
      if (p_[i_] == '$') {
        ++i_;
        if (i_ != p_.size() && !(depth > 0 && p_[i_] == ')') && p_[i_] != '|')
          error("'$' is only supported at the end (the whole output must match)");
        continue;
      }
      if (p_[i_] == '^') error("'^' is only supported at the start (the whole output must match)");
      std::vector<Element> atom_els = atom(depth);
      quantified(atom_els);
      seq.insert(seq.end(), atom_els.begin(), atom_els.end());
    }
    return seq;
  }

  void quantified(std::vector<Element>& item) {
    if (i_ >= p_.size()) return;
    int64_t lo = -1, hi = -1;
    const size_t at = i_;
    const char c = p_[i_];
    if (c == '*') lo = 0, ++i_;
    else if (c == '+') lo = 1, ++i_;
    else if (c == '?') lo = 0, hi = 1, ++i_;
    else if (c == '{') {
      size_t k = i_ + 1;
      auto digits = [&]() {
        const size_t b = k;
        while (k < p_.size() && std::isdigit((unsigned char)p_[k])) ++k;
        if (k - b > 6) error("repetition count too large");
        return b == k ? int64_t(-1) : std::stoll(p_.substr(b, k - b));
      };
      const int64_t m = digits();
      if (m < 0) return;  // a literal '{' (ECMAScript's Annex B)
      int64_t n = m;
      if (k < p_.size() && p_[k] == ',') {
        ++k;
        n = digits();
      }
      if (k >= p_.size() || p_[k] != '}') return;  // a literal '{'
      i_ = k + 1;
      lo = m;
      hi = n;
    } else {
      return;
    }
    if (i_ < p_.size() && p_[i_] == '?') ++i_;  // lazy: the same language
    if (i_ < p_.size() && (p_[i_] == '*' || p_[i_] == '+' || p_[i_] == '?')) {
      i_ = at;
      error("nothing to repeat");
    }
    item = {rule_el(repeat_rule(g_, item, lo, hi, name_ + "_rep"))};
  }

  uint32_t hex(int n, bool braces = false) {
    uint32_t v = 0;
    int got = 0;
    if (braces) {
      while (i_ < p_.size() && p_[i_] != '}') {
        if (!std::isxdigit((unsigned char)p_[i_]) || ++got > 6) error("bad \\u{...} escape");
        v = v * 16 + uint32_t(std::stoul(std::string(1, p_[i_++]), nullptr, 16));
      }
      if (i_ >= p_.size() || got == 0) error("bad \\u{...} escape");
      ++i_;
      return v;
    }
    for (int k = 0; k < n; ++k) {
      if (i_ >= p_.size() || !std::isxdigit((unsigned char)p_[i_])) error("bad hexadecimal escape");
      v = v * 16 + uint32_t(std::stoul(std::string(1, p_[i_++]), nullptr, 16));
    }
    return v;
  }

  // One code point of the pattern's UTF-8 text at i_.
  uint32_t raw_code_point() {
    const unsigned char c = (unsigned char)p_[i_++];
    if (c < 0x80) return c;
    const int n = c >= 0xF0 ? 3 : c >= 0xE0 ? 2 : c >= 0xC0 ? 1 : -1;
    if (n < 0) error("invalid UTF-8");
    uint32_t v = c & (0x3F >> n);
    for (int k = 0; k < n; ++k) {
      if (i_ >= p_.size() || ((unsigned char)p_[i_] & 0xC0) != 0x80) error("invalid UTF-8");
      v = (v << 6) | ((unsigned char)p_[i_++] & 0x3F);
    }
    return v;
  }

  // An escape after '\' (i_ at the letter): a class (ranges) or one code point.
  Ranges escape(bool in_class) {
    if (i_ >= p_.size()) error("pattern ends with '\\'");
    const char e = p_[i_++];
    switch (e) {
      case 'd': return kDigit;
      case 'D': return complement(kDigit);
      case 'w': return kWord;
      case 'W': return complement(kWord);
      case 's': return kSpace;
      case 'S': return complement(kSpace);
      case 'n': return {{'\n', '\n'}};
      case 'r': return {{'\r', '\r'}};
      case 't': return {{'\t', '\t'}};
      case 'f': return {{'\f', '\f'}};
      case 'v': return {{'\v', '\v'}};
      case '0': return {{0, 0}};
      case 'x': {
        const uint32_t v = hex(2);
        return {{v, v}};
      }
      case 'u': {
        const bool br = i_ < p_.size() && p_[i_] == '{';
        if (br) ++i_;
        const uint32_t v = hex(4, br);
        return {{v, v}};
      }
      case 'b':
        if (in_class) return {{8, 8}};
        error("word boundaries (\\b) are not supported");
      case 'B': error("word boundaries (\\B) are not supported");
      default:
        if (std::isdigit((unsigned char)e)) error("back-references are not supported");
        if (e == 'k') error("named back-references are not supported");
        if (e == 'p' || e == 'P') error("Unicode property escapes (\\p) are not supported");
        if (std::isalnum((unsigned char)e)) error(std::string("unknown escape '\\") + e + "'");
        return {{uint32_t((unsigned char)e), uint32_t((unsigned char)e)}};
    }
  }

  std::vector<Element> atom(int depth) {
    const char c = p_[i_];
    if (c == '(') {
      ++i_;
      if (i_ < p_.size() && p_[i_] == '?') {
        ++i_;
        if (i_ < p_.size() && p_[i_] == ':') {
          ++i_;
        } else if (i_ < p_.size() && p_[i_] == '<' && i_ + 1 < p_.size() && p_[i_ + 1] != '=' && p_[i_ + 1] != '!') {
          while (i_ < p_.size() && p_[i_] != '>') ++i_;
          if (i_ >= p_.size()) error("unterminated group name");
          ++i_;
        } else {
          error("lookaround and other (?...) groups are not supported");
        }
      }
      const int32_t r = g_.new_rule(name_ + "_group");
      alternation(r, depth + 1);
      if (i_ >= p_.size() || p_[i_] != ')') error("missing ')'");
      ++i_;
      return {rule_el(r)};
    }
    if (c == '[') return {rule_el(char_class())};
    if (c == '.') {
      ++i_;
      return {rule_el(code_point_class(g_, {{'\n', '\n'}, {'\r', '\r'}, {0x2028, 0x2029}}, true, name_ + "_dot"))};
    }
    if (c == '*' || c == '+' || c == '?') error("nothing to repeat");
    if (c == '\\') {
      ++i_;
      const Ranges r = escape(false);
      if (r.size() == 1 && r[0].first == r[0].second) return literal(g_, utf8_encode(r[0].first));
      return {rule_el(code_point_class(g_, r, false, name_ + "_class"))};
    }
    return literal(g_, utf8_encode(raw_code_point()));
  }

  int32_t char_class() {
    ++i_;  // '['
    bool neg = false;
    if (i_ < p_.size() && p_[i_] == '^') neg = true, ++i_;
    Ranges ranges;
    while (i_ < p_.size() && p_[i_] != ']') {
      Ranges lo_r;
      if (p_[i_] == '\\') {
        ++i_;
        lo_r = escape(true);
      } else {
        const uint32_t v = raw_code_point();
        lo_r = {{v, v}};
      }
      const bool single = lo_r.size() == 1 && lo_r[0].first == lo_r[0].second;
      if (single && i_ + 1 < p_.size() && p_[i_] == '-' && p_[i_ + 1] != ']') {
        ++i_;
        Ranges hi_r;
        if (p_[i_] == '\\') {
          ++i_;
          hi_r = escape(true);
        } else {
          const uint32_t v = raw_code_point();
          hi_r = {{v, v}};
        }
        if (hi_r.size() != 1 || hi_r[0].first != hi_r[0].second) error("a class escape cannot end a range");
        if (hi_r[0].first < lo_r[0].first) error("range out of order in character class");
        ranges.push_back({lo_r[0].first, hi_r[0].first});
      } else {
        ranges.insert(ranges.end(), lo_r.begin(), lo_r.end());
      }
    }
    if (i_ >= p_.size()) error("unterminated character class");
    ++i_;
    if (ranges.empty() && !neg) error("empty character class [] matches nothing");
    if (ranges.empty()) return code_point_class(g_, {}, true, name_ + "_any");  // [^] matches anything
    return code_point_class(g_, ranges, neg, name_ + "_class");
  }

  Grammar& g_;
  const std::string& p_;
  std::string name_;
  size_t i_ = 0;
};

}  // namespace

int32_t add_regex(Grammar& g, const std::string& pattern, const std::string& name) {
  return RegexParser(g, pattern, name).run();
}

Grammar parse_regex(const std::string& pattern) {
  Grammar g;
  g.set_root(add_regex(g, pattern));
  g.check();
  return g;
}

}  // namespace gannet::structured
