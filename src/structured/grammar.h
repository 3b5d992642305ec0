// The one internal grammar every front end (EBNF/GBNF, regex, JSON Schema) compiles to: a
// context-free grammar over bytes. A rule is a list of alternatives; an alternative is a
// sequence of elements, each a byte set (one byte from it) or a reference to a rule.
// Repetitions and options are desugared into helper rules by the front ends, Unicode into
// UTF-8 byte sequences, so the matcher (matcher.h) only ever sees bytes.
//
// Restriction: no left recursion (a rule that can reach itself without consuming a
// byte); Grammar::check() refuses it, naming the rule, because the matcher expands rule
// references eagerly.
#pragma once

#include <bitset>
#include <cstdint>
#include <string>
#include <vector>

namespace gannet::structured {

using ByteSet = std::bitset<256>;

struct Element {
  enum class Kind : uint8_t { kBytes, kRule };
  Kind kind = Kind::kBytes;
  int32_t id = 0;  // kBytes: index into Grammar::sets; kRule: index into Grammar::rules
};

struct Rule {
  std::string name;
  std::vector<std::vector<Element>> alts;  // an empty alternative matches nothing (epsilon)
};

class Grammar {
 public:
  // Rules are created by name (a reference before the definition is fine); the root is
  // set with set_root. Byte sets are interned.
  int32_t rule(const std::string& name);        // the rule's id, created empty if new
  int32_t new_rule(const std::string& prefix);  // a fresh helper rule "prefix_N"
  int32_t bytes(const ByteSet& s);
  void add_alt(int32_t rule, std::vector<Element> seq);
  void set_root(int32_t r) { root_ = r; }

  // Throws gannet::Error naming the problem: a referenced rule never defined, left
  // recursion, an empty grammar.
  void check() const;

  int32_t root() const { return root_; }
  const std::vector<Rule>& rules() const { return rules_; }
  const std::vector<ByteSet>& sets() const { return sets_; }
  // The rule's name, and whether it was ever given an alternative (defined).
  bool defined(int32_t r) const { return defined_[size_t(r)]; }

  // Intersects every byte set reachable from rule r with `allowed`, dropping the
  // alternatives that can no longer match (front ends: a regex inside a JSON string may
  // not produce bytes JSON would have to escape). Those rules must not be shared with
  // other parts of the grammar. Throws gannet::Error if r can then match nothing.
  void restrict_bytes(int32_t r, const ByteSet& allowed);

  // Makes rule r (and what it reaches) match the text of a JSON string's content that
  // decodes to its language: every byte that JSON must escape (the quote, the backslash,
  // U+0000-U+001F) is matched in its escaped forms (the short escape where one exists,
  // \u00XX in either hex case), the slash raw or as \/; other bytes stay raw (a \u escape
  // of a character that needs none is not matched). Those rules must not be shared with
  // other parts of the grammar.
  void json_escape(int32_t r);

  // Human-readable dump (tests, debugging): name ::= alternatives with [byte ranges].
  std::string to_string() const;

 private:
  std::vector<Rule> rules_;
  std::vector<bool> defined_;
  std::vector<ByteSet> sets_;
  int32_t root_ = -1;
  int64_t helpers_ = 0;
};

// Elements of common shapes, for front ends.
Element bytes_el(Grammar& g, const ByteSet& s);
Element rule_el(int32_t r);
// The byte sequences of a literal UTF-8 string, one element per byte.
std::vector<Element> literal(Grammar& g, const std::string& utf8);
// A rule matching exactly one code point in [lo, hi] (inclusive ranges, UTF-8 encoded,
// surrogates excluded); ranges may be given several at once (a character class) and
// negated (everything valid outside them).
int32_t code_point_class(Grammar& g, std::vector<std::pair<uint32_t, uint32_t>> ranges, bool negate,
                         const std::string& name_prefix);
// UTF-8 encoding of one code point (throws gannet::Error past U+10FFFF or on surrogates).
std::string utf8_encode(uint32_t cp);

}  // namespace gannet::structured
