// Paged attention micro-benchmark: decode (one query token) at context 512 and 2048 with
// Llama-3.2-1B's shape (32 query heads, 8 KV heads, head_dim 64), per ISA and thread count.
// bytes/s counts the K and V rows read.
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

void args(benchmark::internal::Benchmark* b) {
  b->ArgNames({"ctx", "isa", "threads"});
  for (int isa : {0, 1, 2})
    for (int threads : {1, 2})
      for (int ctx : {512, 2048}) b->Args({ctx, isa, threads});
}

}  // namespace

BENCHMARK(BM_AttentionDecode)->Apply(args)->UseRealTime();
