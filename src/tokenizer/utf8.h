// UTF-8 helpers for the tokenizer. Nothing here throws on bad input: byte-level BPE can
// encode any bytes, and decoding repairs broken text the way Rust's
// String::from_utf8_lossy does (one U+FFFD per maximal ill-formed subpart), so gannet's
// decode output matches Hugging Face tokenizers byte for byte.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

namespace gannet::tokenizer {

enum class Utf8Status { kValid, kInvalid, kTruncated };

// What the bytes at s[0..n) (n >= 1) begin with: a complete valid sequence (len = its
// length), an ill-formed one (len = its maximal subpart, >= 1) or a valid prefix cut off by
// the end of the buffer (len = n).
struct Utf8Seq {
  size_t len;
  Utf8Status status;
};
Utf8Seq scan_utf8(const unsigned char* s, size_t n);

inline constexpr char32_t kInvalidCodePoint = 0xFFFFFFFF;

// Decodes the code point at s[i]; advances i past it. An ill-formed or truncated sequence
// yields kInvalidCodePoint and advances over its maximal subpart.
char32_t next_code_point(std::string_view s, size_t& i);

void append_utf8(std::string& out, char32_t cp);
bool is_valid_utf8(std::string_view s);

// Copy of `bytes` with every ill-formed subpart replaced by U+FFFD.
std::string utf8_lossy(std::string_view bytes);

// Rust's char::is_whitespace (the Unicode White_Space property), used by added tokens'
// lstrip/rstrip exactly as Hugging Face does.
bool is_unicode_whitespace(char32_t cp);

}  // namespace gannet::tokenizer
