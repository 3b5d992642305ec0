#include "core/numpy_random.h"

#include "core/error.h"

namespace gannet {

namespace {

// SeedSequence constants (numpy/random/bit_generator.pyx).
constexpr uint32_t kInitA = 0x43b0d7e5u, kMultA = 0x931e8875u, kInitB = 0x8b51f9ddu, kMultB = 0x58f38dedu;
constexpr uint32_t kMixL = 0xca01f9ddu, kMixR = 0x4973f715u;
constexpr int kXShift = 16;
constexpr int kPool = 4;

uint32_t hashmix(uint32_t value, uint32_t& hash_const) {
  value ^= hash_const;
  hash_const *= kMultA;
  value *= hash_const;
  value ^= value >> kXShift;
  return value;
}

uint32_t mix(uint32_t x, uint32_t y) {
  uint32_t r = kMixL * x - kMixR * y;
  r ^= r >> kXShift;
  return r;
}

constexpr unsigned __int128 kPcgMult =
    (static_cast<unsigned __int128>(0x2360ED051FC65DA4ull) << 64) | 0x4385DF649FCCF645ull;

}  // namespace

NumpyPcg64::NumpyPcg64(uint64_t seed) {
  // The seed as little-endian 32-bit words (0 is one word).
  std::vector<uint32_t> entropy;
  do {
    entropy.push_back(uint32_t(seed));
    seed >>= 32;
  } while (seed);
  uint32_t pool[kPool];
  uint32_t hc = kInitA;
  for (int i = 0; i < kPool; ++i) pool[i] = hashmix(i < int(entropy.size()) ? entropy[size_t(i)] : 0u, hc);
  for (int s = 0; s < kPool; ++s)
    for (int d = 0; d < kPool; ++d)
      if (s != d) pool[d] = mix(pool[d], hashmix(pool[s], hc));
  for (size_t s = kPool; s < entropy.size(); ++s)
    for (int d = 0; d < kPool; ++d) pool[d] = mix(pool[d], hashmix(entropy[s], hc));
  // generate_state(4, uint64): 8 words cycling over the pool, paired little-endian.
  uint32_t words[8];
  uint32_t hb = kInitB;
  for (int i = 0; i < 8; ++i) {
    uint32_t v = pool[i % kPool];
    v ^= hb;
    hb *= kMultB;
    v *= hb;
    v ^= v >> kXShift;
    words[i] = v;
  }
  uint64_t val[4];
  for (int i = 0; i < 4; ++i) val[i] = uint64_t(words[2 * i]) | (uint64_t(words[2 * i + 1]) << 32);
  const unsigned __int128 init_state = (static_cast<unsigned __int128>(val[0]) << 64) | val[1];
  const unsigned __int128 init_seq = (static_cast<unsigned __int128>(val[2]) << 64) | val[3];
  state_ = 0;
  inc_ = (init_seq << 1) | 1u;
  state_ = state_ * kPcgMult + inc_;
  state_ += init_state;
  state_ = state_ * kPcgMult + inc_;
}

uint64_t NumpyPcg64::next64() {
  state_ = state_ * kPcgMult + inc_;
  const uint64_t hi = uint64_t(state_ >> 64), lo = uint64_t(state_);
  const unsigned rot = unsigned(state_ >> 122);
  const uint64_t x = hi ^ lo;
  return (x >> rot) | (x << ((64 - rot) & 63));
}

uint32_t NumpyPcg64::next32() {
  if (has32_) {
    has32_ = false;
    return buf32_;
  }
  const uint64_t v = next64();
  has32_ = true;
  buf32_ = uint32_t(v >> 32);
  return uint32_t(v);
}

std::vector<int64_t> NumpyPcg64::integers(int64_t high, int64_t n) {
  GANNET_CHECK(high > 0 && n >= 0, "integers(0, ", high, ", ", n, ")");
  std::vector<int64_t> out(static_cast<size_t>(n));
  const uint64_t rng = uint64_t(high) - 1;  // inclusive range
  for (auto& o : out) {
    if (rng == 0) {
      o = 0;
    } else if (rng <= 0xFFFFFFFFull) {
      if (rng == 0xFFFFFFFFull) {
        o = int64_t(next32());
        continue;
      }
      const uint32_t excl = uint32_t(rng) + 1;
      uint64_t m = uint64_t(next32()) * excl;
      uint32_t left = uint32_t(m);
      if (left < excl) {
        const uint32_t threshold = (0xFFFFFFFFu - uint32_t(rng)) % excl;
        while (left < threshold) {
          m = uint64_t(next32()) * excl;
          left = uint32_t(m);
        }
      }
      o = int64_t(m >> 32);
    } else {
      const uint64_t excl = rng + 1;
      unsigned __int128 m = static_cast<unsigned __int128>(next64()) * excl;
      uint64_t left = uint64_t(m);
      if (left < excl) {
        const uint64_t threshold = (~uint64_t(0) - rng) % excl;
        while (left < threshold) {
          m = static_cast<unsigned __int128>(next64()) * excl;
          left = uint64_t(m);
        }
      }
      o = int64_t(m >> 64);
    }
  }
  return out;
}

}  // namespace gannet
