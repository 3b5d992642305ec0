// What flows between the engine thread and the executor: StepPlan down, StepResult up.
// Both are plain values (sequence ids, epochs, counts, flat arrays) that never point into
// scheduler-owned objects, so the scheduler may change anything while a step runs. Their
// buffers are reused step after step (clear() keeps capacity): no allocation per step.
#pragma once

#include <array>
#include <cstdint>
#include <memory>
#include <utility>
#include <vector>

#include "cache/block_manager.h"
#include "gannet/request_output.h"
#include "gannet/sampling_params.h"
#include "model/image_spans.h"
#include "structured/matcher.h"

namespace gannet::engine {

// A sequence entering the executor's persistent batch: newly admitted, resumed after
// preemption, or a forked sample. Everything the executor needs to run and sample it.
struct RowAdd {
  int64_t seq_id = 0;
  uint64_t epoch = 0;
  std::vector<int32_t> tokens;  // the history known so far: prompt, then outputs
  int64_t prompt_len = 0;
  int64_t reserve = 0;          // tokens the row may reach (prompt + max_tokens)
  int64_t max_blocks = 0;       // blocks its table may reach
  SamplingParams params;        // a copy: the request may be gone while a step still runs
  uint64_t seed = 0;
  int sample_index = 0;         // RNG stream of a forked sample
  int32_t state_slot = -1;      // the sequence's state slot for the row's lifetime
  // Structured output: the request's compiled grammar (immutable, shared by its samples);
  // the executor rebuilds the constraint's state from `tokens`.
  std::shared_ptr<structured::Automaton> grammar;
  // Image input: the prompt's image spans (shared with the request; the executor encodes
  // each image once, at the first step that computes its span), or null.
  std::shared_ptr<model::ImageSpans> images;
  // Prefix-cache replay (AttentionSeq::window_from / cached_until): 0, 0 for none.
  int64_t window_from = 0, cached_until = 0;
};

struct PlanRow {
  int64_t seq_id = 0;
  uint64_t epoch = 0;     // the sequence's epoch when planned; a mismatch on return = stale
  int64_t start = 0;      // first position computed this step
  int64_t count = 0;      // positions computed this step. Their tokens are the executor's
                          // row history; a decode's input is the token the row sampled in
                          // the previous step (asynchronous scheduling plans it before the
                          // engine has seen it)
  int num_samples = 0;    // tokens to sample from the last row: 0 (mid-prompt), 1, or n (fork)
  // Speculative decode (>= 0): the executor places the row itself, at its own history's
  // last token (the planned start may lag: earlier steps in flight accepted an unknown
  // number of drafts), drafts up to spec_k tokens, computes them with the last token and
  // verifies them; the blocks cover every position it may reach. -1: a plain row.
  int spec_k = -1;
  bool prompt_logprobs = false;  // logits of every row, for prompt logprobs
  int64_t table_offset = -1;     // >= 0: the row's block table changed from entry
  int64_t table_from = 0;        //   table_from on; its entries from there are
  int64_t table_len = 0;         //   plan.tables[table_offset, table_offset + table_len)
};

// A prefix-cache block read back from the disk tier, written into the arena before the
// forward pass (before the copies, which may read it).
struct BlockFill {
  int32_t block = -1;
  std::vector<uint8_t> data;  // CacheEngine::block_bytes()
};

struct StepPlan {
  uint64_t step_id = 0;
  std::vector<RowAdd> added;                // applied first (new rows)
  std::vector<PlanRow> rows;                // decodes first, then prefill chunks
  std::vector<int32_t> tables;              // block ids of changed tables
  std::vector<int64_t> removed;             // rows dropped first (ended or preempted)
  std::vector<BlockFill> fills;             // disk-tier blocks, written first
  std::vector<cache::BlockCopy> copies;     // copy-on-write, before the forward pass
  std::vector<std::pair<int32_t, int32_t>> state_copies;  // (src, dst) slots of forked samples
  int64_t num_tokens = 0;
  int64_t num_logit_rows = 0;
  // Expert parallelism (every rank runs the same sequence of forwards): lockstep plans are
  // the engine steps' own, each agreed with the other ranks before its forward; an idle
  // one has nothing of this rank's and only takes part in the others' exchanges.
  bool lockstep = false;
  bool idle = false;

  // Nothing to run or apply: the scheduler then gives the step id back.
  bool empty() const {
    return rows.empty() && added.empty() && removed.empty() && copies.empty() && state_copies.empty() &&
           fills.empty();
  }
  void clear() {
    added.clear();
    rows.clear();
    tables.clear();
    removed.clear();
    fills.clear();
    copies.clear();
    state_copies.clear();
    num_tokens = num_logit_rows = 0;
  }
};

struct SampledToken {
  int32_t token = 0;
  float logprob = 0;
  int64_t top_offset = 0;  // result.top[top_offset, top_offset + top_len)
  int top_len = 0;
};

struct RowResult {
  int64_t seq_id = 0;
  uint64_t epoch = 0;
  int64_t count = 0;                  // positions computed
  int64_t sample_offset = 0;          // result.samples[sample_offset, + num_samples)
  int num_samples = 0;                // a speculative row: its accepted drafts, then the
                                      // token sampled after them (1 + accepted)
  int spec_k = -1;                    // as planned (-1: not speculative)
  int spec_drafted = 0;               // drafts the executor proposed (<= spec_k)
  bool spec_has_conf = false;         // the drafter's confidences of those drafts:
  std::array<float, 16> spec_conf{};  //   spec_conf[0 .. spec_drafted)
  int64_t first_prompt_pos = 0;       // prompt logprobs: entry i is for this position + i
  int64_t prompt_lp_offset = 0;       // result.prompt_lps[prompt_lp_offset, + prompt_lp_len)
  int64_t prompt_lp_len = 0;
};

struct StepResult {
  uint64_t step_id = 0;
  std::vector<RowResult> rows;        // in plan order
  std::vector<SampledToken> samples;
  std::vector<SampledToken> prompt_lps;  // token = the prompt token at that position
  std::vector<TokenLogprob> top;      // top-N lists of samples and prompt logprobs
  double seconds = 0;                 // executor time for the step
  double draft_seconds = 0;           //   of which drafting (speculative rows)
  bool idle = false;                  // of an idle lockstep plan: nothing to apply

  void clear() {
    rows.clear();
    samples.clear();
    prompt_lps.clear();
    top.clear();
  }
};

}  // namespace gannet::engine
