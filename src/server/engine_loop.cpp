#include "server/engine_loop.h"

#include <chrono>
#include <algorithm>
#include <map>
#include <span>

#include "core/error.h"

namespace gannet::server {

namespace {
double now_seconds() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}
}  // namespace

void Histogram::observe(double v) {
  size_t k = 0;
  while (k < bounds.size() && v > bounds[k]) ++k;
  ++counts[k];
  sum += v;
  ++count;
}

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
    pending_.push_back({id, prompt, ids, params, s, now_seconds()});
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

void EngineLoop::update_gauges(size_t running) {
  stats_.running = int64_t(running);
  stats_.waiting = int64_t(engine_->scheduler().num_waiting());
  stats_.kv_blocks_total = engine_->block_manager().num_blocks();
  stats_.kv_blocks_free = engine_->block_manager().num_free_blocks();
  stats_.preemptions = engine_->scheduler().num_preemptions();
  stats_.prefix_queried_tokens = engine_->scheduler().prefix_stats().queried_tokens;
  stats_.prefix_hit_tokens = engine_->scheduler().prefix_stats().hit_tokens;
  stats_.prefix_evictions = engine_->block_manager().counters().evictions;
  stats_.prefix_cached_blocks = engine_->block_manager().num_cached_blocks();
  if (cache::DiskTier* disk = engine_->disk_tier()) {
    const cache::DiskTierStats ds = disk->stats();
    stats_.prefix_disk_hits = ds.hits;
    stats_.prefix_disk_writes = ds.writes;
    stats_.prefix_disk_files = ds.files;
  }
}

void EngineLoop::run() {
  std::map<std::string, std::shared_ptr<OutputStream>> streams;
  std::map<std::string, Timing> timing;
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
        timing[p.id] = {p.submitted, 0};
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
      timing.erase(id);
      std::lock_guard<std::mutex> lk(mu_);
      ++stats_.aborted;
    };
    for (const std::string& id : aborts) finish_abort(id, nullptr);
    if (!engine_->has_unfinished()) {
      std::lock_guard<std::mutex> lk(mu_);
      update_gauges(streams.size());
      continue;
    }
    std::vector<std::string> too_slow;
    std::span<RequestOutput> outs = engine_->step();
    const double now = now_seconds();
    for (RequestOutput& o : outs) {
      auto it = streams.find(o.request_id);
      if (it == streams.end()) continue;
      std::shared_ptr<OutputStream> s = it->second;
      const bool finished = o.finished;
      if (auto t = timing.find(o.request_id); t != timing.end()) {
        // Deltas carry the new tokens; a finished output is complete, so only a request
        // that finished in its first output (no deltas before) counts its first token here.
        size_t fresh = 0;
        for (const CompletionOutput& c : o.outputs) fresh = std::max(fresh, c.token_ids.size());
        if (finished && t->second.last_token > 0) fresh = 0;
        if (fresh > 0) {
          std::lock_guard<std::mutex> lk(mu_);
          if (t->second.last_token == 0) {
            stats_.ttft.observe(now - t->second.submitted);
          } else {
            const double gap = (now - t->second.last_token) / double(fresh);
            for (size_t k = 0; k < fresh; ++k) stats_.itl.observe(gap);
          }
          t->second.last_token = now;
        }
        if (finished) timing.erase(t);
      }
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
    update_gauges(streams.size());
  }
  for (auto& [id, s] : streams) {
    engine_->abort(id);
    s->fail("the server is shutting down");
  }
}

}  // namespace gannet::server
