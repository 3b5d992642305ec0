#include "tokenizer/engram_map.h"

#include <utf8proc.h>

#include <cstdlib>
#include <unordered_map>

#include "core/error.h"
#include "tokenizer/byte_level.h"

namespace gannet::tokenizer {

namespace {

std::u32string decode_utf8(std::string_view s) {
  std::u32string out;
  const auto* p = reinterpret_cast<const utf8proc_uint8_t*>(s.data());
  utf8proc_ssize_t left = utf8proc_ssize_t(s.size());
  while (left > 0) {
    utf8proc_int32_t cp;
    const utf8proc_ssize_t n = utf8proc_iterate(p, left, &cp);
    if (n <= 0) return {};  // callers pass valid UTF-8
    out.push_back(char32_t(cp));
    p += n;
    left -= n;
  }
  return out;
}

std::string encode_utf8(const std::u32string& s) {
  std::string out;
  utf8proc_uint8_t buf[4];
  for (char32_t c : s) {
    const utf8proc_ssize_t n = utf8proc_encode_char(utf8proc_int32_t(c), buf);
    out.append(reinterpret_cast<const char*>(buf), size_t(n));
  }
  return out;
}

std::string map(std::string_view s, int options) {
  utf8proc_uint8_t* out = nullptr;
  const utf8proc_ssize_t n = utf8proc_map(reinterpret_cast<const utf8proc_uint8_t*>(s.data()),
                                          utf8proc_ssize_t(s.size()), &out, utf8proc_option_t(options));
  if (n < 0) fail("utf8proc: ", utf8proc_errmsg(n));
  std::string r(reinterpret_cast<const char*>(out), size_t(n));
  std::free(out);
  return r;
}

// Unicode White_Space (what Rust's char::is_whitespace, and so the Strip normalizer, trims).
bool is_white_space(char32_t c) {
  return (c >= 0x9 && c <= 0xd) || c == 0x20 || c == 0x85 || c == 0xa0 || c == 0x1680 || (c >= 0x2000 && c <= 0x200a) ||
         c == 0x2028 || c == 0x2029 || c == 0x202f || c == 0x205f || c == 0x3000;
}

bool valid_utf8(std::string_view s) {
  const auto* p = reinterpret_cast<const utf8proc_uint8_t*>(s.data());
  utf8proc_ssize_t left = utf8proc_ssize_t(s.size());
  while (left > 0) {
    utf8proc_int32_t cp;
    const utf8proc_ssize_t n = utf8proc_iterate(p, left, &cp);
    if (n <= 0 || cp == 0xfffd) return false;
    p += n;
    left -= n;
  }
  return true;
}

}  // namespace

std::string engram_normalize(std::string_view text) {
  const std::string nfkc = map(text, UTF8PROC_STABLE | UTF8PROC_COMPOSE | UTF8PROC_COMPAT);
  const std::string nfd = map(nfkc, UTF8PROC_STABLE | UTF8PROC_DECOMPOSE);
  std::u32string s;
  for (char32_t c : decode_utf8(nfd)) {
    const utf8proc_category_t cat = utf8proc_category(utf8proc_int32_t(c));
    if (cat == UTF8PROC_CATEGORY_MN || cat == UTF8PROC_CATEGORY_MC || cat == UTF8PROC_CATEGORY_ME) continue;
    if (c == 0x130) {  // the one unconditional multi-character lowercase mapping
      s += U"i\u0307";
      continue;
    }
    s.push_back(char32_t(utf8proc_tolower(utf8proc_int32_t(c))));
  }
  // Runs of space, tab, CR, LF become one space.
  std::u32string t;
  for (char32_t c : s) {
    const bool ws = c == ' ' || c == '\t' || c == '\r' || c == '\n';
    if (ws && !t.empty() && t.back() == ' ') continue;  // the run goes on
    t.push_back(ws ? char32_t(' ') : c);
  }
  const bool lone_space = t == U" ";
  if (lone_space) return " ";
  size_t b = 0, e = t.size();
  while (b < e && is_white_space(t[b])) ++b;
  while (e > b && is_white_space(t[e - 1])) --e;
  return encode_utf8(t.substr(b, e - b));
}

std::vector<int64_t> engram_compressed_map(const Tokenizer& tok, int64_t* n_keys) {
  const size_t n = tok.vocab_size();
  std::vector<int64_t> out(n);
  std::unordered_map<std::string, int64_t> ids;
  for (size_t id = 0; id < n; ++id) {
    const TokenId t = TokenId(id);
    const std::string text = tok.decode(std::span<const TokenId>(&t, 1), /*skip_special_tokens=*/false);
    std::string key;
    if (!valid_utf8(text)) {
      key = to_byte_level(tok.id_to_token(t));  // the vocabulary spelling, as tokenizers' id_to_token
    } else {
      key = engram_normalize(text);
      if (key.empty()) key = text;
    }
    auto [it, fresh] = ids.emplace(key, int64_t(ids.size()));
    out[id] = it->second;
  }
  *n_keys = int64_t(ids.size());
  return out;
}

}  // namespace gannet::tokenizer
