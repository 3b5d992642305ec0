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
    r->id = std::to_string(i);
    r->prompt_ids.assign(200, 7);
    auto s = std::make_unique<Sequence>();
    s->id = sched.new_seq_id();
    s->request = r.get();
    s->tokens = r->prompt_ids;
    s->prompt_len = 200;
    sched.add(s.get());
    r->seqs.push_back(std::move(s));
    reqs.push_back(std::move(r));
  }
  // Prefill everything (fake results), so all sequences are decoding. The fake executor
  // reuses its result buffer, as the real one does.
  StepPlan plan;
  StepResult res;
  auto fake = [&res](const StepPlan& p) -> const StepResult& {
    res.clear();
    res.step_id = p.step_id;
    for (const PlanRow& r : p.rows) {
      RowResult rr;
      rr.seq_id = r.seq_id;
      rr.epoch = r.epoch;
      rr.count = r.count;
      rr.sample_offset = int64_t(res.samples.size());
      rr.num_samples = r.num_samples;
      for (int k = 0; k < r.num_samples; ++k) res.samples.push_back({int32_t(r.start % 1000), 0.f, 0, 0});
      res.rows.push_back(rr);
    }
    return res;
  };
  while (sched.num_waiting() > 0) {
    sched.schedule(plan);
    sched.update(fake(plan));
  }
  for (auto _ : state) {
    sched.schedule(plan);
    state.PauseTiming();
    fake(plan);  // stands in for the executor
    state.ResumeTiming();
    benchmark::DoNotOptimize(sched.update(res));
    // Keep sequences short enough that the cache never fills.
    state.PauseTiming();
    for (auto& r : reqs)
      if (r->seqs[0]->tokens.size() > 3000) {
        Sequence* s = r->seqs[0].get();
        sched.finish(s);
        s->tokens.resize(200);
        s->num_computed = 0;
        s->out.token_ids.clear();
        s->forked = false;
        s->status = SeqStatus::kWaiting;
        sched.add(s);
      }
    state.ResumeTiming();
  }
  state.counters["seqs"] = double(n);
}

}  // namespace

BENCHMARK(BM_SchedulerStep)->Arg(64)->Arg(256)->Unit(benchmark::kMicrosecond);
