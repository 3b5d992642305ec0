// What flows between the scheduler and the executor: StepPlan down, StepResult up.
#pragma once

#include <cstdint>
#include <utility>
#include <vector>

#include "cache/block_manager.h"
#include "gannet/request_output.h"

namespace gannet::engine {

struct Sequence;

struct ScheduledSeq {
  Sequence* seq = nullptr;
  uint64_t epoch = 0;     // seq->epoch when planned; a mismatch on return = stale
  int64_t start = 0;      // first position computed this step
  int64_t count = 0;      // positions computed this step
  int num_samples = 0;    // tokens to sample from the last row: 0 (mid-prompt), 1, or n (fork)
  bool prompt_logprobs = false;  // logits of every row, for prompt logprobs
};

struct StepPlan {
  std::vector<ScheduledSeq> seqs;          // decodes first, then prefill chunks
  std::vector<cache::BlockCopy> copies;    // copy-on-write, before the forward pass
  std::vector<std::pair<int32_t, int32_t>> state_copies;  // (src, dst) slots of forked samples
  int64_t num_tokens = 0;
  int64_t num_logit_rows = 0;
  bool empty() const { return seqs.empty(); }
};

struct SampledToken {
  int32_t token = 0;
  float logprob = 0;
  std::vector<TokenLogprob> top;  // requested top-N
};

struct SeqResult {
  Sequence* seq = nullptr;
  uint64_t epoch = 0;
  int64_t count = 0;                  // positions computed
  std::vector<SampledToken> samples;  // [num_samples]
  // Prompt logprobs: entry i is for prompt position first_prompt_pos + i.
  int64_t first_prompt_pos = 0;
  std::vector<PositionLogprobs> prompt_logprobs;
};

struct StepResult {
  std::vector<SeqResult> seqs;
};

}  // namespace gannet::engine
