// Continuous batching with chunked prefill and preemption by recomputation.
//
// Each step: running decodes first (oldest admitted first), then the remaining token
// budget goes to prompt chunks of running sequences, then new sequences are admitted
// first-come first-served. When a decode cannot get a block, the most recently admitted
// running sequence is preempted: its blocks and slot are freed and it goes back to the
// front of the queue with its generated tokens kept, to be recomputed. Work per step is
// O(running sequences).
//
// Plans are values (step_plan.h) and may be built while earlier ones still run: a planned
// decode counts as done (a placeholder token, see sequence.h) so the next step can be
// planned at once; results come back in step order through update(). A sequence that
// ends (finish, abort) while a step that includes it is in flight keeps its blocks and
// state slot until that step's result is in (deferred release). Blocks of a sequence
// preempted during schedule() go straight to the plan being built: that plan runs after
// every step already in flight, so nothing still running can see their reuse.
//
// Prefix caching (SchedulerConfig::prefix_caching): admission starts a sequence after
// the longest run of cached blocks holding its first tokens. The full blocks of real
// tokens a plan computes are registered with the block manager, under their chained
// content hashes, when the next plan starts: every plan that can take them runs after the
// one writing them, even with that one still in flight. Cached K/V of a position depends
// only on the tokens up to it (batch invariance), so a hit computes exactly what a miss
// would.
//
// Prefix-aware admission (SchedulerConfig::prefix_wait_steps): a running sequence claims
// the prompt blocks it is still to compute. A waiting sequence whose next uncached block
// is claimed by another one waits instead of computing it too: the claimant registers it
// a step later, and the waiter's lookup then takes it. Requests behind a waiting one are
// admitted meanwhile (first come first served among those that do not wait). The wait is
// bounded: a sequence waits at most prefix_wait_steps steps in a row without its cached
// run growing, so a claimant that stalls (or is preempted: its claims go with it) never
// holds anyone back for long; one whose cached run keeps growing waits at most as long as
// the prefill it follows. Only when admission happens changes, never what is computed.
#pragma once

#include <cstdint>
#include <deque>
#include <functional>
#include <unordered_map>
#include <vector>

#include "cache/block_manager.h"
#include "cache/disk_tier.h"
#include "engine/sequence.h"
#include "engine/step_plan.h"

namespace gannet::engine {

struct SchedulerConfig {
  int64_t max_model_len = 1 << 30;  // a sequence never grows past this many tokens
  int64_t max_num_seqs = 256;
  int64_t max_num_batched_tokens = 2048;
  bool chunked_prefill = true;
  int64_t max_logit_rows = 512;        // rows of logits one step may ask for
  int64_t prompt_logprob_chunk = 256;  // largest chunk of a prompt whose logprobs are wanted
  // Speculative decoding: drafts a decode row may verify (0: off). The executor drafts
  // and verifies; the scheduler budgets 1 + k tokens and logit rows per decode and keeps
  // blocks for every position the steps in flight may reach (sequence.h, spec_inflight).
  int64_t num_speculative_tokens = 0;
  // A drafter in the model (DSpark): a recomputed sequence (preempted, with outputs) is
  // prefilled up to its last token only, so the executor drafts from it as the step that
  // sampled that token did, and the token becomes a speculative decode again.
  bool recompute_to_decode = false;
  // Rejection sampling (--speculative-sampling rejection): a request's tokens depend on
  // which drafts were verified, so every decode verifies exactly
  // min(its K, tokens it may still produce - 1) drafts; a row the step's budgets cannot
  // hold that many for waits for the next step instead of verifying fewer.
  bool full_depth = false;
  // Prefix caching: admission takes the longest cached run of the sequence's full blocks
  // (always computing at least the last position of its prefill), and full blocks are
  // registered once completed steps have written them. Only for models whose cache is
  // all paged (no per-sequence state); requests wanting prompt logprobs compute it all.
  bool prefix_caching = false;
  // Models with per-sequence state (DeepSeek-V4.1): a hit covers whole blocks only and
  // the sequence recomputes from replay_start(hit, prompt_len) (< 0: the hit is not used)
  // to rebuild its state; null: the cache is all paged and the hit is computed from.
  std::function<int64_t(int64_t hit, int64_t prompt_len)> replay_start;
  // Prefix-aware admission (see above): the most steps in a row a waiting sequence defers
  // to the running one computing its next block while its cached run does not grow; 0:
  // never defers (admission is plain first come first served).
  int64_t prefix_wait_steps = 4;
  // State snapshots (models with per-sequence state, with replay_start): the state a
  // sequence has after the last full block of its prompt is copied into one of
  // num_snapshots snapshot slots (state slots snapshot_slot0 ..), keyed by that block's
  // chained hash; a later hit that reaches such a block copies the snapshot into its own
  // slot instead of replaying, when snapshot_usable(at, prompt_len) says the saved state
  // is the one it would compute itself. The prefill chunk is cut at that block's end so
  // the state is taken exactly there (chunking never changes results). LRU when full.
  int64_t num_snapshots = 0;
  int32_t snapshot_slot0 = 0;
  // Decode snapshots: a plain row ending on a block boundary past the prompt copies the
  // sequence's state into the state slot rolling_slot0 + its own slot (one per sequence
  // slot, overwritten at each boundary); when the sequence ends, the last one is copied
  // into a snapshot slot, so the conversation's next turn, whose prompt holds this one's
  // outputs, hits it. -1: none.
  int32_t rolling_slot0 = -1;
  std::function<bool(int64_t at, int64_t prompt_len)> snapshot_usable;
};

struct PrefixCacheStats {
  int64_t queried_tokens = 0;  // positions admissions would have computed without a cache
  int64_t hit_tokens = 0;      // of those, taken from cached blocks
  int64_t admissions_hit = 0;  // admissions that took at least one block
  int64_t admissions = 0;      // admissions that looked the cache up
  int64_t disk_hit_blocks = 0; // blocks read back from the disk tier
  int64_t disk_hit_blocks_in_flight = 0;  // of those, filled by a plan built while a step ran
  int64_t replayed_tokens = 0; // cached positions computed again to rebuild state
  int64_t admission_waits = 0; // steps sequences waited for a block another one computes
  int64_t snapshot_saves = 0;    // states copied into snapshot slots
  int64_t snapshot_restores = 0; // hits that took a snapshot instead of replaying
  // Time spent on it (steady clock): hashing and lookup at admission attempts, and
  // registering written blocks (hashing included) after steps.
  double lookup_seconds = 0, register_seconds = 0;
};

class Scheduler {
 public:
  Scheduler(const SchedulerConfig& cfg, cache::BlockManager& blocks);

  void add(Sequence* seq);  // queued at the back (FCFS)
  // Ids unique for the scheduler's life, for new requests' sequences and forked samples.
  int64_t new_seq_id() { return next_seq_id_++; }
  // Fills `plan` (its buffers are reused) with the next step. An empty plan (nothing to
  // run) takes no step id and must not be run; every other plan's result must come back.
  void schedule(StepPlan& plan);
  // Applies a step's result (steps complete in order): drops stale rows, puts sampled
  // tokens in place of their placeholders, forks n > 1 requests after their prompt, and
  // releases what was waiting for this step. Returns the sequences that received tokens
  // (their stop conditions are checked by the engine); valid until the next call.
  const std::vector<Sequence*>& update(const StepResult& result);
  // Speculative rows return several tokens at once: update() commits the first, and the
  // engine takes the rest one at a time (checking stop conditions between them) while
  // has_held() says so. A sequence that finishes drops what it still holds.
  bool has_held(const Sequence* seq) const { return seq->held_next < seq->held.size(); }
  void commit_held(Sequence* seq);
  // Ends a sequence: its cache is released once no step in flight can read it;
  // finish_reason is set by the caller.
  void finish(Sequence* seq);
  // Aborts a waiting or running sequence.
  void abort(Sequence* seq);
  // The last step whose result update() has applied, and the last one planned.
  uint64_t completed_step() const { return completed_step_; }
  uint64_t planned_step() const { return step_; }
  // Executor rows of ended sequences not yet sent for removal.
  bool has_pending_removals() const { return !removed_.empty(); }
  // A running sequence by id, or nullptr.
  Sequence* find_running(int64_t id) const {
    auto it = by_id_.find(id);
    return it == by_id_.end() ? nullptr : it->second;
  }
  // Blocks and slots still held by ended sequences, waiting for in-flight steps.
  size_t num_deferred_releases() const { return deferred_.size(); }

  size_t num_waiting() const { return waiting_.size(); }
  size_t num_running() const { return running_.size(); }
  int64_t num_preemptions() const { return preemptions_; }
  const PrefixCacheStats& prefix_stats() const { return prefix_stats_; }
  // The prefix cache's disk tier (null: none): admission reads blocks back from it, off
  // this thread, into the plans' fills.
  void set_disk_tier(cache::DiskTier* disk) { disk_ = disk; }
  // Sequences wait for blocks the disk tier is reading (the engine waits for a read
  // rather than spin when nothing else runs).
  bool disk_reads_pending() const { return disk_ && disk_->reads_pending() > 0; }
  const SchedulerConfig& config() const { return cfg_; }

 private:
  void preempt(Sequence* seq);
  void remove_running(Sequence* seq);
  void leave_executor(Sequence* seq);  // the executor's row goes with the next plan
  void release_table(Sequence* seq);   // now, or after the steps in flight that read it
  int64_t slots_needed(const Sequence* seq) const;  // 1, or n for an unforked request
  // Positions a prefill of seq computes in all (recompute_to_decode leaves the last one).
  int64_t recompute_target(const Sequence* seq) const;
  void schedule_chunk(Sequence* seq, int64_t count, StepPlan& plan, int spec_k = -1);
  // Prefix caching: extends seq->block_hashes to its first n full blocks.
  void hash_blocks(Sequence* seq, int64_t n);
  // Prefix caching: offers the full blocks the plans so far write (offer_planned, after a
  // plan is built); they are registered when the next plan starts (register_pending), so
  // only plans that run after the writing one can take them.
  void offer_planned(Sequence* seq);
  void register_pending();
  // Prefix-aware admission: blocks running sequences will compute, by hash -> sequence id.
  std::unordered_map<cache::BlockHash, int64_t, cache::BlockHashHasher> claims_;
  void claim_blocks(Sequence* seq, int64_t from, int64_t to);
  void drop_claims(Sequence* seq, int64_t to);  // [num_registered, to) of seq's claims
  struct PendingBlock {
    int32_t block;
    cache::BlockHash hash, parent;
    uint64_t step;
  };
  std::vector<PendingBlock> pending_;
  std::vector<int32_t> pending_tokens_;  // [pending_, block_size]

  SchedulerConfig cfg_;
  cache::BlockManager& blocks_;
  std::deque<Sequence*> waiting_;
  std::vector<Sequence*> running_;  // admission order
  int64_t reserved_slots_ = 0;      // held for the samples of admitted unforked requests
  int64_t next_admit_ = 0;
  int64_t next_seq_id_ = 1;
  uint64_t completed_step_ = 0;     // last step whose result was applied
  std::unordered_map<int64_t, Sequence*> by_id_;  // running sequences
  std::vector<int64_t> removed_;    // executor rows to drop with the next plan
  struct DeferredRelease {
    cache::BlockTable table;
    uint64_t after_step;
  };
  std::vector<DeferredRelease> deferred_;
  std::vector<Sequence*> touched_;  // update()'s return value, reused
  const StepResult* held_result_ = nullptr;  // the result held tokens point into
  void append_token(Sequence* seq, const SampledToken& t);
  int64_t preemptions_ = 0;
  PrefixCacheStats prefix_stats_;
  cache::DiskTier* disk_ = nullptr;
  std::vector<int32_t> hit_blocks_;  // admission's match_prefix output, reused
  // Disk hits: blocks asked of the disk tier's reader at once, and the steps a sequence
  // waits for them at most while its cached run does not grow.
  static constexpr size_t kDiskReadAhead = 64;
  static constexpr int64_t kDiskWaitSteps = 64;
  uint64_t step_ = 0;               // schedule() calls, to mark planned sequences
  // State-slot copies owed to forked samples, applied by the next plan unless the child
  // has ended in between (its epoch moved). The parent's slot still holds its state then:
  // an ended parent's slot is released after the steps in flight, and one preempted by
  // the same schedule() call is not reused by it (no admissions in a step that preempts).
  struct PendingStateCopy {
    int64_t child_id;
    uint64_t child_epoch;
    int32_t src, dst;
  };
  std::vector<PendingStateCopy> state_copies_;
  // State snapshots (SchedulerConfig::num_snapshots). A prompt chunk planned to end at
  // its sequence's snapshot boundary owes a save, emitted at the start of the next plan:
  // that plan runs after the one computing the chunk and copies (executor) before its
  // forward pass, and the sequence's slot is not written in between (a slot released or
  // given to an admission meanwhile is only written by that plan's forward).
  // Decode snapshots (SchedulerConfig::rolling_slot0): a plain row ending on a block
  // boundary past the prompt owes a rolling save the same way (the block's hash is taken
  // at emission, once its last token is real); an ending sequence's last rolling save is
  // promoted into a snapshot slot by the next plan, before anything can write its rolling
  // slot again (a sequence given the slot meanwhile first saves a plan later).
  struct Snapshot {
    cache::BlockHash hash;
    uint64_t used = 0;  // LRU tick; 0: empty
  };
  std::vector<Snapshot> snaps_;
  std::unordered_map<cache::BlockHash, int32_t, cache::BlockHashHasher> snap_index_;
  struct PendingSave {
    int32_t src;
    cache::BlockHash hash;
    // A rolling save (decode): the hash of block `block` of sequence seq_id, taken at
    // emission if it still runs at `epoch`.
    bool rolling = false;
    int64_t seq_id = 0;
    uint64_t epoch = 0;
    int64_t block = 0;
  };
  std::vector<PendingSave> saves_;
  uint64_t snap_tick_ = 0;
  // The position a prompt chunk of seq should end at to take its snapshot (0: none).
  int64_t snapshot_boundary(Sequence* seq);
  // A splittable prompt chunk of seq (from num_computed), cut to end at that position.
  int64_t cut_at_snapshot(Sequence* seq, int64_t chunk);
  void emit_saves(StepPlan& plan);
};

}  // namespace gannet::engine
