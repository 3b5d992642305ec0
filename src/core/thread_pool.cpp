#include "core/thread_pool.h"

#include <chrono>
#include <memory>

#include <sys/resource.h>

#include "core/cpu_budget.h"
#include "core/error.h"

namespace gannet {

namespace {
// How long an idle worker keeps yielding before it sleeps (see worker()).
constexpr int64_t kYieldMicros = 1000;
// After a yield let another thread run, this many idle periods sleep at once.
constexpr int kBusySkips = 64;

// This thread's count of involuntary context switches; a yield that gave the core to
// another thread adds one.
long involuntary_switches() {
  rusage u{};
  getrusage(RUSAGE_THREAD, &u);
  return u.ru_nivcsw;
}
}  // namespace

ThreadPool::ThreadPool(int n_threads) : n_threads_(n_threads) {
  if (n_threads < 1) fail("thread count must be >= 1, got ", n_threads);
  try {
    for (int i = 1; i < n_threads; ++i) threads_.emplace_back([this, i] { worker(i); });
  } catch (const std::exception& e) {
    // Stop and join the threads that did start before reporting.
    {
      std::lock_guard<std::mutex> lock(mu_);
      stop_ = true;
      generation_.fetch_add(1);
    }
    cv_.notify_all();
    for (auto& t : threads_) t.join();
    fail("cannot start ", n_threads, " threads: ", e.what());
  }
}

ThreadPool::~ThreadPool() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stop_ = true;
    generation_.fetch_add(1);
  }
  cv_.notify_all();
  for (auto& t : threads_) t.join();
}

void ThreadPool::run_range(int index) {
  int64_t chunks = (n_ + grain_ - 1) / grain_;
  int64_t per = (chunks + n_threads_ - 1) / n_threads_;
  int64_t b = std::min(n_, index * per * grain_), e = std::min(n_, (index + 1) * per * grain_);
  if (b < e) (*fn_)(b, e, index);
}

void ThreadPool::worker(int index) {
  uint64_t seen = 0;
  int busy_skip = 0;  // idle periods left that sleep without yielding first
  for (;;) {
    // Spin briefly (tens of microseconds), then yield the core for a while before
    // sleeping: a decode step issues ~100 short loops with serial work between them
    // (attention, routing, norms) that often outlasts the spin, and waking a sleeping
    // thread costs tens of microseconds each time. On a busy machine (a yield that let
    // another thread run) it sleeps at once instead: taking turns on a shared core slowed
    // two concurrent engine tests by 10 %.
    uint64_t g = generation_.load(std::memory_order_acquire);
    for (int spin = 0; g == seen && spin < 2000; ++spin) {
      __builtin_ia32_pause();
      g = generation_.load(std::memory_order_acquire);
    }
    if (g == seen && busy_skip == 0) {
      const auto until = std::chrono::steady_clock::now() + std::chrono::microseconds(kYieldMicros);
      const long preempted = involuntary_switches();
      while (g == seen && std::chrono::steady_clock::now() < until) {
        std::this_thread::yield();
        g = generation_.load(std::memory_order_acquire);
        // The yield ran another thread: the machine is busy, so sleep rather than take
        // turns with threads doing work, and skip yielding for a while.
        if (involuntary_switches() != preempted) {
          busy_skip = kBusySkips;
          break;
        }
      }
    } else if (g == seen) {
      --busy_skip;
    }
    if (g == seen) {
      std::unique_lock<std::mutex> lock(mu_);
      cv_.wait(lock, [&] { return generation_.load() != seen; });
      g = generation_.load();
    }
    seen = g;
    if (stop_) return;
    try {
      run_range(index);
    } catch (...) {
      std::lock_guard<std::mutex> lock(mu_);
      if (!error_) error_ = std::current_exception();
    }
    pending_.fetch_sub(1, std::memory_order_acq_rel);
  }
}

void ThreadPool::parallel_for(int64_t n, FunctionRef<void(int64_t, int64_t, int)> fn, int64_t grain) {
  if (n <= 0) return;
  if (n_threads_ == 1 || n <= grain) {
    fn(0, n, 0);
    return;
  }
  fn_ = &fn;
  n_ = n;
  grain_ = grain < 1 ? 1 : grain;
  pending_.store(n_threads_ - 1, std::memory_order_release);
  {
    std::lock_guard<std::mutex> lock(mu_);
    generation_.fetch_add(1, std::memory_order_acq_rel);
  }
  cv_.notify_all();
  std::exception_ptr mine;
  try {
    run_range(0);
  } catch (...) {
    mine = std::current_exception();
  }
  // Always wait: workers still use fn_ until they finish their ranges.
  for (int spin = 0; pending_.load(std::memory_order_acquire) != 0; ++spin) {
    if (spin < 2000) __builtin_ia32_pause();
    else std::this_thread::yield();  // a worker may be descheduled: give it the core
  }
  std::exception_ptr theirs;
  {
    std::lock_guard<std::mutex> lock(mu_);
    theirs = error_;
    error_ = nullptr;
  }
  if (mine) std::rethrow_exception(mine);
  if (theirs) std::rethrow_exception(theirs);
}

namespace {
std::unique_ptr<ThreadPool> g_pool;
int g_threads = 0;
}  // namespace

ThreadPool& default_pool() {
  if (!g_pool) {
    int n = g_threads > 0 ? g_threads : usable_cpus();
    g_pool = std::make_unique<ThreadPool>(n < 1 ? 1 : n);
  }
  return *g_pool;
}

void set_default_threads(int n) {
  if (n < 1) fail("--threads must be >= 1, got ", n);
  g_threads = n;
  if (g_pool && g_pool->size() != n) g_pool.reset();
}

}  // namespace gannet
