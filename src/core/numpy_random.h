// numpy's default generator, bit for bit: `numpy.random.default_rng(seed)` (SeedSequence
// pool of 4 words, PCG64 XSL-RR) and `Generator.integers(0, high, n, dtype=int64)`
// (Lemire's bounded method). DeepSeek-V4.1 derives its Engram hash multipliers this way
// (deepseek-v4-architecture.md §9.6), so any config's multipliers can be computed here.
// tests/golden/numpy-integers.json (tools/make_numpy_random_golden.py) holds numpy's own
// draws for many seeds and bounds.
#pragma once

#include <cstdint>
#include <vector>

namespace gannet {

class NumpyPcg64 {
 public:
  // default_rng(seed) for a non-negative integer seed.
  explicit NumpyPcg64(uint64_t seed);
  uint64_t next64();
  uint32_t next32();  // numpy's buffered 32-bit draw (low half first)
  // Generator.integers(0, high, n, dtype=np.int64) for 0 < high.
  std::vector<int64_t> integers(int64_t high, int64_t n);

 private:
  unsigned __int128 state_ = 0, inc_ = 0;
  bool has32_ = false;
  uint32_t buf32_ = 0;
};

}  // namespace gannet
