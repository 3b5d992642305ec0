// Scheduler cost per step (schedule + update, no model) with N running sequences in
// the decode phase: the engine's own overhead, which must stay far below a model step
// (target: <= 50 us at 256 sequences).
#include <benchmark/benchmark.h>

#include <memory>

#include "cache/block_manager.h"
#include "engine/request.h"
#include "engine/scheduler.h"

using namespace gannet;
using namespace gannet::engine;

namespace {

void BM_SchedulerStep(benchmark::State& state) {
  const int64_t n = state.range(0);
  SchedulerConfig cfg;
  cfg.max_num_seqs = n;
  cfg.max_num_batched_tokens = 8192;
  cfg.max_logit_rows = n + 256;
  cache::BlockManager bm(n * 64, 64, n, 0);
  Scheduler sched(cfg, bm);
  std::vector<std::unique_ptr<Request>> reqs;
  for (int64_t i = 0; i < n; ++i) {
    auto r = std::make_unique<Request>();
    r->params.max_tokens = 1 << 30;
    r->prompt_ids.assign(200, 7);
    auto s = std::make_unique<Sequence>();
    s->id = i + 1;
    s->request = r.get();
    s->tokens = r->prompt_ids;
    s->prompt_len = 200;
    sched.add(s.get());
    r->seqs.push_back(std::move(s));
    reqs.push_back(std::move(r));
  }
  // Prefill everything (fake results), so all sequences are decoding.
  auto fake = [](const StepPlan& plan) {
    StepResult res;
    res.seqs.reserve(plan.seqs.size());
    for (const ScheduledSeq& s : plan.seqs) {
      SeqResult r;
      r.seq = s.seq;
      r.epoch = s.epoch;
      r.count = s.count;
      if (s.num_samples) r.samples.push_back({int32_t(s.start % 1000), 0.f, {}});
      res.seqs.push_back(std::move(r));
    }
    return res;
  };
  while (sched.num_waiting() > 0) sched.update(fake(sched.schedule()));
  for (auto _ : state) {
    StepPlan plan = sched.schedule();
    state.PauseTiming();
    StepResult res = fake(plan);  // stands in for the executor
    state.ResumeTiming();
    benchmark::DoNotOptimize(sched.update(res));
    // Keep sequences short enough that the cache never fills.
    state.PauseTiming();
    for (auto& r : reqs)
      if (r->seqs[0]->tokens.size() > 3000) {
        sched.finish(r->seqs[0].get());
        r->seqs[0]->tokens.resize(200);
        r->seqs[0]->num_computed = 0;
        r->seqs[0]->status = SeqStatus::kWaiting;
        sched.add(r->seqs[0].get());
      }
    state.ResumeTiming();
  }
  state.counters["seqs"] = double(n);
}

}  // namespace

BENCHMARK(BM_SchedulerStep)->Arg(64)->Arg(256)->Unit(benchmark::kMicrosecond);
