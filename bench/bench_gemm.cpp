// matmul micro-benchmarks: decode GEMV (bytes/s; compare BM_ReadBandwidth) and
// prefill GEMM (FLOP/s), per ISA and thread count. Weights rotate over copies larger than
// the last-level cache so the GEMV numbers are DRAM numbers.
#include <benchmark/benchmark.h>

#include <memory>
#include <random>
#include <vector>

#include "core/cpu_features.h"
#include "core/dtype.h"
#include "core/thread_pool.h"
#include "kernels/cpu/matmul.h"

namespace {

using gannet::Isa;
using gannet::ThreadPool;

constexpr int64_t kRotateBytes = int64_t(256) << 20;

template <typename T>
std::vector<T> random_weights(int64_t count) {
  std::mt19937 rng(1);
  std::normal_distribution<float> nd(0.0f, 1.0f);
  std::vector<T> w(count);
  for (auto& v : w) {
    if constexpr (sizeof(T) == 2) v = gannet::f32_to_bf16(nd(rng));
    else v = nd(rng);
  }
  return w;
}

// Args: n, k, m, isa, threads.
template <typename W>
void BM_Matmul(benchmark::State& state) {
  const int64_t n = state.range(0), k = state.range(1), m = state.range(2);
  const Isa isa = Isa(state.range(3));
  const int threads = int(state.range(4));
  if (!gannet::isa_supported(isa)) {
    state.SkipWithError("ISA not supported on this CPU");
    return;
  }
  const int64_t w_bytes = n * k * int64_t(sizeof(W));
  const int64_t copies = m == 1 ? std::max<int64_t>(1, kRotateBytes / w_bytes) : 1;
  std::vector<W> w = random_weights<W>(copies * n * k);  // [copies, n, k]
  std::vector<float> x = random_weights<float>(m * k), y(m * n);
  ThreadPool pool(threads);
  int64_t c = 0;
  for (auto _ : state) {
    const W* wc = w.data() + (c++ % copies) * n * k;
    if constexpr (sizeof(W) == 2)
      gannet::kernels::matmul_bf16_isa(isa, x.data(), m, k, wc, n, y.data(), &pool);
    else
      gannet::kernels::matmul_f32_isa(isa, x.data(), m, k, wc, n, y.data(), &pool);
    benchmark::DoNotOptimize(y.data());
  }
  state.SetBytesProcessed(state.iterations() * w_bytes);
  state.counters["FLOP"] = benchmark::Counter(double(2 * m * n * k) * double(state.iterations()),
                                              benchmark::Counter::kIsRate);
  state.SetLabel(gannet::isa_name(isa));
}

void gemv_args(benchmark::internal::Benchmark* b) {
  b->ArgNames({"n", "k", "m", "isa", "threads"});
  for (int isa : {0, 1, 2})
    for (int threads : {1, 2})
      for (auto nk : {std::pair<int, int>{2048, 2048}, {8192, 2048}}) {
        if (isa == 0 && nk.first > 2048) continue;  // the scalar reference is slow
        b->Args({nk.first, nk.second, 1, isa, threads});
      }
  // A few rows (speculative verification of 4 drafts, small decode batches).
  for (int m : {2, 5}) b->Args({8192, 2048, m, 2, 2});
}

void gemm_args(benchmark::internal::Benchmark* b) {
  b->ArgNames({"n", "k", "m", "isa", "threads"});
  for (int isa : {1, 2})
    for (int threads : {1, 2})
      for (int m : {32, 64, 128}) b->Args({2048, 2048, m, isa, threads});
  for (int isa : {1, 2}) b->Args({8192, 2048, 512, isa, 2});  // 1B-model-sized prefill: 512 tokens, 8192 outputs
}

}  // namespace

BENCHMARK_TEMPLATE(BM_Matmul, uint16_t)->Name("BM_GemvBf16")->Apply(gemv_args)->UseRealTime();
BENCHMARK_TEMPLATE(BM_Matmul, float)->Name("BM_GemvF32")->Apply(gemv_args)->UseRealTime();
BENCHMARK_TEMPLATE(BM_Matmul, uint16_t)->Name("BM_GemmBf16")->Apply(gemm_args)->UseRealTime();
BENCHMARK_TEMPLATE(BM_Matmul, float)->Name("BM_GemmF32")->Apply(gemm_args)->UseRealTime();
