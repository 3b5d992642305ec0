#include "server/engine_loop.h"

#include <chrono>
#include <map>

#include "core/error.h"

namespace gannet::server {

std::optional<RequestOutput> OutputStream::next(int timeout_ms) {
  std::unique_lock<std::mutex> lk(mu_);
  cv_.wait_for(lk, std::chrono::milliseconds(timeout_ms), [&] { return !q_.empty() || finished_; });
  if (q_.empty()) return std::nullopt;
  RequestOutput o = std::move(q_.front());
  q_.pop_front();
  return o;
}

bool OutputStream::done() const {
  std::lock_guard<std::mutex> lk(mu_);
  return finished_ && q_.empty();
}

std::string OutputStream::error() const {
  std::lock_guard<std::mutex> lk(mu_);
  return error_;
}

void OutputStream::push(RequestOutput o) {
  {
    std::lock_guard<std::mutex> lk(mu_);
    if (o.finished) finished_ = true;
    q_.push_back(std::move(o));
  }
  cv_.notify_all();
}

void OutputStream::fail(std::string message) {
  {
    std::lock_guard<std::mutex> lk(mu_);
    error_ = std::move(message);
    finished_ = true;
  }
  cv_.notify_all();
}

EngineLoop::EngineLoop(std::unique_ptr<engine::Engine> engine) : engine_(std::move(engine)) {
  engine_->set_streaming(true);
  thread_ = std::thread([this] { run(); });
}

EngineLoop::~EngineLoop() {
  {
    std::lock_guard<std::mutex> lk(mu_);
    stop_ = true;
  }
  cv_.notify_all();
  thread_.join();
}

std::shared_ptr<OutputStream> EngineLoop::submit(const std::string& id, const std::string& prompt,
                                                 const std::vector<int32_t>& ids, const SamplingParams& params) {
  auto s = std::make_shared<OutputStream>();
  {
    std::lock_guard<std::mutex> lk(mu_);
    pending_.push_back({id, prompt, ids, params, s});
  }
  cv_.notify_all();
  return s;
}

void EngineLoop::abort(const std::string& id) {
  {
    std::lock_guard<std::mutex> lk(mu_);
    aborts_.push_back(id);
  }
  cv_.notify_all();
}

LoopStats EngineLoop::stats() const {
  std::lock_guard<std::mutex> lk(mu_);
  return stats_;
}

void EngineLoop::run() {
  std::map<std::string, std::shared_ptr<OutputStream>> streams;
  for (;;) {
    std::vector<Pending> adds;
    std::vector<std::string> aborts;
    {
      std::unique_lock<std::mutex> lk(mu_);
      cv_.wait(lk, [&] { return stop_ || !pending_.empty() || !aborts_.empty() || engine_->has_unfinished(); });
      if (stop_) break;
      adds.swap(pending_);
      aborts.swap(aborts_);
    }
    for (Pending& p : adds) {
      try {
        if (p.ids.empty()) engine_->add_request(p.id, p.prompt, p.params);
        else engine_->add_request(p.id, p.ids, p.params);
        streams[p.id] = p.stream;
        std::lock_guard<std::mutex> lk(mu_);
        ++stats_.requests;
      } catch (const Error& e) {
        p.stream->fail(e.what());
      }
    }
    auto finish_abort = [&](const std::string& id, const char* why) {
      auto it = streams.find(id);
      if (it == streams.end()) return;
      if (std::optional<RequestOutput> o = engine_->abort(id)) {
        if (why) it->second->fail(why);
        else it->second->push(std::move(*o));
      }
      streams.erase(it);
      std::lock_guard<std::mutex> lk(mu_);
      ++stats_.aborted;
    };
    for (const std::string& id : aborts) finish_abort(id, nullptr);
    if (!engine_->has_unfinished()) {
      std::lock_guard<std::mutex> lk(mu_);
      stats_.running = int64_t(streams.size());
      continue;
    }
    std::vector<std::string> too_slow;
    for (RequestOutput& o : engine_->step()) {
      auto it = streams.find(o.request_id);
      if (it == streams.end()) continue;
      std::shared_ptr<OutputStream> s = it->second;
      const bool finished = o.finished;
      if (finished) {  // a finished request's output is complete (not a delta)
        std::lock_guard<std::mutex> lk(mu_);
        for (const CompletionOutput& c : o.outputs) stats_.generation_tokens += int64_t(c.token_ids.size());
        stats_.prompt_tokens += int64_t(o.prompt_token_ids.size());
      }
      size_t queued;
      {
        std::lock_guard<std::mutex> lk(s->mu_);
        queued = s->q_.size();
      }
      if (!finished && queued >= kMaxQueued) {
        too_slow.push_back(o.request_id);
        continue;
      }
      s->push(std::move(o));
      if (finished) streams.erase(it);
    }
    for (const std::string& id : too_slow) finish_abort(id, "the client stopped reading its stream; request aborted");
    std::lock_guard<std::mutex> lk(mu_);
    stats_.running = int64_t(streams.size());
  }
  for (auto& [id, s] : streams) {
    engine_->abort(id);
    s->fail("the server is shutting down");
  }
}

}  // namespace gannet::server
