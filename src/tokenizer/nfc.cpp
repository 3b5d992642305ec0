#include "tokenizer/nfc.h"

#include <algorithm>
#include <cstdint>
#include <unordered_map>
#include <vector>

#include "tokenizer/nfc_tables.h"
#include "tokenizer/utf8.h"

namespace gannet::tokenizer {

namespace {

using namespace nfc_data;

// Hangul syllables decompose and compose arithmetically (Unicode 3.12).
constexpr char32_t kSBase = 0xAC00, kLBase = 0x1100, kVBase = 0x1161, kTBase = 0x11A7;
constexpr char32_t kLCount = 19, kVCount = 21, kTCount = 28;
constexpr char32_t kNCount = kVCount * kTCount, kSCount = kLCount * kNCount;

// An ill-formed byte b is carried through as kRawByte | b: a starter that composes with
// nothing and is written back as the byte itself.
constexpr char32_t kRawByte = 0x80000000;

int combining_class(char32_t cp) {
  const CombiningClassRange* end = kCombiningClasses + kNumCombiningClasses;
  const CombiningClassRange* it = std::upper_bound(
      kCombiningClasses, end, cp, [](char32_t c, const CombiningClassRange& r) { return c < r.first; });
  if (it == kCombiningClasses) return 0;
  --it;
  return cp <= it->last ? it->combining_class : 0;
}

const Decomposition* find_decomposition(char32_t cp) {
  const Decomposition* end = kDecompositions + kNumDecompositions;
  const Decomposition* it = std::lower_bound(
      kDecompositions, end, cp, [](const Decomposition& d, char32_t c) { return d.code_point < c; });
  return it != end && it->code_point == cp ? it : nullptr;
}

void decompose(char32_t cp, std::vector<char32_t>& out) {
  if (cp >= kSBase && cp < kSBase + kSCount) {
    char32_t s = cp - kSBase;
    out.push_back(kLBase + s / kNCount);
    out.push_back(kVBase + (s % kNCount) / kTCount);
    if (s % kTCount) out.push_back(kTBase + s % kTCount);
    return;
  }
  if (const Decomposition* d = find_decomposition(cp)) {
    decompose(d->first, out);
    if (d->second) decompose(d->second, out);
    return;
  }
  out.push_back(cp);
}

const std::unordered_map<uint64_t, char32_t>& composition_map() {
  static const std::unordered_map<uint64_t, char32_t> map = [] {
    std::unordered_map<uint64_t, char32_t> m;
    for (int i = 0; i < kNumDecompositions; ++i) {
      const Decomposition& d = kDecompositions[i];
      if (d.composes) m[(uint64_t(d.first) << 32) | d.second] = d.code_point;
    }
    return m;
  }();
  return map;
}

// The primary composite of a starter and the following character, or 0.
char32_t compose(char32_t a, char32_t b) {
  if (a >= kLBase && a < kLBase + kLCount && b >= kVBase && b < kVBase + kVCount)
    return kSBase + ((a - kLBase) * kVCount + (b - kVBase)) * kTCount;
  if (a >= kSBase && a < kSBase + kSCount && (a - kSBase) % kTCount == 0 && b > kTBase &&
      b < kTBase + kTCount)
    return a + (b - kTBase);
  const auto& map = composition_map();
  auto it = map.find((uint64_t(a) << 32) | b);
  return it == map.end() ? 0 : it->second;
}

}  // namespace

std::string nfc(std::string_view text) {
  // Every code point below U+0300 is already NFC and its lead byte is below 0xCC.
  if (std::all_of(text.begin(), text.end(), [](char c) { return uint8_t(c) < 0xCC; }))
    return std::string(text);

  std::vector<char32_t> buf;
  buf.reserve(text.size());
  for (size_t i = 0; i < text.size();) {
    size_t start = i;
    char32_t cp = next_code_point(text, i);
    if (cp == kInvalidCodePoint) {
      for (size_t k = start; k < i; ++k) buf.push_back(kRawByte | uint8_t(text[k]));
    } else {
      decompose(cp, buf);
    }
  }

  // Canonical ordering: a stable sort of each run of non-starters by combining class.
  std::vector<int> cls(buf.size());
  for (size_t i = 0; i < buf.size(); ++i) cls[i] = buf[i] & kRawByte ? 0 : combining_class(buf[i]);
  for (size_t i = 1; i < buf.size(); ++i) {
    for (size_t j = i; j > 0 && cls[j] != 0 && cls[j - 1] > cls[j]; --j) {
      std::swap(buf[j], buf[j - 1]);
      std::swap(cls[j], cls[j - 1]);
    }
  }

  // Canonical composition (the UAX #15 reference algorithm).
  if (!buf.empty()) {
    size_t starter = 0, out = 1;
    int last_class = cls[0] == 0 ? 0 : 256;  // a leading non-starter composes with nothing
    for (size_t i = 1; i < buf.size(); ++i) {
      char32_t ch = buf[i];
      int ch_class = cls[i];
      char32_t composite = (buf[starter] | ch) & kRawByte ? 0 : compose(buf[starter], ch);
      if (composite && (last_class < ch_class || last_class == 0)) {
        buf[starter] = composite;
        continue;
      }
      if (ch_class == 0) starter = out;
      last_class = ch_class;
      buf[out++] = ch;
    }
    buf.resize(out);
  }

  std::string result;
  result.reserve(text.size());
  for (char32_t cp : buf) {
    if (cp & kRawByte)
      result += char(cp & 0xFF);
    else
      append_utf8(result, cp);
  }
  return result;
}

}  // namespace gannet::tokenizer
