// Runs a StepPlan: flattens it into a model Batch in buffers the executor owns, performs
// copy-on-write block copies, runs the model, and samples. Returns a StepResult; it
// never changes a Sequence (the scheduler applies results), so a later asynchronous
// engine can run step N here while the scheduler plans step N+1.
#pragma once

#include <cstdint>
#include <vector>

#include "cache/cache_engine.h"
#include "core/thread_pool.h"
#include "engine/step_plan.h"
#include "model/model.h"
#include "sampling/sampler.h"

namespace gannet::engine {

class Executor {
 public:
  Executor(model::Model& model, cache::CacheEngine& cache, ThreadPool* pool, int64_t max_tokens,
           int64_t max_logit_rows, int64_t max_seqs, std::vector<int32_t> eos_ids);

  StepResult run(const StepPlan& plan);

 private:
  model::Model& model_;
  cache::CacheEngine& cache_;
  ThreadPool* pool_;
  int64_t vocab_;
  int64_t max_tokens_, max_logit_rows_;
  std::vector<int32_t> eos_ids_;
  // Inputs of one forward pass.
  std::vector<int32_t> ids_, pos_, tok_seq_, logit_rows_;  // [max_tokens] each
  std::vector<kernels::AttentionSeq> attn_seqs_;            // [max_seqs]
  std::vector<float> logits_;                               // [max_logit_rows, vocab]
  std::vector<sampling::Sampler> samplers_;                 // one per pool thread
};

}  // namespace gannet::engine
