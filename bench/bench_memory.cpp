// Read bandwidth of this machine (STREAM-like "sum" over an array much larger than the
// caches), with 1 and 2 threads, using the roofline's read loop (src/bench/roofline.h):
// the ceiling decode is measured against, as a Google Benchmark for quick comparisons.
#include <benchmark/benchmark.h>
#include <sys/mman.h>

#include <cstring>

#include "bench/roofline.h"
#include "core/thread_pool.h"

namespace {

constexpr size_t kBytes = size_t(1) << 30;  // 1 GiB, far beyond any L3

const uint8_t* buffer() {
  static uint8_t* b = [] {
    void* p = ::mmap(nullptr, kBytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    ::madvise(p, kBytes, MADV_HUGEPAGE);  // as the weight mappings
    std::memset(p, 1, kBytes);            // fault every page in before timing
    return static_cast<uint8_t*>(p);
  }();
  return b;
}

void BM_ReadBandwidth(benchmark::State& state) {
  const uint8_t* p = buffer();
  gannet::ThreadPool pool(int(state.range(0)));
  uint64_t sink[64] = {};
  constexpr int64_t kLine = 256;  // bytes per iteration of the widest read loop
  for (auto _ : state) {
    pool.parallel_for(int64_t(kBytes / kLine), [&](int64_t b, int64_t e, int t) {
      sink[t] ^= gannet::bench::read_bytes(p, size_t(b * kLine), size_t(e * kLine));
    });
    benchmark::DoNotOptimize(sink);
  }
  state.SetBytesProcessed(int64_t(state.iterations()) * int64_t(kBytes));
}

}  // namespace

BENCHMARK(BM_ReadBandwidth)->Arg(1)->Arg(2)->ArgName("threads")->UseRealTime()->Unit(benchmark::kMillisecond);
