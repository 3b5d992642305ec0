// PCRE2 (UTF + Unicode properties, JIT) behind the matching rules of Hugging Face
// tokenizers, which use Oniguruma: each pre-tokenized piece is its own subject, and empty
// matches are reported the way the Rust `onig` crate's find_iter reports them.
//
// Patterns are translated by onig_to_pcre2 (onig_syntax.h) where the engines' shorthand
// classes differ; the two may still use different Unicode versions for \p{..}. Invalid
// UTF-8 in a subject is allowed (PCRE2_MATCH_INVALID_UTF): ill-formed bytes never match
// anything, so they end up in the gaps between matches and byte-level BPE still encodes
// them.
#pragma once

#include <cstddef>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

struct pcre2_real_code_8;

namespace gannet::tokenizer {

// One span of a subject: [begin, end) and whether the pattern matched it (else a gap).
struct Span {
  size_t begin, end;
  bool is_match;
};

class Regex {
 public:
  // Throws gannet::Error naming the pattern, the offset and PCRE2's reason on a bad
  // pattern (Oniguruma syntax, see onig_syntax.h). `literal` matches the pattern's text
  // verbatim.
  explicit Regex(const std::string& pattern, bool literal = false);

  // Leftmost match starting at or after `start`; false if none.
  bool search(std::string_view subject, size_t start, size_t& match_begin, size_t& match_end) const;

  // The whole subject as consecutive spans, matches and the gaps between them in order
  // (Hugging Face's Pattern::find_matches); an empty subject gives one empty gap.
  void find_matches(std::string_view subject, std::vector<Span>& out) const;

  const std::string& pattern() const { return pattern_; }

 private:
  std::string pattern_;
  std::shared_ptr<pcre2_real_code_8> code_;  // immutable once compiled: safe to share
};

}  // namespace gannet::tokenizer
