// Counter-based random numbers: a pure function of (seed, stream, counter), so a draw
// never depends on how many other draws happened before it or in other requests.
#pragma once

#include <cstdint>

namespace gannet::sampling {

inline uint64_t mix64(uint64_t x) {
  x ^= x >> 30;
  x *= 0xbf58476d1ce4e5b9ull;
  x ^= x >> 27;
  x *= 0x94d049bb133111ebull;
  x ^= x >> 31;
  return x;
}

// 64 random bits for (seed, stream, counter); e.g. stream = sample index of a request,
// counter = output position.
inline uint64_t counter_random(uint64_t seed, uint64_t stream, uint64_t counter) {
  uint64_t h = mix64(seed + 0x9e3779b97f4a7c15ull);
  h = mix64(h ^ (stream * 0xd1b54a32d192ed03ull + 0x9e3779b97f4a7c15ull));
  h = mix64(h ^ (counter * 0xaef17502108ef2d9ull + 0x2545f4914f6cdd1dull));
  return h;
}

}  // namespace gannet::sampling
