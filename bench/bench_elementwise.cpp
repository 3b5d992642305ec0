// Elementwise and normalisation kernels per ISA: rmsnorm and silu_mul at hidden/FFN
// widths of a 1B model, RoPE over 32 heads of 64, softmax over a 128256-entry vocabulary.
// bytes/s counts the bytes read and written.
#include <benchmark/benchmark.h>

#include <random>
#include <vector>

#include "core/cpu_features.h"
#include "kernels/cpu/activations.h"
#include "kernels/cpu/rmsnorm.h"
#include "kernels/cpu/rope.h"
#include "kernels/cpu/softmax.h"

namespace {

using gannet::Isa;

std::vector<float> random_f32(size_t n) {
  std::mt19937 rng(1);
  std::normal_distribution<float> nd(0.0f, 1.0f);
  std::vector<float> v(n);
  for (auto& x : v) x = nd(rng);
  return v;
}

bool skip(benchmark::State& state, Isa isa) {
  if (gannet::isa_supported(isa)) {
    state.SetLabel(gannet::isa_name(isa));
    return false;
  }
  state.SkipWithError("ISA not supported on this CPU");
  return true;
}

// Args: rows, isa. dim 2048.
void BM_Rmsnorm(benchmark::State& state) {
  const int64_t rows = state.range(0), dim = 2048;
  const Isa isa = Isa(state.range(1));
  if (skip(state, isa)) return;
  auto x = random_f32(rows * dim), w = random_f32(dim);
  std::vector<float> y(x.size());
  for (auto _ : state) {
    gannet::kernels::rmsnorm_isa(isa, x.data(), w.data(), y.data(), rows, dim, 1e-5f);
    benchmark::DoNotOptimize(y.data());
  }
  state.SetBytesProcessed(state.iterations() * rows * dim * 8);
}

// Args: rows, isa. FFN width 8192.
void BM_SiluMul(benchmark::State& state) {
  const int64_t n = state.range(0) * 8192;
  const Isa isa = Isa(state.range(1));
  if (skip(state, isa)) return;
  auto g = random_f32(n), u = random_f32(n);
  std::vector<float> y(n);
  for (auto _ : state) {
    gannet::kernels::silu_mul_isa(isa, g.data(), u.data(), y.data(), n);
    benchmark::DoNotOptimize(y.data());
  }
  state.SetBytesProcessed(state.iterations() * n * 12);
}

// Args: tokens, isa. 32 heads of 64, non-interleaved (Llama).
void BM_Rope(benchmark::State& state) {
  const int64_t tokens = state.range(0);
  const Isa isa = Isa(state.range(1));
  if (skip(state, isa)) return;
  gannet::kernels::RopeTable table(64, 500000.0, 8192);
  auto x = random_f32(tokens * 32 * 64);
  std::vector<int32_t> pos(tokens);
  for (int64_t t = 0; t < tokens; ++t) pos[t] = int32_t(100 + t);
  for (auto _ : state) {
    gannet::kernels::apply_rope_isa(isa, x.data(), tokens, 32, 64, pos.data(), table, false);
    benchmark::DoNotOptimize(x.data());
  }
  state.SetBytesProcessed(state.iterations() * tokens * 32 * 64 * 8);
}

// Args: isa. One vocabulary row.
void BM_Softmax(benchmark::State& state) {
  const int64_t n = 128256;
  const Isa isa = Isa(state.range(0));
  if (skip(state, isa)) return;
  const auto x0 = random_f32(n);
  std::vector<float> x(n);
  for (auto _ : state) {
    x = x0;
    gannet::kernels::softmax_isa(isa, x.data(), n);
    benchmark::DoNotOptimize(x.data());
  }
  state.SetBytesProcessed(state.iterations() * n * 8);
}

void rows_isa(benchmark::internal::Benchmark* b) {
  b->ArgNames({"rows", "isa"});
  for (int isa : {0, 1, 2})
    for (int rows : {1, 64}) b->Args({rows, isa});
}

}  // namespace

BENCHMARK(BM_Rmsnorm)->Apply(rows_isa);
BENCHMARK(BM_SiluMul)->Apply(rows_isa);
BENCHMARK(BM_Rope)->Apply(rows_isa);
BENCHMARK(BM_Softmax)->ArgName("isa")->Arg(0)->Arg(1)->Arg(2);
