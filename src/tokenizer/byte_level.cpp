#include "tokenizer/byte_level.h"

#include <array>

#include "tokenizer/utf8.h"

namespace gannet::tokenizer {

namespace {

// Printable Latin-1 bytes map to themselves; the other 68 take 256, 257, ... in byte order.
std::array<char32_t, 256> make_byte_map() {
  std::array<char32_t, 256> map{};
  char32_t next = 256;
  for (int b = 0; b < 256; ++b) {
    bool printable = (b >= '!' && b <= '~') || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE && b <= 0xFF);
    map[b] = printable ? char32_t(b) : next++;
  }
  return map;
}

const std::array<char32_t, 256> kByteMap = make_byte_map();

// All mapped code points are below 324, so the inverse is a small array.
std::array<int16_t, 324> make_inverse() {
  std::array<int16_t, 324> inv;
  inv.fill(-1);
  for (int b = 0; b < 256; ++b) inv[kByteMap[b]] = int16_t(b);
  return inv;
}

const std::array<int16_t, 324> kInverse = make_inverse();

}  // namespace

char32_t byte_to_code_point(uint8_t b) { return kByteMap[b]; }

int code_point_to_byte(char32_t cp) { return cp < kInverse.size() ? kInverse[cp] : -1; }

std::string to_byte_level(std::string_view bytes) {
  std::string out;
  out.reserve(bytes.size() * 2);
  for (unsigned char b : bytes) append_utf8(out, kByteMap[b]);
  return out;
}

std::optional<std::string> from_byte_level(std::string_view token) {
  std::string out;
  out.reserve(token.size());
  for (size_t i = 0; i < token.size();) {
    int b = code_point_to_byte(next_code_point(token, i));
    if (b < 0) return std::nullopt;
    out += char(b);
  }
  return out;
}

}  // namespace gannet::tokenizer
