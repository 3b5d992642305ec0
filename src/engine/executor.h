// Runs StepPlans. It keeps a persistent batch: one row per running sequence with its own
// copy of the token history, block table and sampling state, updated from each plan
// (rows added, tables replaced, rows removed) and by its own sampling (a decode's input is
// the token its row sampled in the previous step). It reads nothing the scheduler owns,
// so the engine thread can plan step N+1 while step N runs here (executor_thread.h).
// Steady-state decode steps allocate nothing: every buffer is reused.
#pragma once

#include <cstdint>
#include <map>
#include <unordered_map>
#include <vector>

#include "cache/cache_engine.h"
#include "core/collective.h"
#include "core/thread_pool.h"
#include "core/zeroed_array.h"
#include "engine/step_plan.h"
#include "model/model.h"
#include "sampling/sampler.h"
#include "sampling/speculative.h"
#include "structured/constraint.h"

namespace gannet::engine {

class Executor {
 public:
  Executor(model::Model& model, cache::CacheEngine& cache, ThreadPool* pool, int64_t max_tokens,
           int64_t max_logit_rows, int64_t max_seqs, std::vector<int32_t> eos_ids, int64_t replay_keep = 0,
           sampling::NgramConfig ngram = {}, bool rejection_sampling = false);

  // Applies the plan's row changes, runs the forward pass and samples into *out (whose
  // buffers are reused).
  // Expert parallelism: lockstep plans agree on this stream whether any rank has tokens,
  // and a rank without runs the model's idle forward (model.h).
  void set_lockstep(Collective* comm) { lockstep_ = comm; }
  void run(const StepPlan& plan, StepResult* out);

  size_t num_rows() const { return rows_.size(); }

  // Structured output: tokens a row's constraint can take back without being rebuilt (at
  // least the most drafts a step verifies or drafts).
  void set_grammar_rollback(int max_rollback) { grammar_rollback_ = max_rollback; }

  // Confidence-scheduled verification (--speculative-verify varlen, DSpark drafts):
  // seconds[b - 1] a step of b tokens takes (step_profile.h); each step then verifies, per
  // row, the depth choose_verify_depths picks. Empty: every draft is verified.
  void set_step_profile(std::vector<double> seconds) { step_seconds_ = std::move(seconds); }
  // Engine::set_forced_drafts.
  void set_forced_drafts(std::map<std::vector<int32_t>, std::vector<int32_t>> by_prompt) {
    forced_ = std::move(by_prompt);
  }

 private:
  Collective* lockstep_ = nullptr;
  struct Row {
    uint64_t epoch = 0;
    std::vector<int32_t> tokens;  // prompt, outputs (including the ones sampled here)
    int64_t prompt_len = 0;
    int64_t reserve = 0;          // prompt + max_tokens: drafts never go past it
    std::vector<int32_t> blocks;  // block table
    SamplingParams params;
    uint64_t seed = 0;
    int sample_index = 0;
    int32_t state_slot = -1;
    int64_t window_from = 0, cached_until = 0;  // prefix-cache replay (RowAdd)
    std::shared_ptr<model::ImageSpans> images;    // image input (RowAdd), or null
    // The model's drafter's proposals for the tokens after tokens[draft_base - 1], made at
    // the end of the step that produced that token (DSpark), with their confidences.
    std::vector<int32_t> drafts;
    std::vector<float> confidence;
    int64_t draft_base = -1;
    // --speculative-sampling rejection, temperature > 0: the drafts were drawn from the
    // drafter's distributions, whose logits [block, vocab] verification needs.
    bool drafts_sampled = false;
    std::vector<float> draft_logits;
    const std::vector<int32_t>* forced = nullptr;  // set_forced_drafts' continuation
    // Structured output: the constraint after the outputs in `fed`, and its mask.
    struct Grammar {
      std::shared_ptr<structured::Automaton> grammar;  // shared by rows of the same grammar
      std::unique_ptr<structured::Constraint> c;
      std::vector<int32_t> fed;
      std::vector<uint32_t> mask;
    };
    std::unique_ptr<Grammar> grammar;
  };
  struct DraftChooser {  // one sampled-drafting row's history while its block is drafted
    Row* row = nullptr;
    std::vector<int32_t> hist;
  };
  // DSpark: seeds the drafter with each row's kept positions and drafts its next block.
  void run_drafter(const StepPlan& plan, const model::Batch& b, StepResult& result);
  void apply_changes(const StepPlan& plan);
  // The grammar mask for the token after `history` (prompt then outputs): the row's
  // constraint is brought to those outputs first (rolling back what differs, rebuilt from
  // scratch past its capacity). Null when the row has no grammar or its document ended.
  const uint32_t* grammar_mask(const Row& row, std::span<const int32_t> history);

  model::Model& model_;
  cache::CacheEngine& cache_;
  ThreadPool* pool_;
  int64_t vocab_;
  int64_t max_tokens_, max_logit_rows_;
  int64_t replay_keep_ = 0;  // bounded replay: keep this many prompt rows; 0: off
  std::vector<int32_t> eos_ids_;
  std::unordered_map<int64_t, Row> rows_;  // by sequence id
  // Inputs of one forward pass.
  std::vector<int32_t> ids_, pos_, tok_seq_, logit_rows_;  // [max_tokens] each
  std::vector<const float*> embeds_;  // [max_tokens]: image-span rows (Batch::embeds)
  std::vector<kernels::AttentionSeq> attn_seqs_;            // [max_seqs]
  std::vector<Row*> planned_;                               // [rows of the plan]
  std::vector<int64_t> first_row_, last_row_;               // logit rows per plan row
  std::vector<int64_t> start_, count_;                      // positions computed per plan row
  std::vector<int64_t> tok0_, seq_of_;                      // first batch row, Batch::seqs index per plan row
  int64_t draft_block_ = 0;                                 // the model's drafter (0: n-gram drafting)
  std::vector<model::DraftJob> draft_jobs_;
  bool rejection_ = false;                                  // --speculative-sampling rejection
  std::vector<DraftChooser> choosers_;
  std::vector<std::function<int32_t(int64_t, const float*)>> choose_fns_;
  std::vector<sampling::RejectionScratch> rejection_scratch_;  // one per pool thread
  std::map<std::vector<int32_t>, std::vector<int32_t>> forced_;
  int grammar_rollback_ = 16;
  std::vector<double> step_seconds_;                        // varlen's profile (empty: fixed)
  double fixed_seconds_ = 0;                                // a step's measured cost beyond it
  std::vector<int> depth_;                                  // per plan row: drafts to verify
  std::vector<std::vector<double>> vconf_;                  // scratch of the depth choice
  std::vector<double> vsec_;
  std::vector<size_t> vrow_;
  void choose_depths(const StepPlan& plan);
  sampling::NgramConfig ngram_;
  std::vector<int32_t> draft_;                              // scratch
  ZeroedArray<float> logits_;  // [max_logit_rows, vocab]: pages committed as rows are written
  std::vector<sampling::Sampler> samplers_;                 // one per pool thread
  std::vector<sampling::SampleOutput> sample_outs_;         // one per pool thread
};

}  // namespace gannet::engine
