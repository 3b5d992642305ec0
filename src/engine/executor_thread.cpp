#include "engine/executor_thread.h"

#include <chrono>

#include "core/error.h"

namespace gannet::engine {

ExecutorThread::ExecutorThread(Executor& executor) : executor_(executor) {
  thread_ = std::thread([this] { loop(); });
}

ExecutorThread::~ExecutorThread() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stop_ = true;
  }
  cv_work_.notify_all();
  thread_.join();
}

void ExecutorThread::submit(const StepPlan* plan, StepResult* out) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    GANNET_CHECK(submitted_ - collected_ < kMaxInFlight, "too many steps in flight");
    Job& j = jobs_[size_t(submitted_ % kMaxInFlight)];
    j.plan = plan;
    j.out = out;
    j.done = false;
    j.error = nullptr;
    ++submitted_;
  }
  cv_work_.notify_one();
}

StepResult* ExecutorThread::wait() {
  std::unique_lock<std::mutex> lock(mu_);
  GANNET_CHECK(collected_ < submitted_, "no step in flight");
  Job& j = jobs_[size_t(collected_ % kMaxInFlight)];
  cv_done_.wait(lock, [&] { return j.done; });
  ++collected_;
  if (j.error) std::rethrow_exception(j.error);
  return j.out;
}

void ExecutorThread::loop() {
  for (;;) {
    Job* j = nullptr;
    {
      std::unique_lock<std::mutex> lock(mu_);
      cv_work_.wait(lock, [&] { return started_ < submitted_ || stop_; });
      if (started_ == submitted_) return;  // stopping, nothing left
      j = &jobs_[size_t(started_ % kMaxInFlight)];
      ++started_;
    }
    std::exception_ptr err;
    const auto t0 = std::chrono::steady_clock::now();
    try {
      executor_.run(*j->plan, j->out);
    } catch (...) {
      err = std::current_exception();
    }
    j->out->seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    {
      std::lock_guard<std::mutex> lock(mu_);
      j->done = true;
      j->error = err;
    }
    cv_done_.notify_all();
  }
}

}  // namespace gannet::engine
