// A fixed set of worker threads running one parallel loop at a time.
//
// Work is split into contiguous, equal ranges fixed by (n, size()), so which thread
// computes an element never changes how it is computed: kernels keep each element's
// reduction order inside one task (DESIGN principle 1).
#pragma once

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <exception>
#include <functional>
#include <mutex>
#include <thread>
#include <vector>

#include "core/function_ref.h"

namespace gannet {

class ThreadPool {
 public:
  // n_threads >= 1; the calling thread is one of them.
  explicit ThreadPool(int n_threads);
  ~ThreadPool();
  ThreadPool(const ThreadPool&) = delete;
  ThreadPool& operator=(const ThreadPool&) = delete;

  int size() const { return n_threads_; }

  // Calls fn(begin, end, thread_index) on disjoint ranges covering [0, n), at most one
  // range per thread, and returns when all are done. Ranges are aligned to `grain`. An
  // exception thrown by fn on any thread is rethrown here, after every range has ended.
  // fn is a non-owning reference: handing a lambda over never allocates.
  void parallel_for(int64_t n, FunctionRef<void(int64_t, int64_t, int)> fn, int64_t grain = 1);

 private:
  void worker(int index);
  void run_range(int index);

  int n_threads_;
  std::vector<std::thread> threads_;
  std::mutex mu_;
  std::condition_variable cv_;
  std::atomic<uint64_t> generation_{0};
  std::atomic<int> pending_{0};
  std::atomic<bool> stop_{false};
  // Current job.
  const FunctionRef<void(int64_t, int64_t, int)>* fn_ = nullptr;
  int64_t n_ = 0, grain_ = 1;
  std::exception_ptr error_;  // first exception from a worker, under mu_
};

// Process-wide pool sized by set_default_threads (default: hardware concurrency).
ThreadPool& default_pool();
void set_default_threads(int n);

}  // namespace gannet
