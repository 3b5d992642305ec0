// A sequence is one sample of a request: its tokens, how much of them the cache holds,
// its blocks and state slot, and its epoch (bumped whenever its cached state is thrown
// away, so results planned before that are recognised as stale and dropped).
//
// The scheduler plans ahead: a planned decode counts as computed at once and its token is
// a placeholder at the end of `tokens` (num_pending of them) until the step's result
// replaces it. Stop checks, outputs and the sampler only ever see real tokens.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "cache/block_manager.h"
#include "gannet/request_output.h"

namespace gannet::engine {

struct Request;
struct SampledToken;

enum class SeqStatus { kWaiting, kRunning, kFinished };

struct Sequence {
  int64_t id = 0;
  Request* request = nullptr;
  int sample_index = 0;   // RNG stream; also the CompletionOutput index
  SeqStatus status = SeqStatus::kWaiting;
  std::vector<int32_t> tokens;  // prompt, generated tokens, then num_pending placeholders
  int64_t num_pending = 0;      // planned samples whose tokens have not come back yet
  int64_t prompt_len = 0;       // the request's prompt length
  int64_t num_computed = 0;     // leading positions whose K/V are in the cache once the
                                // steps planned so far have run
  cache::BlockTable table;
  uint64_t epoch = 0;
  int64_t admit_order = 0;      // larger = admitted later (preemption victim order)
  bool forked = false;          // n > 1 requests fork their samples after the prompt
  int64_t num_preemptions = 0;
  // Speculative decoding: drafts the steps in flight may still add (their planned spec_k
  // summed); the block table covers num_computed + spec_inflight positions.
  int64_t spec_inflight = 0;
  // Tokens of the last result not yet committed: accepted drafts and the final sample
  // come back together, and the engine takes them one at a time (stop checks) through
  // Scheduler::commit_held(). Pointers into the StepResult being processed.
  std::vector<const SampledToken*> held;
  size_t held_next = 0;
  uint64_t planned_in_step = 0; // the scheduler step that last planned it (0: none)
  // Prefix caching: chained hashes of its first full blocks of real tokens (computed as
  // needed, kept across preemption: tokens are only ever appended); leading table blocks
  // offered for registration.
  std::vector<cache::BlockHash> block_hashes;
  int64_t num_registered = 0;
  // Prefix-aware admission: while running, its prompt blocks [num_registered, num_claimed)
  // are claimed (it computes them, so a request waiting with the same next block waits
  // for them); while waiting, how many leading blocks it found cached when it last waited
  // and the steps it has waited since that count last grew.
  int64_t num_claimed = 0;
  int64_t wait_hit_blocks = 0, wait_steps = 0;
  // A hit for a model with per-sequence state recomputes [window_from, cached_until) to
  // rebuild it (Model::prefix_replay_start); 0, 0: none.
  int64_t window_from = 0, cached_until = 0;
  // Decode snapshots: its rolling slot holds its state after block rolling_block (hash
  // rolling_hash) once the plans so far have run; -1: none.
  int64_t rolling_block = -1;
  cache::BlockHash rolling_hash;
  bool in_executor = false;     // the executor holds a row for it (added, not yet removed)
  CompletionOutput out;         // text, ids, logprobs, finish reason
  size_t sent_tokens = 0, sent_text = 0;  // what streamed outputs have carried so far

  // Real tokens (placeholders excluded).
  int64_t num_tokens() const { return int64_t(tokens.size()) - num_pending; }
  int64_t num_outputs() const { return num_tokens() - prompt_len; }
  int32_t last_token() const { return tokens[size_t(num_tokens() - 1)]; }
  // Tokens not in the cache yet (1 in the decode phase), placeholders included.
  int64_t num_uncomputed() const { return int64_t(tokens.size()) - num_computed; }
  bool finished() const { return status == SeqStatus::kFinished; }
};

}  // namespace gannet::engine
