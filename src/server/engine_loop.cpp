#include "server/engine_loop.h"

#include <chrono>
#include <algorithm>
#include <map>
#include <span>

#include "core/error.h"
#include "server/wire.h"

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

EngineLoop::EngineLoop(std::unique_ptr<engine::Engine> engine, Collective* group)
    : engine_(std::move(engine)), group_(group) {
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
                                                 const std::vector<int32_t>& ids, const SamplingParams& params,
                                                 std::vector<vision::RgbImage> images) {
  auto s = std::make_shared<OutputStream>();
  {
    std::lock_guard<std::mutex> lk(mu_);
    pending_.push_back({id, prompt, ids, params, s, now_seconds(), std::move(images)});
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
  stats_.prefix_replayed_tokens = engine_->scheduler().prefix_stats().replayed_tokens;
  stats_.prefix_snapshot_restores = engine_->scheduler().prefix_stats().snapshot_restores;
  if (cache::DiskTier* disk = engine_->disk_tier()) {
    const cache::DiskTierStats ds = disk->stats();
    stats_.prefix_disk_hits = ds.hits;
    stats_.prefix_disk_writes = ds.writes;
    stats_.prefix_disk_files = ds.files;
  }
}

bool EngineLoop::deliver(RequestOutput& o, std::map<std::string, std::shared_ptr<OutputStream>>& streams,
                         std::map<std::string, Timing>& timing, double now, std::vector<std::string>& too_slow) {
  const bool finished = o.finished;
  auto it = streams.find(o.request_id);
  if (it == streams.end()) return finished;
  std::shared_ptr<OutputStream> s = it->second;
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
    return false;
  }
  s->push(std::move(o));
  if (finished) streams.erase(it);
  return finished;
}

void EngineLoop::run() {
  if (group_ && group_->size() > 1) return run_group();
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
        if (p.ids.empty()) engine_->add_request(p.id, p.prompt, p.params, p.images);
        else engine_->add_request(p.id, p.ids, p.params, p.images);
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
    for (RequestOutput& o : outs) deliver(o, streams, timing, now, too_slow);
    for (const std::string& id : too_slow) finish_abort(id, "the client stopped reading its stream; request aborted");
    std::lock_guard<std::mutex> lk(mu_);
    update_gauges(streams.size());
  }
  for (auto& [id, s] : streams) {
    engine_->abort(id);
    s->fail("the server is shutting down");
  }
}

// A data-parallel server (several ranks). Each round rank 0 broadcasts a control message
// (stop; new requests with their owner rank; aborts with theirs), every rank applies its
// share and steps its engine (all of them together when any has work, as expert
// parallelism needs), and rank 0 gathers each rank's reply: requests it could not add,
// its outputs, and its gauges.
namespace {

constexpr int kGauges = 13;

struct Round {
  bool stop = false;
  std::string reply;
};

// One round on any rank: applies `control`, steps, and makes this rank's reply.
Round rank_round(engine::Engine& eng, Collective& group, const std::string& control) {
  WireReader r(control);
  Round out;
  out.stop = r.u64() != 0;
  if (out.stop) return out;
  const int me = group.rank();
  WireWriter failed, outputs;
  uint64_t n_failed = 0, n_out = 0;
  for (uint64_t n = r.count(), i = 0; i < n; ++i) {
    const std::string id = r.str();
    const int owner = int(r.i64());
    const std::string prompt = r.str();
    const std::vector<int32_t> ids = r.ids();
    const SamplingParams params = r.params();
    if (owner != me) continue;
    try {
      if (ids.empty()) eng.add_request(id, prompt, params);
      else eng.add_request(id, ids, params);
    } catch (const Error& e) {
      failed.str(id), failed.str(e.what());
      ++n_failed;
    }
  }
  for (uint64_t n = r.count(), i = 0; i < n; ++i) {
    const std::string id = r.str();
    if (int(r.i64()) != me) continue;
    if (std::optional<RequestOutput> o = eng.abort(id)) outputs.output(*o), ++n_out;
  }
  if (group.any(eng.has_unfinished()))
    for (const RequestOutput& o : eng.step()) outputs.output(o), ++n_out;
  WireWriter w;
  w.u64(n_failed);
  std::string reply = w.bytes() + failed.bytes();
  WireWriter w2;
  w2.u64(n_out);
  reply += w2.bytes() + outputs.bytes();
  WireWriter g;
  const cache::DiskTierStats disk = eng.disk_tier() ? eng.disk_tier()->stats() : cache::DiskTierStats{};
  const int64_t gauges[kGauges] = {int64_t(eng.scheduler().num_waiting()), eng.block_manager().num_blocks(),
                                   eng.block_manager().num_free_blocks(), eng.scheduler().num_preemptions(),
                                   eng.scheduler().prefix_stats().queried_tokens, eng.scheduler().prefix_stats().hit_tokens,
                                   int64_t(eng.block_manager().counters().evictions),
                                   int64_t(eng.block_manager().num_cached_blocks()), int64_t(disk.hits),
                                   int64_t(disk.writes), int64_t(disk.files),
                                   eng.scheduler().prefix_stats().replayed_tokens,
                                   eng.scheduler().prefix_stats().snapshot_restores};
  for (int64_t x : gauges) g.i64(x);
  out.reply = reply + g.bytes();
  return out;
}

}  // namespace

void EngineLoop::run_worker(engine::Engine& eng, Collective& group) {
  eng.set_streaming(true);
  for (;;) {
    // Between requests this waits as long as the server idles (no timeout).
    const Round round = rank_round(eng, group, group.broadcast_wait(std::string()));
    if (round.stop) return;
    group.gather(round.reply);
  }
}

void EngineLoop::run_group() {
  Collective& group = *group_;
  const int ranks = group.size();
  std::map<std::string, std::shared_ptr<OutputStream>> streams;
  std::map<std::string, Timing> timing;
  struct Placed {
    int owner = 0;
    int64_t cost = 0;
  };
  std::map<std::string, Placed> placed;  // every request out on a rank
  std::vector<int64_t> queued(size_t(ranks), 0);
  auto retire = [&](const std::string& id) {
    auto it = placed.find(id);
    if (it == placed.end()) return;
    queued[size_t(it->second.owner)] -= it->second.cost;
    placed.erase(it);
  };
  for (;;) {
    std::vector<Pending> adds;
    std::vector<std::string> aborts;
    bool stop = false;
    {
      std::unique_lock<std::mutex> lk(mu_);
      cv_.wait(lk, [&] { return stop_ || !pending_.empty() || !aborts_.empty() || !placed.empty(); });
      stop = stop_;
      adds.swap(pending_);
      aborts.swap(aborts_);
    }
    WireWriter w;
    w.u64(stop);
    if (!stop) {
      w.u64(adds.size());
      for (Pending& p : adds) {
        // To the rank with the fewest tokens queued: the prompt's and those it may generate.
        int owner = 0;
        for (int k = 1; k < ranks; ++k)
          if (queued[size_t(k)] < queued[size_t(owner)]) owner = k;
        int64_t prompt = int64_t(p.ids.size());
        if (p.ids.empty()) {
          try {
            prompt = engine_->tokenizer() ? int64_t(engine_->tokenizer()->encode(p.prompt, true).size())
                                          : int64_t(p.prompt.size());
          } catch (const Error&) {
            prompt = int64_t(p.prompt.size());  // the owner reports the problem
          }
        }
        const int64_t cost = std::max<int64_t>(1, prompt + p.params.max_tokens * p.params.n);
        queued[size_t(owner)] += cost;
        placed[p.id] = {owner, cost};
        streams[p.id] = p.stream;
        timing[p.id] = {p.submitted, 0};
        w.str(p.id), w.i64(owner), w.str(p.prompt), w.ids(p.ids), w.params(p.params);
        std::lock_guard<std::mutex> lk(mu_);
        ++stats_.requests;
      }
      std::vector<std::pair<std::string, int>> to_abort;
      for (const std::string& id : aborts)
        if (auto it = placed.find(id); it != placed.end()) {
          to_abort.push_back({id, it->second.owner});
          std::lock_guard<std::mutex> lk(mu_);
          if (streams.count(id)) ++stats_.aborted;  // (one whose client stopped reading counted already)
        }
      w.u64(to_abort.size());
      for (auto& [id, owner] : to_abort) w.str(id), w.i64(owner);
    }
    const std::string control = group.broadcast(w.bytes());
    const Round mine = rank_round(*engine_, group, control);
    if (mine.stop) break;
    const std::vector<std::string> parts = group.gather(mine.reply);
    const double now = now_seconds();
    std::vector<std::string> too_slow;
    int64_t gauges[kGauges] = {};
    for (const std::string& part : parts) {
      WireReader r(part);
      for (uint64_t n = r.count(), i = 0; i < n; ++i) {
        const std::string id = r.str(), message = r.str();
        if (auto it = streams.find(id); it != streams.end()) it->second->fail(message), streams.erase(it);
        timing.erase(id);
        retire(id);
        std::lock_guard<std::mutex> lk(mu_);
        --stats_.requests;
      }
      for (uint64_t n = r.count(), i = 0; i < n; ++i) {
        RequestOutput o = r.output();
        const std::string id = o.request_id;
        if (deliver(o, streams, timing, now, too_slow)) retire(id);
      }
      for (int64_t& g : gauges) g += r.i64();
    }
    for (const std::string& id : too_slow) {  // its owner aborts it next round
      if (auto it = streams.find(id); it != streams.end())
        it->second->fail("the client stopped reading its stream; request aborted"), streams.erase(it);
      timing.erase(id);
      std::lock_guard<std::mutex> lk(mu_);
      aborts_.push_back(id);
      ++stats_.aborted;
    }
    std::lock_guard<std::mutex> lk(mu_);
    stats_.running = int64_t(streams.size());
    stats_.waiting = gauges[0];
    stats_.kv_blocks_total = gauges[1];
    stats_.kv_blocks_free = gauges[2];
    stats_.preemptions = gauges[3];
    stats_.prefix_queried_tokens = gauges[4];
    stats_.prefix_hit_tokens = gauges[5];
    stats_.prefix_evictions = gauges[6];
    stats_.prefix_cached_blocks = gauges[7];
    stats_.prefix_disk_hits = gauges[8];
    stats_.prefix_disk_writes = gauges[9];
    stats_.prefix_disk_files = gauges[10];
    stats_.prefix_replayed_tokens = gauges[11];
    stats_.prefix_snapshot_restores = gauges[12];
  }
  for (auto& [id, s] : streams) s->fail("the server is shutting down");
}

}  // namespace gannet::server
