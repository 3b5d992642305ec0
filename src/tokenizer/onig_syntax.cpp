#include "tokenizer/onig_syntax.h"

namespace gannet::tokenizer {

namespace {

// Class contents (usable inside [...]) for each translated shorthand.
constexpr std::string_view kSpace = R"(\t-\r\x{20}\x{85}\p{Z})";
// Oniguruma's Latin-1 table also counts the superscripts and fractions ²³¹¼½¾ as word
// characters.
constexpr std::string_view kWord = R"(\p{Alphabetic}\p{M}\p{Nd}\p{Pc}\x{B2}\x{B3}\x{B9}\x{BC}-\x{BE})";
constexpr std::string_view kHex = "0-9a-fA-F";

std::string_view class_of(char c) {
  switch (c) {
    case 's': case 'S': return kSpace;
    case 'w': case 'W': return kWord;
    case 'h': case 'H': return kHex;
    default: return {};
  }
}

}  // namespace

std::string onig_to_pcre2(std::string_view p) {
  std::string out;
  out.reserve(p.size() + 32);
  bool in_class = false;
  for (size_t i = 0; i < p.size(); ++i) {
    const char c = p[i];
    if (c == '\\' && i + 1 < p.size()) {
      const char n = p[++i];
      if (!in_class && (n == 'b' || n == 'B')) {  // word boundaries follow the \w above
        const std::string w = "[" + std::string(kWord) + "]";
        out += n == 'b' ? "(?:(?<=" + w + ")(?!" + w + ")|(?<!" + w + ")(?=" + w + "))"
                        : "(?:(?<=" + w + ")(?=" + w + ")|(?<!" + w + ")(?!" + w + "))";
        continue;
      }
      std::string_view cls = class_of(n);
      const bool negated = n == 'S' || n == 'W' || n == 'H';
      if (cls.empty() || (in_class && negated)) {
        // Not translated; a negated shorthand inside a class cannot be written as a union.
        out += c;
        out += n;
      } else if (in_class) {
        out += cls;
      } else {
        out += negated ? "[^" : "[";
        out += cls;
        out += ']';
      }
      continue;
    }
    if (!in_class && c == '[') {
      in_class = true;
      out += c;
      if (i + 1 < p.size() && p[i + 1] == '^') out += p[++i];
      if (i + 1 < p.size() && p[i + 1] == ']') out += p[++i];  // a leading ']' is literal
      continue;
    }
    if (in_class && c == '[' && i + 1 < p.size() && p[i + 1] == ':') {  // POSIX [:name:]
      size_t end = p.find(":]", i + 2);
      if (end != std::string_view::npos) {
        out.append(p.substr(i, end + 2 - i));
        i = end + 1;
        continue;
      }
    }
    if (in_class && c == ']') in_class = false;
    out += c;
  }
  return out;
}

}  // namespace gannet::tokenizer
