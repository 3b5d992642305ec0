// Runs an Executor on a thread of its own for asynchronous scheduling: the engine thread
// submits plans and collects results in step order, planning step N+1 and processing the
// outputs of step N-1 while step N runs. Plans and results live in buffers the engine
// owns; a submitted plan and its result buffer stay untouched by the engine until wait()
// hands the result back. No allocation per step.
#pragma once

#include <array>
#include <condition_variable>
#include <exception>
#include <mutex>
#include <thread>

#include "engine/executor.h"

namespace gannet::engine {

class ExecutorThread {
 public:
  static constexpr int kMaxInFlight = 4;

  explicit ExecutorThread(Executor& executor);
  ~ExecutorThread();  // finishes what was submitted, then joins
  ExecutorThread(const ExecutorThread&) = delete;
  ExecutorThread& operator=(const ExecutorThread&) = delete;

  // Queues a plan (at most kMaxInFlight outstanding).
  void submit(const StepPlan* plan, StepResult* out);
  // Waits for the oldest submitted step and returns its result; rethrows what the
  // executor threw for it.
  StepResult* wait();
  int in_flight() const { return submitted_ - collected_; }

 private:
  void loop();

  Executor& executor_;
  struct Job {
    const StepPlan* plan = nullptr;
    StepResult* out = nullptr;
    bool done = false;
    std::exception_ptr error;
  };
  std::array<Job, kMaxInFlight> jobs_;
  int submitted_ = 0, started_ = 0, collected_ = 0;  // counters; job i is jobs_[i % kMaxInFlight]
  bool stop_ = false;
  std::mutex mu_;
  std::condition_variable cv_work_, cv_done_;
  std::thread thread_;
};

}  // namespace gannet::engine
