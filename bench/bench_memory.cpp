// Read bandwidth of this machine (STREAM-like "sum" over an array much larger than the
// caches), with 1 thread and with 2 threads of a ThreadPool: the ceiling that decode,
// which streams every weight once per token, is measured against. The buffer gets
// transparent huge pages like the weight mappings, and the loop uses the widest loads
// the CPU has, so the figure is the memory system's, not the loop's.
#include <benchmark/benchmark.h>
#include <immintrin.h>
#include <sys/mman.h>

#include <cstring>

#include "core/cpu_features.h"
#include "core/thread_pool.h"

namespace {

constexpr size_t kBytes = size_t(1) << 30;  // 1 GiB, far beyond any L3

const uint8_t* buffer() {
  static uint8_t* b = [] {
    void* p = ::mmap(nullptr, kBytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    ::madvise(p, kBytes, MADV_HUGEPAGE);
    std::memset(p, 1, kBytes);  // fault every page in before timing
    return static_cast<uint8_t*>(p);
  }();
  return b;
}

__attribute__((target("avx512f"))) uint64_t read_avx512(const uint8_t* p, size_t begin, size_t end) {
  __m512i a = _mm512_setzero_si512(), b = a, c = a, d = a;
  for (size_t i = begin; i < end; i += 256) {
    a = _mm512_xor_si512(a, _mm512_load_si512(p + i));
    b = _mm512_xor_si512(b, _mm512_load_si512(p + i + 64));
    c = _mm512_xor_si512(c, _mm512_load_si512(p + i + 128));
    d = _mm512_xor_si512(d, _mm512_load_si512(p + i + 192));
  }
  __m512i r = _mm512_xor_si512(_mm512_xor_si512(a, b), _mm512_xor_si512(c, d));
  alignas(64) uint64_t out[8];
  _mm512_store_si512(out, r);
  return out[0];
}

__attribute__((target("avx2"))) uint64_t read_avx2(const uint8_t* p, size_t begin, size_t end) {
  __m256i a = _mm256_setzero_si256(), b = a, c = a, d = a;
  for (size_t i = begin; i < end; i += 128) {
    a = _mm256_xor_si256(a, _mm256_load_si256(reinterpret_cast<const __m256i*>(p + i)));
    b = _mm256_xor_si256(b, _mm256_load_si256(reinterpret_cast<const __m256i*>(p + i + 32)));
    c = _mm256_xor_si256(c, _mm256_load_si256(reinterpret_cast<const __m256i*>(p + i + 64)));
    d = _mm256_xor_si256(d, _mm256_load_si256(reinterpret_cast<const __m256i*>(p + i + 96)));
  }
  __m256i r = _mm256_xor_si256(_mm256_xor_si256(a, b), _mm256_xor_si256(c, d));
  return uint64_t(_mm_cvtsi128_si64(_mm256_castsi256_si128(r)));
}

uint64_t read_sse2(const uint8_t* p, size_t begin, size_t end) {
  __m128i a = _mm_setzero_si128(), b = a, c = a, d = a;
  for (size_t i = begin; i < end; i += 64) {
    a = _mm_xor_si128(a, _mm_load_si128(reinterpret_cast<const __m128i*>(p + i)));
    b = _mm_xor_si128(b, _mm_load_si128(reinterpret_cast<const __m128i*>(p + i + 16)));
    c = _mm_xor_si128(c, _mm_load_si128(reinterpret_cast<const __m128i*>(p + i + 32)));
    d = _mm_xor_si128(d, _mm_load_si128(reinterpret_cast<const __m128i*>(p + i + 48)));
  }
  __m128i r = _mm_xor_si128(_mm_xor_si128(a, b), _mm_xor_si128(c, d));
  return uint64_t(_mm_cvtsi128_si64(r));
}

uint64_t read_range(const uint8_t* p, size_t begin, size_t end) {
  switch (gannet::active_isa()) {
    case gannet::Isa::kAvx512: return read_avx512(p, begin, end);
    case gannet::Isa::kAvx2: return read_avx2(p, begin, end);
    default: return read_sse2(p, begin, end);
  }
}

void BM_ReadBandwidth(benchmark::State& state) {
  const int threads = int(state.range(0));
  const uint8_t* p = buffer();
  gannet::ThreadPool pool(threads);
  uint64_t sink[64] = {};
  constexpr int64_t kLine = 256;  // bytes per loop iteration of the widest variant
  for (auto _ : state) {
    pool.parallel_for(int64_t(kBytes / kLine), [&](int64_t b, int64_t e, int t) {
      sink[t] ^= read_range(p, size_t(b * kLine), size_t(e * kLine));
    });
    benchmark::DoNotOptimize(sink);
  }
  state.SetBytesProcessed(int64_t(state.iterations()) * int64_t(kBytes));
}

}  // namespace

BENCHMARK(BM_ReadBandwidth)->Arg(1)->Arg(2)->ArgName("threads")->UseRealTime()->Unit(benchmark::kMillisecond);
