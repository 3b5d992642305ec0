// Hugging Face tokenizers compile Split patterns with Oniguruma; gannet uses PCRE2. The
// two read most tokenizer patterns the same, except for some shorthand classes, which are
// rewritten here into explicit PCRE2 classes with Oniguruma's Unicode meaning:
//   \s  Oniguruma: U+0009-000D, U+0020, U+0085 and \p{Z}; PCRE2 adds U+180E.
//   \w  Oniguruma: Alphabetic, marks, decimal digits, connector punctuation and ²³¹¼½¾;
//       PCRE2 10.42: \p{L}, \p{N} and "_".
//   \h  Oniguruma: a hex digit; PCRE2: horizontal space.
//   \b, \B  word boundaries, by the \w above.
// Other constructs pass through unchanged (nested classes and "&&" intersections, which
// PCRE2 lacks, are not translated).
#pragma once

#include <string>
#include <string_view>

namespace gannet::tokenizer {

std::string onig_to_pcre2(std::string_view pattern);

}  // namespace gannet::tokenizer
