// Paged attention micro-benchmark with Llama-3.2-1B's shape (32 query heads, 8 KV heads,
// head_dim 64), per ISA and thread count: decode (one query token) at context 512 and 2048,
// where bytes/s counts the K and V rows read, and causal prefill of 512 tokens, where the
// FLOP rate counts q·k and p·v (4 * head_dim per query-key pair and head).
#include <benchmark/benchmark.h>

#include <numeric>
#include <random>
#include <vector>

#include "core/cpu_features.h"
#include "core/thread_pool.h"
#include "kernels/cpu/attention.h"

namespace {

using gannet::Isa;

// Args: context, isa, threads.
void BM_AttentionDecode(benchmark::State& state) {
  const int64_t ctx = state.range(0);
  const Isa isa = Isa(state.range(1));
  const int threads = int(state.range(2));
  if (!gannet::isa_supported(isa)) {
    state.SkipWithError("ISA not supported on this CPU");
    return;
  }
  const int n_heads = 32, n_kv = 8, hd = 64, bs = 16;
  const int64_t slot = n_kv * hd, n_blocks = (ctx + bs - 1) / bs;
  std::mt19937 rng(1);
  std::normal_distribution<float> nd(0.0f, 1.0f);
  std::vector<float> k(n_blocks * bs * slot), v(k.size()), q(n_heads * hd), out(q.size());
  for (auto* buf : {&k, &v, &q})
    for (auto& x : *buf) x = nd(rng);
  std::vector<int32_t> table(n_blocks);
  std::iota(table.begin(), table.end(), 0);
  std::shuffle(table.begin(), table.end(), rng);
  gannet::kernels::AttentionSeq seq{table.data()};
  gannet::kernels::KvCacheLayer kv{k.data(), v.data(), bs * slot, slot, bs};
  const int32_t seq_id = 0, pos = int32_t(ctx - 1);
  gannet::ThreadPool pool(threads);
  for (auto _ : state) {
    gannet::kernels::attention_isa(isa, q.data(), 1, n_heads, n_kv, hd, 0.125f, &seq_id, &pos, &seq, kv,
                                   out.data(), &pool);
    benchmark::DoNotOptimize(out.data());
  }
  state.SetBytesProcessed(state.iterations() * ctx * slot * 2 * int64_t(sizeof(float)));
  state.SetLabel(gannet::isa_name(isa));
}

// Args: prompt length, isa, threads. The whole prompt attends causally to itself.
void BM_AttentionPrefill(benchmark::State& state) {
  const int64_t n = state.range(0);
  const Isa isa = Isa(state.range(1));
  const int threads = int(state.range(2));
  if (!gannet::isa_supported(isa)) {
    state.SkipWithError("ISA not supported on this CPU");
    return;
  }
  const int n_heads = 32, n_kv = 8, hd = 64, bs = 16;
  const int64_t slot = n_kv * hd, n_blocks = (n + bs - 1) / bs;
  std::mt19937 rng(2);
  std::normal_distribution<float> nd(0.0f, 1.0f);
  std::vector<float> k(n_blocks * bs * slot), v(k.size()), q(n * n_heads * hd), out(q.size());
  for (auto* buf : {&k, &v, &q})
    for (auto& x : *buf) x = nd(rng);
  std::vector<int32_t> table(n_blocks), seq_of(n, 0), pos(n);
  std::iota(table.begin(), table.end(), 0);
  std::iota(pos.begin(), pos.end(), 0);
  gannet::kernels::AttentionSeq seq{table.data()};
  gannet::kernels::KvCacheLayer kv{k.data(), v.data(), bs * slot, slot, bs};
  gannet::ThreadPool pool(threads);
  for (auto _ : state) {
    gannet::kernels::attention_isa(isa, q.data(), n, n_heads, n_kv, hd, 0.125f, seq_of.data(), pos.data(), &seq, kv,
                                   out.data(), &pool);
    benchmark::DoNotOptimize(out.data());
  }
  const double pairs = double(n) * double(n + 1) / 2;
  state.counters["FLOP/s"] =
      benchmark::Counter(double(state.iterations()) * pairs * n_heads * 4.0 * hd, benchmark::Counter::kIsRate);
  state.SetLabel(gannet::isa_name(isa));
}

void args(benchmark::internal::Benchmark* b) {
  b->ArgNames({"ctx", "isa", "threads"});
  for (int isa : {0, 1, 2})
    for (int threads : {1, 2})
      for (int ctx : {512, 2048}) b->Args({ctx, isa, threads});
}

}  // namespace

BENCHMARK(BM_AttentionDecode)->Apply(args)->UseRealTime();
BENCHMARK(BM_AttentionPrefill)
    ->ArgNames({"len", "isa", "threads"})
    ->Args({512, 0, 1})
    ->Args({512, 1, 2})
    ->Args({512, 2, 1})
    ->Args({512, 2, 2})
    ->UseRealTime()
    ->Unit(benchmark::kMillisecond);
