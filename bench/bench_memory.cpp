// Read bandwidth of this machine (STREAM-like "sum" over an array much larger than the
// caches), with 1 thread and with all threads of a ThreadPool: the ceiling that decode,
// which streams every weight once per token, is measured against.
#include <benchmark/benchmark.h>
#include <emmintrin.h>

#include <cstdlib>
#include <cstring>
#include <thread>

#include "core/thread_pool.h"

namespace {

constexpr size_t kBytes = size_t(1) << 30;  // 1 GiB, far beyond any L3

const uint8_t* buffer() {
  static uint8_t* b = [] {
    auto* p = static_cast<uint8_t*>(std::aligned_alloc(64, kBytes));
    std::memset(p, 1, kBytes);  // fault every page in before timing
    return p;
  }();
  return b;
}

// XOR-reduces [begin, end) 64 bytes per iteration with independent accumulators; SSE2 is
// enough to saturate memory, and it runs on every x86-64.
uint64_t read_range(const uint8_t* p, size_t begin, size_t end) {
  __m128i a = _mm_setzero_si128(), b = a, c = a, d = a;
  for (size_t i = begin; i < end; i += 64) {
    a = _mm_xor_si128(a, _mm_load_si128(reinterpret_cast<const __m128i*>(p + i)));
    b = _mm_xor_si128(b, _mm_load_si128(reinterpret_cast<const __m128i*>(p + i + 16)));
    c = _mm_xor_si128(c, _mm_load_si128(reinterpret_cast<const __m128i*>(p + i + 32)));
    d = _mm_xor_si128(d, _mm_load_si128(reinterpret_cast<const __m128i*>(p + i + 48)));
  }
  __m128i r = _mm_xor_si128(_mm_xor_si128(a, b), _mm_xor_si128(c, d));
  return uint64_t(_mm_cvtsi128_si64(r)) ^ uint64_t(_mm_cvtsi128_si64(_mm_unpackhi_epi64(r, r)));
}

void BM_ReadBandwidth(benchmark::State& state) {
  const int threads = int(state.range(0));
  const uint8_t* p = buffer();
  gannet::ThreadPool pool(threads);
  uint64_t sink[64] = {};
  for (auto _ : state) {
    pool.parallel_for(int64_t(kBytes / 64), [&](int64_t b, int64_t e, int t) {
      sink[t] ^= read_range(p, size_t(b) * 64, size_t(e) * 64);
    });
    benchmark::DoNotOptimize(sink);
  }
  state.SetBytesProcessed(int64_t(state.iterations()) * int64_t(kBytes));
}

}  // namespace

BENCHMARK(BM_ReadBandwidth)->Arg(1)->Arg(2)->ArgName("threads")->UseRealTime()->Unit(benchmark::kMillisecond);
