#include "tokenizer/added_tokens.h"

#include <algorithm>

#include "tokenizer/regex.h"
#include "tokenizer/utf8.h"

namespace gannet::tokenizer {

namespace {

// Hugging Face decides single_word with the Rust regex crate's \w: Alphabetic, marks,
// decimal digits, connector punctuation and the two joiners.
bool is_word_character(char32_t cp) {
  if (cp < 0x80)
    return (cp >= '0' && cp <= '9') || ((cp | 0x20) >= 'a' && (cp | 0x20) <= 'z') || cp == '_';
  if (cp == kInvalidCodePoint) return false;
  static const Regex kWord(R"(^[\p{Alphabetic}\p{M}\p{Nd}\p{Pc}\x{200C}\x{200D}]$)");
  std::string s;
  append_utf8(s, cp);
  size_t b, e;
  return kWord.search(s, 0, b, e);
}

// The code point that ends text[0..pos).
char32_t code_point_before(std::string_view text, size_t pos, size_t& start) {
  start = pos;
  while (start > 0 && pos - start < 4) {
    --start;
    if ((uint8_t(text[start]) & 0xC0) != 0x80) break;
  }
  size_t i = start;
  char32_t cp = next_code_point(text, i);
  if (i != pos) {  // not a complete character ending at pos: treat the last byte alone
    start = pos - 1;
    return kInvalidCodePoint;
  }
  return cp;
}

}  // namespace

AddedTokenMatcher::AddedTokenMatcher(std::vector<AddedToken> tokens) : tokens_(std::move(tokens)) {
  terminal_.push_back(-1);
  for (size_t t = 0; t < tokens_.size(); ++t) {
    const std::string& c = tokens_[t].content;
    if (c.empty()) continue;  // matches nothing, as in Hugging Face
    first_byte_[uint8_t(c[0])] = true;
    uint32_t node = 0;
    for (unsigned char b : c) {
      auto [it, inserted] = edges_.try_emplace((uint64_t(node) << 8) | b, uint32_t(terminal_.size()));
      if (inserted) terminal_.push_back(-1);
      node = it->second;
    }
    terminal_[node] = int32_t(t);  // a later duplicate wins, like a map insert
  }
}

size_t AddedTokenMatcher::longest_at(std::string_view text, size_t pos, int32_t& token) const {
  size_t best = 0;
  uint32_t node = 0;
  for (size_t i = pos; i < text.size(); ++i) {
    auto it = edges_.find((uint64_t(node) << 8) | uint8_t(text[i]));
    if (it == edges_.end()) break;
    node = it->second;
    if (terminal_[node] >= 0) {
      best = i + 1 - pos;
      token = terminal_[node];
    }
  }
  return best;
}

void AddedTokenMatcher::find(std::string_view text, std::vector<AddedTokenMatch>& out) const {
  if (tokens_.empty()) return;
  size_t start_offset = 0;  // end of the previous accepted match
  for (size_t pos = 0; pos < text.size();) {
    int32_t t = -1;
    size_t len = first_byte_[uint8_t(text[pos])] ? longest_at(text, pos, t) : 0;
    if (len == 0) {
      ++pos;
      continue;
    }
    const AddedToken& tok = tokens_[t];
    size_t begin = pos, end = pos + len;
    pos = end;  // a rejected match still consumes its text, as Aho-Corasick's iterator does
    if (tok.single_word) {
      size_t before_start;
      bool word_before = begin > 0 && is_word_character(code_point_before(text, begin, before_start));
      size_t i = end;
      bool word_after = end < text.size() && is_word_character(next_code_point(text, i));
      if (word_before || word_after) continue;
    }
    if (tok.lstrip) {
      size_t b = begin, cstart;
      while (b > 0 && is_unicode_whitespace(code_point_before(text, b, cstart))) b = cstart;
      begin = std::max(b, start_offset);
    }
    if (tok.rstrip) {
      for (size_t i = end; i < text.size();) {
        if (!is_unicode_whitespace(next_code_point(text, i))) break;
        end = i;
      }
    }
    if (begin < start_offset) continue;  // overlaps what an rstrip already took
    out.push_back({begin, end, tok.id});
    start_offset = end;
    pos = std::max(pos, end);
  }
}

}  // namespace gannet::tokenizer
