// The thread that owns the engine. HTTP threads submit requests and aborts through a queue
// and read each request's outputs from a stream of its own; the engine never waits for a
// client: a stream that holds more than its bound (a client that stopped reading) gets its
// request aborted, which frees its cache.
#pragma once

#include <condition_variable>
#include <deque>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "core/collective.h"
#include "engine/engine.h"
#include "vision/image.h"
#include "gannet/request_output.h"
#include "gannet/sampling_params.h"

namespace gannet::server {

// One request's outputs, in engine order (deltas while streaming, then the final output).
class OutputStream {
 public:
  // Waits up to `timeout_ms` for an output; nullopt on timeout or once the stream has
  // ended (done()).
  std::optional<RequestOutput> next(int timeout_ms);
  bool done() const;
  // Set when the request was refused (bad parameters) or cut off; empty otherwise.
  std::string error() const;

 private:
  friend class EngineLoop;
  void push(RequestOutput o);
  void fail(std::string message);
  mutable std::mutex mu_;
  std::condition_variable cv_;
  std::deque<RequestOutput> q_;
  bool finished_ = false;
  std::string error_;
};

// A Prometheus histogram: counts per upper bound (cumulative when printed), sum, count.
struct Histogram {
  std::vector<double> bounds;
  std::vector<int64_t> counts;  // one per bound, plus +Inf
  double sum = 0;
  int64_t count = 0;
  explicit Histogram(std::vector<double> b = {}) : bounds(std::move(b)), counts(bounds.size() + 1, 0) {}
  void observe(double v);
};

struct LoopStats {
  int64_t running = 0, waiting = 0;
  int64_t requests = 0, prompt_tokens = 0, generation_tokens = 0, aborted = 0;
  int64_t kv_blocks_total = 0, kv_blocks_free = 0, preemptions = 0;
  // Prefix caching: positions admissions looked up and took from cached blocks, cached
  // blocks evicted, cached blocks now (in use or evictable).
  int64_t prefix_queried_tokens = 0, prefix_hit_tokens = 0, prefix_evictions = 0, prefix_cached_blocks = 0;
  // Its disk tier (--prefix-cache-dir): blocks read back, blocks written, files now.
  int64_t prefix_disk_hits = 0, prefix_disk_writes = 0, prefix_disk_files = 0;
  // Models with per-sequence state: cached positions computed again to rebuild it (the
  // replay), and hits that copied a state snapshot instead.
  int64_t prefix_replayed_tokens = 0, prefix_snapshot_restores = 0;
  // Seconds from submission to the first generated token, and between generated tokens
  // (a step that brings k tokens counts k intervals of 1/k of its gap).
  Histogram ttft{{0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.25, 0.5, 0.75, 1, 2.5, 5, 7.5, 10, 20, 40, 80}};
  Histogram itl{{0.01, 0.025, 0.05, 0.075, 0.1, 0.15, 0.2, 0.3, 0.4, 0.5, 0.75, 1, 2.5, 5, 7.5, 10, 20, 40, 80}};
};

class EngineLoop {
 public:
  // kMaxQueued: outputs a stream may hold unread before its request is aborted.
  static constexpr size_t kMaxQueued = 4096;
  // group (several ranks): this is rank 0 of a data-parallel server; requests go to the
  // rank with the fewest queued tokens, whose engine runs them (run_worker() there) and
  // sends the outputs back each step.
  explicit EngineLoop(std::unique_ptr<engine::Engine> engine, Collective* group = nullptr);
  ~EngineLoop();  // stops the thread (requests still running are aborted)

  // Queues a request (prompt text, or token ids when `ids` is non-empty). Bad parameters
  // end the stream with an error.
  // images: decoded images for a vision model (one placeholder each in the prompt).
  std::shared_ptr<OutputStream> submit(const std::string& id, const std::string& prompt,
                                       const std::vector<int32_t>& ids, const SamplingParams& params,
                                       std::vector<vision::RgbImage> images = {});
  // Ranks serving (data parallel under mpirun), 1 for one process.
  int ranks() const { return group_ ? group_->size() : 1; }
  void abort(const std::string& id);
  LoopStats stats() const;
  const engine::Engine& engine() const { return *engine_; }
  // A rank > 0 of a data-parallel server: runs the requests rank 0 sends until it stops.
  static void run_worker(engine::Engine& engine, Collective& group);

 private:
  void run();
  void run_group();  // rank 0 of a data-parallel server
  struct Timing;
  // Hands one step output to its stream, with the latency histograms and token counts;
  // a stream whose client stopped reading goes to too_slow instead. Returns whether the
  // request finished.
  bool deliver(RequestOutput& o, std::map<std::string, std::shared_ptr<OutputStream>>& streams,
               std::map<std::string, Timing>& timing, double now, std::vector<std::string>& too_slow);
  void update_gauges(size_t running);  // with mu_ held, on the engine thread
  struct Pending {
    std::string id, prompt;
    std::vector<int32_t> ids;
    SamplingParams params;
    std::shared_ptr<OutputStream> stream;
    double submitted = 0;  // steady clock, seconds
    std::vector<vision::RgbImage> images;
  };
  // Per running request: when it was submitted and when its last token came (0: none yet).
  struct Timing {
    double submitted = 0, last_token = 0;
  };
  std::unique_ptr<engine::Engine> engine_;
  Collective* group_ = nullptr;
  mutable std::mutex mu_;
  std::condition_variable cv_;
  std::vector<Pending> pending_;
  std::vector<std::string> aborts_;
  bool stop_ = false;
  LoopStats stats_;
  std::thread thread_;
};

}  // namespace gannet::server
