#include "engine/executor.h"

#include <algorithm>
#include <chrono>

#include <span>

#include "core/error.h"
#include "engine/verify_schedule.h"

namespace gannet::engine {

Executor::Executor(model::Model& model, cache::CacheEngine& cache, ThreadPool* pool, int64_t max_tokens,
                   int64_t max_logit_rows, int64_t max_seqs, std::vector<int32_t> eos_ids, int64_t replay_keep,
                   sampling::NgramConfig ngram, bool rejection_sampling)
    : model_(model), cache_(cache), pool_(pool), vocab_(model.config().vocab_size), max_tokens_(max_tokens),
      max_logit_rows_(max_logit_rows), replay_keep_(replay_keep), eos_ids_(std::move(eos_ids)),
      rejection_(rejection_sampling), ngram_(ngram) {
  model_.reserve(max_tokens, max_logit_rows);
  ids_.resize(size_t(max_tokens));
  embeds_.resize(size_t(max_tokens));
  pos_.resize(size_t(max_tokens));
  tok_seq_.resize(size_t(max_tokens));
  logit_rows_.resize(size_t(max_logit_rows));
  attn_seqs_.resize(size_t(max_seqs) + 1);
  planned_.reserve(size_t(max_seqs) + 1);
  first_row_.reserve(size_t(max_seqs) + 1);
  last_row_.reserve(size_t(max_seqs) + 1);
  start_.reserve(size_t(max_seqs) + 1);
  count_.reserve(size_t(max_seqs) + 1);
  tok0_.reserve(size_t(max_seqs) + 1);
  seq_of_.reserve(size_t(max_seqs) + 1);
  draft_jobs_.reserve(size_t(max_seqs) + 1);
  draft_block_ = model.draft_block();
  rows_.reserve(size_t(2 * max_seqs + 2));
  logits_ = ZeroedArray<float>(size_t(max_logit_rows) * size_t(vocab_));
  const int threads = pool ? pool->size() : 1;
  for (int t = 0; t < threads; ++t) samplers_.emplace_back(vocab_);
  sample_outs_.resize(size_t(threads));
  rejection_scratch_.resize(size_t(threads));
  choosers_.reserve(size_t(max_seqs) + 1);
  choose_fns_.reserve(size_t(max_seqs) + 1);
}

void Executor::apply_changes(const StepPlan& plan) {
  for (int64_t id : plan.removed) rows_.erase(id);
  for (const RowAdd& a : plan.added) {
    Row& r = rows_[a.seq_id];
    r.epoch = a.epoch;
    r.tokens.reserve(size_t(std::max<int64_t>(a.reserve, int64_t(a.tokens.size())) + 1));
    r.tokens.assign(a.tokens.begin(), a.tokens.end());
    r.prompt_len = a.prompt_len;
    r.reserve = a.reserve;
    r.blocks.clear();
    r.blocks.reserve(size_t(a.max_blocks));
    r.params = a.params;
    r.seed = a.seed;
    r.sample_index = a.sample_index;
    r.state_slot = a.state_slot;
    r.window_from = a.window_from;
    r.cached_until = a.cached_until;
    r.images = a.images;
    r.drafts.assign(size_t(draft_block_), 0);
    r.confidence.assign(size_t(draft_block_), 0.0f);
    r.draft_base = -1;
    r.drafts_sampled = false;
    r.forced = nullptr;
    r.grammar.reset();
    if (a.grammar) {
      r.grammar = std::make_unique<Row::Grammar>();
      r.grammar->grammar = a.grammar;
      r.grammar->mask.resize(size_t((vocab_ + 31) / 32));
    }
    if (!forced_.empty()) {
      const auto it = forced_.find(std::vector<int32_t>(r.tokens.begin(), r.tokens.begin() + r.prompt_len));
      if (it != forced_.end()) r.forced = &it->second;
    }
  }
  for (const BlockFill& f : plan.fills) cache_.write_block(f.block, f.data.data());
  cache_.copy_blocks(plan.copies);
  for (auto [src, dst] : plan.state_copies) cache_.copy_state(src, dst);
}

const uint32_t* Executor::grammar_mask(const Row& row, std::span<const int32_t> history) {
  if (!row.grammar) return nullptr;
  Row::Grammar& g = *row.grammar;
  const std::span<const int32_t> out = history.subspan(size_t(row.prompt_len));
  if (!g.c)
    g.c = std::make_unique<structured::Constraint>(g.grammar, row.params.structured.trigger, grammar_rollback_);
  size_t common = 0;
  while (common < g.fed.size() && common < out.size() && g.fed[common] == out[common]) ++common;
  if (const size_t back = g.fed.size() - common; back > 0) {
    if (int64_t(back) <= g.c->rollback_available()) {
      g.c->rollback(int(back));
    } else {  // past what it can undo: replay from the start
      g.c = std::make_unique<structured::Constraint>(g.grammar, row.params.structured.trigger, grammar_rollback_);
      common = 0;
    }
    g.fed.resize(common);
  }
  // Outputs after an EOS the grammar took are past the sequence's end; the engine drops them.
  for (size_t i = g.fed.size(); i < out.size() && !g.c->is_terminated(); ++i) {
    GANNET_CHECK(g.c->accept_token(out[i]), "structured output: output token ", out[i], " at position ", i,
                 " is outside the grammar");
    g.fed.push_back(out[i]);
  }
  if (g.c->is_terminated()) return nullptr;
  g.c->fill_next_token_bitmask(g.mask);
  return g.mask.data();
}

void Executor::run(const StepPlan& plan, StepResult* out) {
  const auto t0 = std::chrono::steady_clock::now();
  StepResult& result = *out;
  result.clear();
  result.step_id = plan.step_id;
  result.draft_seconds = 0;
  result.idle = plan.idle;
  apply_changes(plan);
  if (plan.rows.empty()) {
    if (lockstep_ && plan.lockstep && lockstep_->any(false)) model_.forward_idle(pool_);
    return;
  }
  GANNET_CHECK(plan.num_tokens <= max_tokens_ && plan.num_logit_rows <= max_logit_rows_);
  GANNET_CHECK(plan.rows.size() <= attn_seqs_.size());

  // Flatten: tokens of each planned row, in plan order, from the rows' own histories.
  const size_t n_rows = plan.rows.size();
  planned_.resize(n_rows);
  first_row_.resize(n_rows);
  last_row_.resize(n_rows);
  start_.resize(n_rows);
  count_.resize(n_rows);
  tok0_.assign(n_rows, 0);
  seq_of_.assign(n_rows, -1);
  choose_depths(plan);
  int64_t n = 0, rows = 0, n_seqs = 0;  // n_seqs: rows with positions to compute
  bool any_image = false;
  for (size_t i = 0; i < n_rows; ++i) {
    const PlanRow& s = plan.rows[i];
    auto it = rows_.find(s.seq_id);
    GANNET_CHECK(it != rows_.end(), "plan row for sequence ", s.seq_id, " that the executor does not hold");
    Row& row = it->second;
    GANNET_CHECK(row.epoch == s.epoch, "sequence ", s.seq_id, " planned at epoch ", s.epoch, ", row at ", row.epoch);
    if (s.table_offset >= 0) {
      GANNET_CHECK(s.table_from <= int64_t(row.blocks.size()), "table update from ", s.table_from, " of ",
                   row.blocks.size());
      row.blocks.resize(size_t(s.table_from));
      row.blocks.insert(row.blocks.end(), plan.tables.begin() + s.table_offset,
                        plan.tables.begin() + s.table_offset + s.table_len);
    }
    int64_t start = s.start, count = s.count;
    if (s.spec_k >= 0) {
      // Speculative decode: from this row's own last token (steps before may have accepted
      // drafts the plan could not know of), with drafts appended to the history until
      // verification keeps or drops them. Never past max_tokens.
      start = int64_t(row.tokens.size()) - 1;
      if (int64_t(row.tokens.size()) >= row.reserve) {
        // The row already holds every token the request may produce (the plan could not
        // know how many drafts the steps before accepted): nothing to compute. The engine
        // ends the sequence on the earlier result, so this one's is stale when it arrives.
        start_[i] = start;
        count_[i] = 0;
        planned_[i] = &row;
        first_row_[i] = rows;
        last_row_[i] = rows - 1;
        continue;
      }
      const int64_t k = std::clamp<int64_t>(row.reserve - int64_t(row.tokens.size()) - 1, 0, s.spec_k);
      if (row.forced) {
        // Benchmarks' forced drafts: the known continuation from here.
        draft_.clear();
        const int64_t from = int64_t(row.tokens.size()) - row.prompt_len;
        for (int64_t t = 0; t < std::min<int64_t>(k, depth_[i]) && from + t < int64_t(row.forced->size()); ++t)
          draft_.push_back((*row.forced)[size_t(from + t)]);
      } else if (draft_block_ > 0) {
        // The drafter's block, made when this row's last token was produced (none after a
        // preemption or a fork until the row's first step has run).
        draft_.clear();
        if (row.draft_base == int64_t(row.tokens.size()))
          draft_.assign(row.drafts.begin(),
                        row.drafts.begin() + std::min<int64_t>({k, draft_block_, int64_t(depth_[i])}));
      } else {
        const auto d0 = std::chrono::steady_clock::now();
        sampling::ngram_draft(row.tokens, int(k), ngram_, &draft_);
        result.draft_seconds += std::chrono::duration<double>(std::chrono::steady_clock::now() - d0).count();
      }
      row.tokens.insert(row.tokens.end(), draft_.begin(), draft_.end());
      count = 1 + int64_t(draft_.size());
      GANNET_CHECK(start + count <= int64_t(row.blocks.size()) * cache_.block_size(), "sequence ", s.seq_id,
                   ": speculative row reaches position ", start + count, " past its blocks");
    }
    GANNET_CHECK(start + count <= int64_t(row.tokens.size()), "sequence ", s.seq_id, " planned to ", start + count,
                 " with ", row.tokens.size(), " tokens");
    start_[i] = start;
    count_[i] = count;
    planned_[i] = &row;
    kernels::AttentionSeq& as = attn_seqs_[size_t(n_seqs)];
    as.block_table = row.blocks.data();
    as.state_slot = row.state_slot;
    as.replay_from = replay_keep_ > 0 ? std::max<int64_t>(0, row.prompt_len - replay_keep_) : 0;
    as.window_from = row.window_from;
    as.cached_until = row.cached_until;
    first_row_[i] = rows;
    tok0_[i] = n;
    seq_of_[i] = n_seqs;
    // Logit rows: every position of a prompt-logprobs or speculative row, else the last
    // position when it samples.
    const int64_t row_logits = s.prompt_logprobs || s.spec_k >= 0 ? count : (s.num_samples && count ? 1 : 0);
    GANNET_CHECK(n + count <= max_tokens_ && rows + row_logits <= max_logit_rows_, "step of ", n + count,
                 " tokens (at most ", max_tokens_, ") and ", rows + row_logits, " logit rows (at most ",
                 max_logit_rows_, ")");
    // Image spans this step computes: each image is encoded at its first such step (the
    // rows are kept with the request for re-computation after preemption or a cache hit).
    const model::ImageSpans* spans = row.images.get();
    if (spans)
      for (model::ImageSpan& sp : *row.images)
        if (sp.start < start + count && sp.start + sp.length > start && sp.rows.empty()) {
          sp.rows = model_.encode_image(sp.pixels.data(), sp.grid_h, sp.grid_w, pool_);
          std::vector<float>().swap(sp.pixels);
        }
    for (int64_t j = 0; j < count; ++j) {
      const float* e = nullptr;
      if (spans)
        for (const model::ImageSpan& sp : *spans)
          if (start + j >= sp.start && start + j < sp.start + sp.length) {
            e = sp.rows.data() + (start + j - sp.start) * (int64_t(sp.rows.size()) / sp.length);
            any_image = true;
          }
      embeds_[size_t(n)] = e;
      ids_[size_t(n)] = row.tokens[size_t(start + j)];
      pos_[size_t(n)] = int32_t(start + j);
      tok_seq_[size_t(n)] = int32_t(n_seqs);
      if (s.prompt_logprobs || s.spec_k >= 0 || (s.num_samples && j == count - 1))
        logit_rows_[size_t(rows++)] = int32_t(n);
      ++n;
    }
    last_row_[i] = rows - 1;
    ++n_seqs;
  }
  model::Batch b;
  b.n_tokens = n;
  b.token_ids = ids_.data();
  b.positions = pos_.data();
  b.token_seq = tok_seq_.data();
  b.n_seqs = int32_t(n_seqs);
  b.seqs = attn_seqs_.data();
  b.n_logits = rows;
  b.logit_rows = logit_rows_.data();
  b.embeds = any_image ? embeds_.data() : nullptr;
  if (lockstep_ && plan.lockstep) {
    const bool any = lockstep_->any(n > 0);
    if (n > 0) model_.forward(b, cache_.views(), logits_.data(), pool_);
    else if (any) model_.forward_idle(pool_);
  } else {
    GANNET_CHECK(!lockstep_ || n == 0, "a forward of ", n, " tokens outside the ranks' lock-step");
    if (n > 0) model_.forward(b, cache_.views(), logits_.data(), pool_);
  }

  // Lay out the result: each row's samples, prompt logprobs and top-N lists get fixed
  // places first, so the rows can then be filled in parallel.
  result.rows.resize(n_rows);
  int64_t n_samples = 0, n_prompt = 0, n_top = 0;
  for (size_t i = 0; i < n_rows; ++i) {
    const PlanRow& s = plan.rows[i];
    const Row& row = *planned_[i];
    RowResult& r = result.rows[i];
    r.seq_id = s.seq_id;
    r.epoch = s.epoch;
    r.count = count_[i];
    r.first_prompt_pos = s.start + 1;  // logits row j predicts position start + j + 1
    r.spec_k = s.spec_k;
    r.spec_drafted = s.spec_k >= 0 ? int(std::max<int64_t>(0, count_[i] - 1)) : 0;
    r.spec_has_conf = draft_block_ > 0 && r.spec_drafted > 0;
    for (int j = 0; r.spec_has_conf && j < std::min<int>(r.spec_drafted, 16); ++j)
      r.spec_conf[size_t(j)] = row.confidence[size_t(j)];
    r.prompt_lp_offset = n_prompt;
    r.prompt_lp_len = s.prompt_logprobs ? std::max<int64_t>(0, std::min(s.count, row.prompt_len - 1 - s.start)) : 0;
    n_prompt += r.prompt_lp_len;
    n_top += r.prompt_lp_len * row.params.prompt_logprobs.value_or(0);
    r.sample_offset = n_samples;
    // A speculative row may keep every verified row's sample; it sets its count below.
    r.num_samples = s.spec_k >= 0 ? int(count_[i]) : s.num_samples;
    n_samples += r.num_samples;
    n_top += int64_t(r.num_samples) * row.params.logprobs.value_or(0);
  }
  result.samples.resize(size_t(n_samples));
  result.prompt_lps.resize(size_t(n_prompt));
  result.top.resize(size_t(n_top));
  // Top-N offsets, in the same order the rows are filled below.
  int64_t top = 0;
  for (size_t i = 0; i < n_rows; ++i) {
    const RowResult& r = result.rows[i];
    const int64_t pn = planned_[i]->params.prompt_logprobs.value_or(0), sn = planned_[i]->params.logprobs.value_or(0);
    for (int64_t j = 0; j < r.prompt_lp_len; ++j, top += pn) result.prompt_lps[size_t(r.prompt_lp_offset + j)].top_offset = top;
    for (int k = 0; k < r.num_samples; ++k, top += sn) result.samples[size_t(r.sample_offset + k)].top_offset = top;
  }

  // Sample (and gather logprobs) row by row; each row depends only on its own inputs,
  // so the rows can be spread over threads.
  auto work = [this, &plan, &result](int64_t begin, int64_t end, int thread) {
    sampling::Sampler& sampler = samplers_[size_t(thread)];
    sampling::SampleOutput& o = sample_outs_[size_t(thread)];
    auto put = [&result](const sampling::SampleOutput& so, SampledToken& t) {
      t.token = so.token;
      t.logprob = so.logprob;
      t.top_len = int(so.top.size());
      for (size_t q = 0; q < so.top.size(); ++q) result.top[size_t(t.top_offset) + q] = {so.top[q].id, so.top[q].logprob};
    };
    for (int64_t i = begin; i < end; ++i) {
      const PlanRow& s = plan.rows[size_t(i)];
      const Row& row = *planned_[size_t(i)];
      const RowResult& r = result.rows[size_t(i)];
      const int top_n = int(row.params.prompt_logprobs.value_or(0));
      for (int64_t j = 0; j < r.prompt_lp_len; ++j) {
        const float* lg = logits_.data() + (first_row_[size_t(i)] + j) * vocab_;
        sampler.prompt_logprobs(lg, row.tokens[size_t(s.start + j + 1)], top_n, &o);
        put(o, result.prompt_lps[size_t(r.prompt_lp_offset + j)]);
      }
      if (s.num_samples == 0 || count_[size_t(i)] == 0) continue;
      if (s.spec_k >= 0) {
        // Verification (sampling/speculative.h): each row samples as plain decoding would at
        // its output position; drafts are kept while the samples equal them.
        RowResult& rr = result.rows[size_t(i)];
        sampling::SampleInput in;
        in.params = &row.params;
        in.seed = row.seed;
        in.stream = uint64_t(row.sample_index);
        in.eos_ids = eos_ids_;
        auto emit = [&](int64_t j, const sampling::SampleOutput& so) {
          put(so, result.samples[size_t(rr.sample_offset + j)]);
        };
        const float* lg = logits_.data() + first_row_[size_t(i)] * vocab_;
        const int64_t st = start_[size_t(i)];
        auto before = [&](int64_t j, sampling::SampleInput& si) {
          si.allowed = grammar_mask(row, std::span<const int32_t>(row.tokens.data(), size_t(st + j + 1)));
        };
        const int kept =
            row.drafts_sampled
                ? sampling::verify_sampled_drafts(sampler, rejection_scratch_[size_t(thread)], in, lg,
                                                  row.draft_logits.data(), vocab_, row.tokens, row.prompt_len, st,
                                                  count_[size_t(i)], &o, emit, before)
                : sampling::verify_point_drafts(sampler, in, lg, vocab_, row.tokens, row.prompt_len, st,
                                                count_[size_t(i)], &o, emit, before);
        rr.num_samples = kept;
        continue;
      }
      const float* lg = logits_.data() + last_row_[size_t(i)] * vocab_;
      // The history the sample follows: everything before position start + count.
      const std::span<const int32_t> all(row.tokens.data(), size_t(s.start + s.count));
      const uint32_t* allowed = grammar_mask(row, all);  // the same for each of n samples
      for (int k = 0; k < s.num_samples; ++k) {
        sampling::SampleInput in;
        in.logits = lg;
        in.params = &row.params;
        in.seed = row.seed;
        in.stream = uint64_t(s.num_samples > 1 ? k : row.sample_index);
        in.position = uint64_t(s.start + s.count - row.prompt_len);
        in.prompt_ids = all.subspan(0, size_t(row.prompt_len));
        in.output_ids = all.subspan(size_t(row.prompt_len));
        in.eos_ids = eos_ids_;
        in.allowed = allowed;
        sampler.sample(in, &o);
        put(o, result.samples[size_t(r.sample_offset + k)]);
      }
    }
  };
  if (pool_) pool_->parallel_for(int64_t(n_rows), work);
  else work(0, int64_t(n_rows), 0);

  // The next decode of each row starts from the token it sampled now (the first sample;
  // forked samples get rows of their own from the scheduler).
  for (size_t i = 0; i < n_rows; ++i) {
    const PlanRow& s = plan.rows[i];
    if (s.num_samples == 0 || count_[i] == 0) continue;
    Row& row = *planned_[i];
    const RowResult& r = result.rows[i];
    if (s.spec_k >= 0) {  // the last token, the accepted drafts (equal to their samples), the next
      row.tokens.resize(size_t(start_[i] + 1));
      for (int k = 0; k < r.num_samples; ++k) row.tokens.push_back(result.samples[size_t(r.sample_offset + k)].token);
      continue;
    }
    row.tokens.resize(size_t(s.start + s.count));
    row.tokens.push_back(result.samples[size_t(r.sample_offset)].token);
  }
  if (draft_block_ > 0 && n > 0) run_drafter(plan, b, result);
  if (!step_seconds_.empty() && n > 0 && n <= int64_t(step_seconds_.size())) {
    // What a step costs beyond the profile's forward of n tokens (drafting, which runs
    // whatever is verified, and the attention over each sequence's context), smoothed:
    // varlen weighs each draft's cost against the whole step's.
    const double spent = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    fixed_seconds_ = 0.8 * fixed_seconds_ + 0.2 * std::max(0.0, spent - step_seconds_[size_t(n - 1)]);
  }
}

void Executor::choose_depths(const StepPlan& plan) {
  const size_t n_rows = plan.rows.size();
  depth_.assign(n_rows, 1 << 20);
  if (step_seconds_.empty() || draft_block_ == 0) return;
  // Rows verifying drafts compete for the step's tokens; every other row's tokens are fixed.
  vconf_.clear();
  vrow_.clear();
  int64_t other = 0;
  for (size_t i = 0; i < n_rows; ++i) {
    const PlanRow& s = plan.rows[i];
    const auto it = rows_.find(s.seq_id);
    if (it == rows_.end()) continue;
    const Row& row = it->second;
    const int64_t len = int64_t(row.tokens.size());
    if (s.spec_k < 0 || row.draft_base != len || len >= row.reserve) {
      other += s.spec_k >= 0 ? (len >= row.reserve ? 0 : 1) : s.count;
      continue;
    }
    const int64_t kmax = std::min<int64_t>({std::clamp<int64_t>(row.reserve - len - 1, 0, s.spec_k), draft_block_});
    vconf_.emplace_back(row.confidence.begin(), row.confidence.begin() + kmax);
    vrow_.push_back(i);
  }
  if (vrow_.empty()) return;
  int64_t total = int64_t(vrow_.size());
  for (const auto& c : vconf_) total += int64_t(c.size());
  vsec_.clear();
  for (int64_t b = 1; b <= total && other + b <= int64_t(step_seconds_.size()); ++b)
    vsec_.push_back(step_seconds_[size_t(other + b - 1)] + fixed_seconds_);
  if (vsec_.size() < vrow_.size()) return;  // past the profile: verify everything
  for (auto& c : vconf_)
    for (double& x : c) x = std::clamp(x, 0.0, 1.0);
  const std::vector<int> d = choose_verify_depths(vconf_, vsec_);
  for (size_t j = 0; j < vrow_.size(); ++j) depth_[vrow_[j]] = d[j];
}

void Executor::run_drafter(const StepPlan& plan, const model::Batch& b, StepResult& result) {
  const auto d0 = std::chrono::steady_clock::now();
  draft_jobs_.clear();
  choosers_.clear();
  for (size_t i = 0; i < plan.rows.size(); ++i) {
    if (count_[i] == 0 || seq_of_[i] < 0) continue;
    const PlanRow& s = plan.rows[i];
    Row& row = *planned_[i];
    const RowResult& r = result.rows[i];
    model::DraftJob j;
    j.seq = int32_t(seq_of_[i]);
    j.row0 = tok0_[i];
    j.pos0 = start_[i];
    // A verify step keeps its last token's row and the accepted drafts' rows.
    j.n = s.spec_k >= 0 ? std::min<int64_t>(count_[i], r.num_samples) : count_[i];
    row.draft_base = -1;
    // A row that sampled drafts after its new token; a recomputed sequence's last chunk,
    // which stops before its last token (Scheduler::recompute_to_decode), after that one.
    const bool sampled = s.num_samples > 0 && r.num_samples > 0;
    if ((sampled || s.num_samples == 0) && int64_t(row.tokens.size()) == j.pos0 + j.n + 1) {
      j.token = row.tokens.back();
      j.drafts = row.drafts.data();
      j.confidence = row.confidence.data();
      row.draft_base = int64_t(row.tokens.size());
      row.drafts_sampled = rejection_ && row.params.temperature > 0 && !row.forced;
      if (row.drafts_sampled) {
        row.draft_logits.resize(size_t(draft_block_ * vocab_));
        j.draft_logits = row.draft_logits.data();
        choosers_.push_back({&row, {}});
      }
    }
    if (j.n > 0) draft_jobs_.push_back(j);
  }
  // Sampled drafting: each such job's chooser draws its drafts from q in turn (sampling/
  // speculative.h), with the history the verification will see.
  choose_fns_.clear();
  size_t c = 0;
  for (const model::DraftJob& j : draft_jobs_) {
    if (!j.draft_logits) continue;
    DraftChooser* ch = &choosers_[c++];
    ch->hist = ch->row->tokens;
    choose_fns_.push_back([this, ch](int64_t, const float* logits) {
      const Row& r = *ch->row;
      sampling::SampleInput in;
      in.logits = logits;
      in.params = &r.params;
      in.seed = r.seed;
      in.stream = uint64_t(r.sample_index);
      in.position = uint64_t(int64_t(ch->hist.size()) - r.prompt_len);
      in.prompt_ids = std::span<const int32_t>(ch->hist.data(), size_t(r.prompt_len));
      in.output_ids = std::span<const int32_t>(ch->hist.data() + r.prompt_len, ch->hist.size() - size_t(r.prompt_len));
      in.eos_ids = eos_ids_;
      in.allowed = grammar_mask(r, ch->hist);
      const int32_t t = sampling::draw_draft(samplers_[0], in);
      ch->hist.push_back(t);
      return t;
    });
  }
  c = 0;
  for (model::DraftJob& j : draft_jobs_)
    if (j.draft_logits) j.choose = &choose_fns_[c++];
  model_.draft(b, draft_jobs_.data(), int64_t(draft_jobs_.size()), cache_.views(), pool_);
  for (size_t i = 0; i < plan.rows.size(); ++i)  // forced drafts are certain
    if (count_[i] > 0 && planned_[i]->forced) std::fill(planned_[i]->confidence.begin(), planned_[i]->confidence.end(), 1.0f);
  result.draft_seconds += std::chrono::duration<double>(std::chrono::steady_clock::now() - d0).count();
}

}  // namespace gannet::engine
