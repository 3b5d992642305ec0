#include "structured/grammar.h"

#include <algorithm>
#include <functional>
#include <sstream>

#include "core/error.h"

namespace gannet::structured {

int32_t Grammar::rule(const std::string& name) {
  for (size_t i = 0; i < rules_.size(); ++i)
    if (rules_[i].name == name) return int32_t(i);
  rules_.push_back({name, {}});
  defined_.push_back(false);
  return int32_t(rules_.size() - 1);
}

int32_t Grammar::new_rule(const std::string& prefix) {
  for (;;) {
    const std::string name = prefix + "_" + std::to_string(helpers_++);
    bool taken = false;
    for (const Rule& r : rules_) taken |= r.name == name;
    if (!taken) {
      rules_.push_back({name, {}});
      defined_.push_back(true);  // a helper may legitimately stay empty only if built so
      return int32_t(rules_.size() - 1);
    }
  }
}

int32_t Grammar::bytes(const ByteSet& s) {
  for (size_t i = 0; i < sets_.size(); ++i)
    if (sets_[i] == s) return int32_t(i);
  sets_.push_back(s);
  return int32_t(sets_.size() - 1);
}

void Grammar::add_alt(int32_t r, std::vector<Element> seq) {
  GANNET_CHECK(r >= 0 && r < int32_t(rules_.size()), "rule ", r);
  rules_[size_t(r)].alts.push_back(std::move(seq));
  defined_[size_t(r)] = true;
}

void Grammar::check() const {
  if (root_ < 0 || root_ >= int32_t(rules_.size())) fail("grammar: no root rule");
  for (size_t r = 0; r < rules_.size(); ++r)
    for (const auto& alt : rules_[r].alts)
      for (const Element& e : alt) {
        if (e.kind == Element::Kind::kRule && !defined_[size_t(e.id)])
          fail("grammar: rule '", rules_[r].name, "' refers to '", rules_[size_t(e.id)].name,
               "', which is not defined");
        if (e.kind == Element::Kind::kBytes && sets_[size_t(e.id)].none())
          fail("grammar: rule '", rules_[r].name, "' has an empty character class (it can never match)");
      }
  // Nullable rules (can match the empty string), to a fixpoint.
  std::vector<bool> nullable(rules_.size(), false);
  for (bool changed = true; changed;) {
    changed = false;
    for (size_t r = 0; r < rules_.size(); ++r) {
      if (nullable[r]) continue;
      for (const auto& alt : rules_[r].alts) {
        bool all = true;
        for (const Element& e : alt) all = all && e.kind == Element::Kind::kRule && nullable[size_t(e.id)];
        if (all) {
          nullable[r] = changed = true;
          break;
        }
      }
    }
  }
  // Left recursion: a cycle through references reachable without consuming a byte.
  std::vector<int> state(rules_.size(), 0);  // 0 new, 1 on the path, 2 done
  std::vector<int32_t> path;
  std::function<void(int32_t)> visit = [&](int32_t r) {
    state[size_t(r)] = 1;
    path.push_back(r);
    for (const auto& alt : rules_[size_t(r)].alts)
      for (const Element& e : alt) {
        if (e.kind != Element::Kind::kRule) break;
        if (state[size_t(e.id)] == 1) {
          std::string cyc;
          for (size_t i = 0; i < path.size(); ++i)
            if (path[i] == e.id || !cyc.empty()) cyc += rules_[size_t(path[i])].name + " -> ";
          fail("grammar: left recursion (", cyc, rules_[size_t(e.id)].name,
               ") is not supported; rewrite it with repetition, e.g. a ::= b (\"op\" b)*");
        }
        if (state[size_t(e.id)] == 0) visit(e.id);
        if (!nullable[size_t(e.id)]) break;
      }
    path.pop_back();
    state[size_t(r)] = 2;
  };
  for (size_t r = 0; r < rules_.size(); ++r)
    if (state[r] == 0) visit(int32_t(r));
}

void Grammar::restrict_bytes(int32_t root, const ByteSet& allowed) {
  std::vector<bool> seen(rules_.size(), false);
  std::vector<int32_t> todo = {root};
  seen[size_t(root)] = true;
  while (!todo.empty()) {
    const int32_t r = todo.back();
    todo.pop_back();
    auto& alts = rules_[size_t(r)].alts;
    std::vector<std::vector<Element>> kept;
    for (auto& alt : alts) {
      bool ok = true;
      for (Element& e : alt) {
        if (e.kind == Element::Kind::kRule) {
          if (!seen[size_t(e.id)]) seen[size_t(e.id)] = true, todo.push_back(e.id);
          continue;
        }
        const ByteSet s = sets_[size_t(e.id)] & allowed;
        if (s.none()) ok = false;
        else e.id = bytes(s);
      }
      if (ok) kept.push_back(std::move(alt));
    }
    alts = std::move(kept);
  }
  // Rules left without alternatives match nothing: drop the alternatives using them, to
  // a fixpoint; the root must survive.
  for (bool changed = true; changed;) {
    changed = false;
    for (size_t r = 0; r < rules_.size(); ++r) {
      if (!seen[r]) continue;
      auto& alts = rules_[r].alts;
      const size_t before = alts.size();
      alts.erase(std::remove_if(alts.begin(), alts.end(),
                                [&](const std::vector<Element>& alt) {
                                  for (const Element& e : alt)
                                    if (e.kind == Element::Kind::kRule && rules_[size_t(e.id)].alts.empty()) return true;
                                  return false;
                                }),
                 alts.end());
      changed |= alts.size() != before;
    }
  }
  if (rules_[size_t(root)].alts.empty()) fail("grammar: rule '", rules_[size_t(root)].name, "' matches nothing once restricted");
}

void Grammar::json_escape(int32_t root) {
  ByteSet special;
  for (int b = 0; b < 0x20; ++b) special.set(size_t(b));
  special.set('"');
  special.set('\\');
  special.set('/');  // kept raw, and also matched as \/
  std::vector<int32_t> escaped(sets_.size(), -1);  // per byte set: its escaping rule
  auto escaping = [&](int32_t set_id) {
    if (escaped.size() <= size_t(set_id)) escaped.resize(size_t(set_id) + 1, -1);
    if (escaped[size_t(set_id)] >= 0) return escaped[size_t(set_id)];
    const ByteSet s = sets_[size_t(set_id)];
    const int32_t r = new_rule("json_escaped");
    ByteSet raw = s & ~special;
    if (s['/']) raw.set('/');
    if (raw.any()) add_alt(r, {bytes_el(*this, raw)});
    const char* hex = "0123456789abcdef";
    for (int b = 0; b < 0x80; ++b) {
      if (!s[size_t(b)] || !special[size_t(b)]) continue;
      const char* shortform = b == '"' ? "\"" : b == '\\' ? "\\" : b == '/' ? "/" : b == '\b' ? "b" : b == '\f' ? "f"
                            : b == '\n' ? "n" : b == '\r' ? "r" : b == '\t' ? "t" : nullptr;
      if (shortform) add_alt(r, literal(*this, std::string("\\") + shortform));
      if (b == '/') continue;  // \u002F is valid JSON too, but no encoder writes it
      std::vector<Element> u = literal(*this, "\\u00");
      auto digit = [&](int v) {
        ByteSet d;
        d.set(size_t(uint8_t(hex[v])));
        if (v >= 10) d.set(size_t(uint8_t(hex[v] - 'a' + 'A')));
        return bytes_el(*this, d);
      };
      u.push_back(digit(b >> 4));
      u.push_back(digit(b & 15));
      add_alt(r, std::move(u));
    }
    if (rules_[size_t(r)].alts.empty()) fail("grammar: json_escape of an empty byte set");
    escaped[size_t(set_id)] = r;
    return r;
  };
  const size_t n_before = rules_.size();
  std::vector<bool> seen(n_before, false);
  std::vector<int32_t> todo = {root};
  seen[size_t(root)] = true;
  while (!todo.empty()) {
    const int32_t r = todo.back();
    todo.pop_back();
    std::vector<std::vector<Element>> alts = rules_[size_t(r)].alts;  // a copy: escaping() adds rules
    for (auto& alt : alts)
      for (Element& e : alt) {
        if (e.kind == Element::Kind::kRule) {
          if (size_t(e.id) < n_before && !seen[size_t(e.id)]) seen[size_t(e.id)] = true, todo.push_back(e.id);
          continue;
        }
        if ((sets_[size_t(e.id)] & special).any()) e = rule_el(escaping(e.id));
      }
    rules_[size_t(r)].alts = std::move(alts);
  }
}

std::string Grammar::to_string() const {
  std::ostringstream os;
  auto set_str = [&](const ByteSet& s) {
    std::string out = "[";
    for (int b = 0; b < 256;) {
      if (!s[size_t(b)]) {
        ++b;
        continue;
      }
      int e = b;
      while (e + 1 < 256 && s[size_t(e + 1)]) ++e;
      char buf[24];
      if (e == b) std::snprintf(buf, sizeof buf, "\\x%02X", b);
      else std::snprintf(buf, sizeof buf, "\\x%02X-\\x%02X", b, e);
      out += buf;
      b = e + 1;
    }
    return out + "]";
  };
  for (size_t r = 0; r < rules_.size(); ++r) {
    os << rules_[r].name << " ::=";
    for (size_t a = 0; a < rules_[r].alts.size(); ++a) {
      if (a) os << " |";
      if (rules_[r].alts[a].empty()) os << " ()";
      for (const Element& e : rules_[r].alts[a])
        os << " " << (e.kind == Element::Kind::kRule ? rules_[size_t(e.id)].name : set_str(sets_[size_t(e.id)]));
    }
    os << "\n";
  }
  return os.str();
}

Element bytes_el(Grammar& g, const ByteSet& s) { return {Element::Kind::kBytes, g.bytes(s)}; }
Element rule_el(int32_t r) { return {Element::Kind::kRule, r}; }

std::vector<Element> literal(Grammar& g, const std::string& utf8) {
  std::vector<Element> out;
  for (unsigned char c : utf8) {
    ByteSet s;
    s.set(c);
    out.push_back(bytes_el(g, s));
  }
  return out;
}

std::string utf8_encode(uint32_t cp) {
  if (cp > 0x10FFFF || (cp >= 0xD800 && cp <= 0xDFFF)) fail("code point U+", cp, " cannot be encoded in UTF-8");
  std::string s;
  if (cp < 0x80) {
    s += char(cp);
  } else if (cp < 0x800) {
    s += char(0xC0 | (cp >> 6));
    s += char(0x80 | (cp & 0x3F));
  } else if (cp < 0x10000) {
    s += char(0xE0 | (cp >> 12));
    s += char(0x80 | ((cp >> 6) & 0x3F));
    s += char(0x80 | (cp & 0x3F));
  } else {
    s += char(0xF0 | (cp >> 18));
    s += char(0x80 | ((cp >> 12) & 0x3F));
    s += char(0x80 | ((cp >> 6) & 0x3F));
    s += char(0x80 | (cp & 0x3F));
  }
  return s;
}

namespace {

// Byte-sequence alternatives matching the UTF-8 encodings of [lo, hi], all of one length.
void utf8_range(Grammar& g, const std::string& a, const std::string& b, size_t i, std::vector<Element> prefix,
                std::vector<std::vector<Element>>* out) {
  const size_t n = a.size();
  auto range_set = [](int x, int y) {
    ByteSet s;
    for (int c = x; c <= y; ++c) s.set(size_t(c));
    return s;
  };
  const int ai = (unsigned char)a[i], bi = (unsigned char)b[i];
  if (i + 1 == n) {
    prefix.push_back(bytes_el(g, range_set(ai, bi)));
    out->push_back(std::move(prefix));
    return;
  }
  if (ai == bi) {
    prefix.push_back(bytes_el(g, range_set(ai, ai)));
    utf8_range(g, a, b, i + 1, std::move(prefix), out);
    return;
  }
  const std::string cont_min(n - i - 1, char(0x80)), cont_max(n - i - 1, char(0xBF));
  int full_lo = ai, full_hi = bi;
  if (a.substr(i + 1) != cont_min) {
    std::vector<Element> p = prefix;
    p.push_back(bytes_el(g, range_set(ai, ai)));
    utf8_range(g, a.substr(0, i + 1) + a.substr(i + 1), std::string(a.substr(0, i + 1)) + cont_max, i + 1, p, out);
    full_lo = ai + 1;
  }
  if (b.substr(i + 1) != cont_max) {
    std::vector<Element> p = prefix;
    p.push_back(bytes_el(g, range_set(bi, bi)));
    utf8_range(g, std::string(b.substr(0, i + 1)) + cont_min, b, i + 1, p, out);
    full_hi = bi - 1;
  }
  if (full_lo <= full_hi) {
    std::vector<Element> p = prefix;
    p.push_back(bytes_el(g, range_set(full_lo, full_hi)));
    for (size_t k = i + 1; k < n; ++k) p.push_back(bytes_el(g, range_set(0x80, 0xBF)));
    out->push_back(std::move(p));
  }
}

}  // namespace

int32_t code_point_class(Grammar& g, std::vector<std::pair<uint32_t, uint32_t>> ranges, bool negate,
                         const std::string& name_prefix) {
  for (auto& [lo, hi] : ranges) {
    if (lo > hi) fail("character class range U+", lo, "-U+", hi, " is reversed");
    hi = std::min<uint32_t>(hi, 0x10FFFF);
  }
  std::sort(ranges.begin(), ranges.end());
  std::vector<std::pair<uint32_t, uint32_t>> merged;
  for (auto r : ranges) {
    if (r.first > 0x10FFFF) continue;
    if (!merged.empty() && r.first <= merged.back().second + 1) merged.back().second = std::max(merged.back().second, r.second);
    else merged.push_back(r);
  }
  if (negate) {
    std::vector<std::pair<uint32_t, uint32_t>> inv;
    uint32_t next = 0;
    for (auto [lo, hi] : merged) {
      if (lo > next) inv.push_back({next, lo - 1});
      next = hi + 1;
    }
    if (next <= 0x10FFFF) inv.push_back({next, 0x10FFFF});
    merged = inv;
  }
  // Split at the UTF-8 length boundaries and around the surrogates.
  std::vector<std::pair<uint32_t, uint32_t>> pieces;
  const uint32_t cuts[][2] = {{0, 0x7F}, {0x80, 0x7FF}, {0x800, 0xD7FF}, {0xE000, 0xFFFF}, {0x10000, 0x10FFFF}};
  for (auto [lo, hi] : merged)
    for (auto& c : cuts) {
      const uint32_t a = std::max(lo, c[0]), b = std::min(hi, c[1]);
      if (a <= b) pieces.push_back({a, b});
    }
  const int32_t r = g.new_rule(name_prefix);
  std::vector<std::vector<Element>> alts;
  for (auto [lo, hi] : pieces) utf8_range(g, utf8_encode(lo), utf8_encode(hi), 0, {}, &alts);
  if (alts.empty()) fail("character class matches no character");
  // One-byte alternatives (ASCII) share one byte set: fewer paths for the matcher.
  ByteSet ascii;
  bool any_ascii = false;
  for (auto& a : alts) {
    if (a.size() != 1) continue;
    ascii |= g.sets()[size_t(a[0].id)];
    any_ascii = true;
  }
  if (any_ascii) g.add_alt(r, {bytes_el(g, ascii)});
  for (auto& a : alts)
    if (a.size() > 1) g.add_alt(r, std::move(a));
  return r;
}

}  // namespace gannet::structured
