#include "engine/executor.h"

#include <span>

#include "core/error.h"
#include "engine/request.h"
#include "engine/sequence.h"

namespace gannet::engine {

namespace {
std::vector<TokenLogprob> to_public(const std::vector<sampling::TokenLogprob>& top) {
  std::vector<TokenLogprob> out;
  out.reserve(top.size());
  for (const auto& t : top) out.push_back({t.id, t.logprob});
  return out;
}
}  // namespace

Executor::Executor(model::Model& model, cache::CacheEngine& cache, ThreadPool* pool, int64_t max_tokens,
                   int64_t max_logit_rows, int64_t max_seqs, std::vector<int32_t> eos_ids)
    : model_(model), cache_(cache), pool_(pool), vocab_(model.config().vocab_size), max_tokens_(max_tokens),
      max_logit_rows_(max_logit_rows), eos_ids_(std::move(eos_ids)) {
  model_.reserve(max_tokens, max_logit_rows);
  ids_.resize(size_t(max_tokens));
  pos_.resize(size_t(max_tokens));
  tok_seq_.resize(size_t(max_tokens));
  logit_rows_.resize(size_t(max_logit_rows));
  attn_seqs_.resize(size_t(max_seqs) + 1);
  logits_.resize(size_t(max_logit_rows) * size_t(vocab_));
  const int threads = pool ? pool->size() : 1;
  for (int t = 0; t < threads; ++t) samplers_.emplace_back(vocab_);
}

StepResult Executor::run(const StepPlan& plan) {
  StepResult result;
  if (plan.seqs.empty()) return result;
  GANNET_CHECK(plan.num_tokens <= max_tokens_ && plan.num_logit_rows <= max_logit_rows_);
  GANNET_CHECK(plan.seqs.size() <= attn_seqs_.size());
  cache_.copy_blocks(plan.copies);
  for (auto [src, dst] : plan.state_copies) cache_.copy_state(src, dst);

  // Flatten: tokens of each scheduled sequence, in plan order.
  struct RowRef {
    int64_t first_row = -1;  // first logit row of this sequence
    int64_t last_row = -1;   // logit row sampled from
  };
  std::vector<RowRef> refs(plan.seqs.size());
  int64_t n = 0, rows = 0;
  for (size_t i = 0; i < plan.seqs.size(); ++i) {
    const ScheduledSeq& s = plan.seqs[i];
    const Sequence& seq = *s.seq;
    attn_seqs_[i].block_table = seq.table.blocks.data();
    refs[i].first_row = rows;
    for (int64_t j = 0; j < s.count; ++j) {
      ids_[size_t(n)] = seq.tokens[size_t(s.start + j)];
      pos_[size_t(n)] = int32_t(s.start + j);
      tok_seq_[size_t(n)] = int32_t(i);
      if (s.prompt_logprobs || (s.num_samples && j == s.count - 1)) logit_rows_[size_t(rows++)] = int32_t(n);
      ++n;
    }
    refs[i].last_row = rows - 1;
  }
  model::Batch b;
  b.n_tokens = n;
  b.token_ids = ids_.data();
  b.positions = pos_.data();
  b.token_seq = tok_seq_.data();
  b.n_seqs = int32_t(plan.seqs.size());
  b.seqs = attn_seqs_.data();
  b.n_logits = rows;
  b.logit_rows = logit_rows_.data();
  model_.forward(b, cache_.views(), logits_.data(), pool_);

  // Sample (and gather logprobs) row by row; each row depends only on its own inputs,
  // so the rows can be spread over threads.
  result.seqs.resize(plan.seqs.size());
  auto work = [&](int64_t begin, int64_t end, int thread) {
    sampling::Sampler& sampler = samplers_[size_t(thread)];
    for (int64_t i = begin; i < end; ++i) {
      const ScheduledSeq& s = plan.seqs[size_t(i)];
      const Sequence& seq = *s.seq;
      const Request& req = *seq.request;
      SeqResult& r = result.seqs[size_t(i)];
      r.seq = s.seq;
      r.epoch = s.epoch;
      r.count = s.count;
      const int top_n = req.params.prompt_logprobs.value_or(0);
      if (s.prompt_logprobs) {
        // Row j predicts position start + j + 1.
        r.first_prompt_pos = s.start + 1;
        for (int64_t j = 0; j < s.count && s.start + j + 1 < seq.prompt_len; ++j) {
          const float* row = logits_.data() + (refs[size_t(i)].first_row + j) * vocab_;
          sampling::SampleOutput o;
          sampler.prompt_logprobs(row, seq.tokens[size_t(s.start + j + 1)], top_n, &o);
          r.prompt_logprobs.push_back({o.token, o.logprob, to_public(o.top)});
        }
      }
      if (s.num_samples == 0) continue;
      const float* row = logits_.data() + refs[size_t(i)].last_row * vocab_;
      const std::span<const int32_t> all(seq.tokens);
      for (int k = 0; k < s.num_samples; ++k) {
        sampling::SampleInput in;
        in.logits = row;
        in.params = &req.params;
        in.seed = req.seed;
        in.stream = uint64_t(s.num_samples > 1 ? k : seq.sample_index);
        in.position = uint64_t(seq.num_outputs());
        in.prompt_ids = all.subspan(0, size_t(seq.prompt_len));
        in.output_ids = all.subspan(size_t(seq.prompt_len));
        in.eos_ids = eos_ids_;
        sampling::SampleOutput o = sampler.sample(in);
        r.samples.push_back({o.token, o.logprob, to_public(o.top)});
      }
    }
  };
  if (pool_) pool_->parallel_for(int64_t(plan.seqs.size()), work);
  else work(0, int64_t(plan.seqs.size()), 0);
  return result;
}

}  // namespace gannet::engine
