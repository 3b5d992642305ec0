// One sampled draw over a 129k vocabulary (DeepSeek's): the per-token cost the sampler
// adds to every decode step at temperature > 0. Rows are Gaussian logits of the given
// spread (x 0.1): near-flat rows (a random-weight model, or a model unsure of itself)
// put most tokens in a few weight buckets, which is the expensive case for the draw.
// Arguments: spread x 10, top_p x 100, min_p x 1000.
#include <benchmark/benchmark.h>

#include <cstdint>
#include <random>
#include <vector>

#include "sampling/fixed_point_draw.h"

namespace {

void BM_SampleDraw(benchmark::State& state) {
  constexpr int64_t kVocab = 129280;
  const double spread = double(state.range(0)) / 10;
  const gannet::sampling::DrawFilters f{1.0, 0, double(state.range(1)) / 100, double(state.range(2)) / 1000};
  std::mt19937_64 g(5);
  std::normal_distribution<float> normal(0.0f, float(spread));
  std::vector<std::vector<float>> rows(8, std::vector<float>(size_t(kVocab)));
  for (auto& r : rows)
    for (float& x : r) x = normal(g);
  gannet::sampling::FixedPointDraw draw(kVocab);
  size_t i = 0;
  int64_t sum = 0;
  for (auto _ : state) {
    sum += draw.draw(rows[i++ % rows.size()].data(), f, g());
    benchmark::DoNotOptimize(sum);
  }
}

}  // namespace

BENCHMARK(BM_SampleDraw)
    ->Args({3, 100, 0})
    ->Args({3, 90, 0})
    ->Args({3, 100, 50})
    ->Args({20, 100, 0})
    ->Args({20, 95, 0})
    ->Unit(benchmark::kMicrosecond);
