// DESIGN principle 6 at engine level: once warm, a decode step allocates nothing: not the
// scheduler, the executor (and its thread), the model, the sampler nor the output
// processor. 16 requests decode together; every operator new in the process is counted
// over 100 steps, with streaming on and off and asynchronous scheduling on and off.
// Admission and finishing may allocate, so the window has neither. (Requests that ask for
// logprobs get a top-N list per token, which is an allocation by the API's shape.)
// GANNET_ALLOC_TRACE=1 prints a backtrace of each counted allocation.
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic ignored "-Wmismatched-new-delete"
#endif

// labels: sanitize
#include <execinfo.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <atomic>
#include <cstdlib>
#include <new>

#include <filesystem>

#include "engine/engine.h"
#include "model/random_checkpoint.h"

namespace {
std::atomic<bool> g_counting{false};
std::atomic<int64_t> g_allocations{0};
bool g_trace = false;
thread_local bool t_in_trace = false;

void note_allocation() {
  if (!g_counting.load(std::memory_order_relaxed)) return;
  g_allocations.fetch_add(1, std::memory_order_relaxed);
  if (g_trace && !t_in_trace) {
    t_in_trace = true;
    void* frames[24];
    const int n = backtrace(frames, 24);
    backtrace_symbols_fd(frames, n, 2);
    (void)!write(2, "----\n", 5);
    t_in_trace = false;
  }
}
}  // namespace

void* operator new(size_t n) {
  note_allocation();
  if (void* p = std::malloc(n ? n : 1)) return p;
  throw std::bad_alloc();
}
void operator delete(void* p) noexcept { std::free(p); }
void operator delete(void* p, size_t) noexcept { std::free(p); }

using namespace gannet;

namespace {

// The tiny preset with an 8192-entry vocabulary: the lm_head of the full one would make
// 600 steps take tens of seconds.
const std::string& small_vocab_model() {
  static const std::string dir = [] {
    const auto d = std::filesystem::temp_directory_path() / ("gannet_noalloc_" + std::to_string(::getpid()));
    std::filesystem::remove_all(d);
    model::RandomCheckpointOptions o;
    o.arch = "llama";
    o.seed = 5;
    o.config_overrides = R"({"vocab_size": 8192})";
    model::write_random_checkpoint(o, d.string());
    return d.string();
  }();
  return dir;
}

int64_t allocations_in_steady_decode(bool async, bool streaming) {
  EngineArgs a;
  a.model = small_vocab_model();
  a.quiet = true;
  a.threads = 2;
  a.kv_cache_memory = 64ull << 20;
  a.block_size = 16;
  a.async_scheduling = async;
  engine::Engine e(a);
  e.set_streaming(streaming);
  for (int i = 0; i < 16; ++i) {
    SamplingParams p;
    p.temperature = i % 2 ? 1.0 : 0.0;  // greedy and seeded sampling side by side
    p.seed = uint64_t(i);
    p.top_p = 0.9;
    p.ignore_eos = true;
    p.max_tokens = 150;
    std::vector<int32_t> prompt;
    for (int j = 0; j < 20 + i; ++j) prompt.push_back(int32_t(100 + (i * 131 + j * 7) % 8000));
    e.add_request("r" + std::to_string(i), prompt, p);
  }
  // Warm up: every prompt done, and enough decode steps for every buffer to reach its
  // size (block tables cross block boundaries every 16 steps).
  for (int s = 0; s < 40; ++s) e.step();
  g_allocations = 0;
  g_counting = true;
  int64_t outputs = 0;
  for (int s = 0; s < 100; ++s)
    for (const RequestOutput& o : e.step()) outputs += int64_t(o.outputs.size());
  g_counting = false;
  EXPECT_EQ(outputs, streaming ? 100 * 16 : 0) << "every request progresses every step";
  while (e.has_unfinished()) e.step();
  return g_allocations.load();
}

}  // namespace

TEST(EngineNoAlloc, SteadyDecodeStepsDoNotAllocate) {
  g_trace = std::getenv("GANNET_ALLOC_TRACE") != nullptr;
  for (bool async : {false, true})
    for (bool streaming : {false, true})
      EXPECT_EQ(allocations_in_steady_decode(async, streaming), 0)
          << "async " << async << ", streaming " << streaming << " (GANNET_ALLOC_TRACE=1 shows where)";
  std::filesystem::remove_all(small_vocab_model());
}
