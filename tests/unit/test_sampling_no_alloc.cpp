// DESIGN principle 6: once warm, Sampler::sample(in, &out) allocates nothing, whatever
// the filters, penalties or logprobs asked for. Counts every operator new in the process.
// The replacement operators below pair malloc with free; g++ 12 misreads std::allocator's
// inlined calls to them as mismatched.
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic ignored "-Wmismatched-new-delete"
#endif

#include <gtest/gtest.h>

#include <atomic>
#include <cstdlib>
#include <new>
#include <random>
#include <vector>

#include "sampling/sampler.h"

namespace {
std::atomic<int64_t> g_allocations{0};
}

void* operator new(size_t n) {
  g_allocations.fetch_add(1, std::memory_order_relaxed);
  if (void* p = std::malloc(n ? n : 1)) return p;
  throw std::bad_alloc();
}
void operator delete(void* p) noexcept { std::free(p); }
void operator delete(void* p, size_t) noexcept { std::free(p); }

namespace gannet::sampling {
namespace {

TEST(SamplingNoAlloc, WarmSamplerDoesNotAllocate) {
  constexpr int64_t kVocab = 5000;
  std::mt19937_64 g(5);
  std::normal_distribution<double> normal(0.0, 3.0);
  std::vector<float> logits(kVocab);
  for (float& x : logits) x = float(normal(g));
  std::vector<int32_t> prompt, output, eos = {1};
  for (int i = 0; i < 300; ++i) prompt.push_back(int32_t(g() % kVocab));
  for (int i = 0; i < 40; ++i) output.push_back(int32_t(g() % kVocab));
  std::vector<SamplingParams> settings(6);
  settings[0].temperature = 0;
  settings[1].top_k = 40;
  settings[2].top_p = 0.9;
  settings[2].repetition_penalty = 1.2;
  settings[3].min_p = 0.05;
  settings[3].frequency_penalty = 0.3;
  settings[4].top_k = 100;
  settings[4].top_p = 0.8;
  settings[4].min_p = 0.01;
  settings[4].presence_penalty = 0.5;
  settings[4].min_tokens = 50;
  settings[5].logprobs = 20;
  Sampler sampler(kVocab);
  SampleOutput out;
  auto run_all = [&] {
    for (uint64_t pos = 0; pos < 20; ++pos)
      for (const SamplingParams& p : settings)
        sampler.sample({logits.data(), &p, 9, 0, pos, prompt, output, eos}, &out);
  };
  run_all();  // warm-up: out.top reaches its largest size
  const int64_t before = g_allocations.load();
  ASSERT_GT(before, 0) << "the counting operator new is not in use";
  run_all();
  EXPECT_EQ(g_allocations.load() - before, 0);
}

}  // namespace
}  // namespace gannet::sampling
