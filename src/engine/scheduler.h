// Continuous batching with chunked prefill and preemption by recomputation.
//
// Each step: running decodes first (oldest admitted first), then the remaining token
// budget goes to prompt chunks of running sequences, then new sequences are admitted
// first-come first-served. When a decode cannot get a block, the most recently admitted
// running sequence is preempted: its blocks and slot are freed and it goes back to the
// front of the queue with its generated tokens kept, to be recomputed. Work per step is
// O(running sequences).
#pragma once

#include <cstdint>
#include <deque>
#include <vector>

#include "cache/block_manager.h"
#include "engine/sequence.h"
#include "engine/step_plan.h"

namespace gannet::engine {

struct SchedulerConfig {
  int64_t max_num_seqs = 256;
  int64_t max_num_batched_tokens = 2048;
  bool chunked_prefill = true;
  int64_t max_logit_rows = 512;        // rows of logits one step may ask for
  int64_t prompt_logprob_chunk = 256;  // largest chunk of a prompt whose logprobs are wanted
};

class Scheduler {
 public:
  Scheduler(const SchedulerConfig& cfg, cache::BlockManager& blocks);

  void add(Sequence* seq);  // queued at the back (FCFS)
  // Ids unique for the scheduler's life, for new requests' sequences and forked samples.
  int64_t new_seq_id() { return next_seq_id_++; }
  StepPlan schedule();
  // Applies a step's results: drops stale ones, advances computed positions, appends
  // sampled tokens and forks n > 1 requests after their prompt. Returns the sequences
  // that received tokens (their stop conditions are checked by the engine).
  std::vector<Sequence*> update(const StepResult& result);
  // Ends a sequence: frees its cache; finish_reason is set by the caller.
  void finish(Sequence* seq);
  // Aborts a waiting or running sequence.
  void abort(Sequence* seq);

  size_t num_waiting() const { return waiting_.size(); }
  size_t num_running() const { return running_.size(); }
  int64_t num_preemptions() const { return preemptions_; }
  const SchedulerConfig& config() const { return cfg_; }

 private:
  void preempt(Sequence* seq);
  void remove_running(Sequence* seq);
  int64_t slots_needed(const Sequence* seq) const;  // 1, or n for an unforked request
  void schedule_chunk(Sequence* seq, int64_t count, StepPlan& plan);

  SchedulerConfig cfg_;
  cache::BlockManager& blocks_;
  std::deque<Sequence*> waiting_;
  std::vector<Sequence*> running_;  // admission order
  int64_t reserved_slots_ = 0;      // held for the samples of admitted unforked requests
  int64_t next_admit_ = 0;
  int64_t next_seq_id_ = 1;
  int64_t preemptions_ = 0;
  uint64_t step_ = 0;               // schedule() calls, to mark planned sequences
  // State-slot copies owed to forked samples, applied by the next plan unless the child
  // has ended in between (its epoch moved).
  struct PendingStateCopy {
    Sequence* child;
    uint64_t child_epoch;
    int32_t src, dst;
    // The parent may have ended since: its slot can only have been handed out in the same
    // schedule() call, and nobody writes a slot before the copies of that plan run.
    bool live() const { return child->epoch == child_epoch && child->status == SeqStatus::kRunning; }
  };
  std::vector<PendingStateCopy> state_copies_;
};

}  // namespace gannet::engine
