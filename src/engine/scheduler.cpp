#include "engine/scheduler.h"

#include <algorithm>

#include "core/error.h"
#include "engine/request.h"

namespace gannet::engine {

Scheduler::Scheduler(const SchedulerConfig& cfg, cache::BlockManager& blocks) : cfg_(cfg), blocks_(blocks) {
  GANNET_CHECK(cfg.max_num_seqs >= 1 && cfg.max_num_batched_tokens >= 1);
}

void Scheduler::add(Sequence* seq) {
  seq->status = SeqStatus::kWaiting;
  waiting_.push_back(seq);
}

int64_t Scheduler::slots_needed(const Sequence* seq) const {
  return seq->forked ? 1 : seq->request->params.n;
}

void Scheduler::schedule_chunk(Sequence* seq, int64_t count, StepPlan& plan) {
  blocks_.grow(seq->table, seq->num_computed + count, plan.copies);
  ScheduledSeq s;
  s.seq = seq;
  s.epoch = seq->epoch;
  s.start = seq->num_computed;
  s.count = count;
  const bool reaches_end = seq->num_computed + count == int64_t(seq->tokens.size());
  s.num_samples = reaches_end ? int(seq->forked ? 1 : seq->request->params.n) : 0;
  s.prompt_logprobs = seq->request->params.prompt_logprobs.has_value() && !seq->forked &&
                      s.start < seq->prompt_len - 1;
  plan.num_tokens += count;
  plan.num_logit_rows += s.prompt_logprobs ? count : (s.num_samples ? 1 : 0);
  plan.seqs.push_back(s);
  seq->planned_in_step = step_;
}

StepPlan Scheduler::schedule() {
  ++step_;
  StepPlan plan;
  for (const PendingStateCopy& c : state_copies_)
    if (c.live()) plan.state_copies.push_back({c.src, c.dst});
  state_copies_.clear();
  int64_t budget = cfg_.max_num_batched_tokens;
  bool preempted = false;
  // 1. Sequences with one uncomputed token (decodes): one position each.
  for (size_t i = 0; i < running_.size() && budget > 0; ++i) {
    Sequence* seq = running_[i];
    if (seq->num_uncomputed() != 1) continue;
    if (plan.num_logit_rows + 1 > cfg_.max_logit_rows) break;
    bool self_preempted = false;
    while (!blocks_.can_grow(seq->table, seq->num_computed + 1)) {
      Sequence* victim = running_.back();
      preempt(victim);
      preempted = true;
      if (victim == seq) {
        self_preempted = true;
        break;
      }
    }
    if (self_preempted) break;  // seq was the newest: nothing after it remains
    schedule_chunk(seq, 1, plan);
    --budget;
  }
  // 2. Prompt chunks of running sequences. Prompts whose logprobs are wanted may always be
  // split (their logit rows are capped per step), whatever chunked_prefill says.
  for (size_t i = 0; i < running_.size() && budget > 0; ++i) {
    Sequence* seq = running_[i];
    const int64_t left = seq->num_uncomputed();
    if (left <= 1) continue;
    const bool lp = seq->request->params.prompt_logprobs.has_value() && !seq->forked;
    const bool splittable = cfg_.chunked_prefill || lp;
    int64_t chunk = std::min(left, budget);
    if (lp) chunk = std::min({chunk, cfg_.prompt_logprob_chunk, cfg_.max_logit_rows - plan.num_logit_rows});
    else if (plan.num_logit_rows + 1 > cfg_.max_logit_rows) continue;
    if (chunk <= 0 || (!splittable && chunk < left)) continue;
    // Shrink to the blocks available; when not even one position fits, preempt the newest
    // running sequence (possibly this one) so the older ones always make progress.
    bool self_preempted = false;
    for (;;) {
      const int64_t fit = blocks_.positions_growable(seq->table) - seq->num_computed;
      if (fit >= chunk || (fit > 0 && splittable)) {
        chunk = std::min(chunk, fit);
        break;
      }
      // A sequence already in this step's plan cannot give up its blocks; decodes are
      // progressing then, and will free blocks as they finish.
      Sequence* victim = running_.back();
      if (victim != seq && victim->planned_in_step == step_) {
        chunk = 0;
        break;
      }
      preempt(victim);
      preempted = true;
      if (victim == seq) {
        self_preempted = true;
        break;
      }
    }
    if (self_preempted) break;  // seq was the newest: nothing after it remains
    if (chunk <= 0) continue;
    schedule_chunk(seq, chunk, plan);
    budget -= chunk;
  }
  // 3. Admission, first come first served; none in a step that had to preempt. The free-
  // block watermark is kept back for running sequences; with none running it is not.
  while (!preempted && budget > 0 && !waiting_.empty()) {
    Sequence* seq = waiting_.front();
    const int64_t need_slots = slots_needed(seq);
    if (int64_t(running_.size()) + reserved_slots_ + need_slots > cfg_.max_num_seqs) break;
    if (blocks_.num_free_slots() - reserved_slots_ < need_slots) break;
    const int64_t left = seq->num_uncomputed();
    const bool lp = seq->request->params.prompt_logprobs.has_value() && !seq->forked;
    const bool splittable = cfg_.chunked_prefill || lp;
    int64_t chunk = std::min(left, budget);
    if (lp) chunk = std::min({chunk, cfg_.prompt_logprob_chunk, cfg_.max_logit_rows - plan.num_logit_rows});
    else if (plan.num_logit_rows + 1 > cfg_.max_logit_rows) break;
    const int64_t reserve = running_.empty() ? 0 : blocks_.watermark();
    const int64_t fit = (blocks_.num_free_blocks() - reserve) * blocks_.block_size();
    if (splittable) chunk = std::min(chunk, fit);
    if (chunk <= 0 || chunk > fit || (!splittable && chunk < left)) break;
    waiting_.pop_front();
    blocks_.admit(seq->table, 0);
    reserved_slots_ += need_slots - 1;
    seq->status = SeqStatus::kRunning;
    seq->admit_order = next_admit_++;
    running_.push_back(seq);
    schedule_chunk(seq, chunk, plan);
    budget -= chunk;
  }
  return plan;
}

void Scheduler::remove_running(Sequence* seq) {
  auto it = std::find(running_.begin(), running_.end(), seq);
  GANNET_CHECK(it != running_.end(), "sequence ", seq->id, " is not running");
  running_.erase(it);
  reserved_slots_ -= slots_needed(seq) - 1;
}

void Scheduler::preempt(Sequence* seq) {
  remove_running(seq);
  blocks_.release(seq->table);
  seq->num_computed = 0;
  seq->epoch++;
  seq->num_preemptions++;
  seq->status = SeqStatus::kWaiting;
  // Back to the front: preempted sequences were admitted before anything still waiting.
  waiting_.push_front(seq);
  preemptions_++;
}

void Scheduler::finish(Sequence* seq) {
  if (seq->status == SeqStatus::kRunning) {
    remove_running(seq);
    blocks_.release(seq->table);
  }
  seq->status = SeqStatus::kFinished;
  seq->epoch++;
}

void Scheduler::abort(Sequence* seq) {
  if (seq->status == SeqStatus::kWaiting) {
    auto it = std::find(waiting_.begin(), waiting_.end(), seq);
    if (it != waiting_.end()) waiting_.erase(it);
    seq->status = SeqStatus::kFinished;
    seq->epoch++;
    return;
  }
  finish(seq);
}

std::vector<Sequence*> Scheduler::update(const StepResult& result) {
  std::vector<Sequence*> touched;
  for (const SeqResult& r : result.seqs) {
    Sequence* seq = r.seq;
    if (seq->epoch != r.epoch || seq->status != SeqStatus::kRunning) continue;  // stale
    seq->num_computed += r.count;
    Request* req = seq->request;
    for (size_t i = 0; i < r.prompt_logprobs.size(); ++i) {
      const int64_t pos = r.first_prompt_pos + int64_t(i);
      if (pos < int64_t(req->prompt_logprobs.size())) req->prompt_logprobs[size_t(pos)] = r.prompt_logprobs[i];
    }
    if (r.samples.empty()) continue;
    GANNET_CHECK(seq->num_computed == int64_t(seq->tokens.size()));
    auto append = [&](Sequence* s, const SampledToken& t) {
      s->tokens.push_back(t.token);
      s->out.token_ids.push_back(t.token);
      if (req->params.logprobs) {
        s->out.cumulative_logprob += t.logprob;
        s->out.logprobs.push_back({t.token, t.logprob, t.top});
      }
      touched.push_back(s);
    };
    if (!seq->forked && r.samples.size() > 1) {
      // Fork the other samples off the prompt: shared blocks, own slots (reserved).
      reserved_slots_ -= int64_t(r.samples.size()) - 1;
      seq->forked = true;
      for (size_t i = 1; i < r.samples.size(); ++i) {
        auto child = std::make_unique<Sequence>();
        child->id = new_seq_id();
        child->request = req;
        child->sample_index = int(i);
        child->status = SeqStatus::kRunning;
        child->tokens = seq->tokens;
        child->prompt_len = seq->prompt_len;
        child->num_computed = seq->num_computed;
        child->forked = true;
        child->admit_order = next_admit_++;
        child->out.index = int(i);
        blocks_.fork(seq->table, child->table);
        state_copies_.push_back({child.get(), child->epoch, seq->table.state_slot, child->table.state_slot});
        running_.push_back(child.get());
        append(child.get(), r.samples[i]);
        req->seqs.push_back(std::move(child));
      }
    } else {
      seq->forked = true;
    }
    append(seq, r.samples[0]);
  }
  return touched;
}

}  // namespace gannet::engine
