// DeepseekV41ForCausalLM behind the engine's Model interface: each sequence of a batch
// runs over its state slot and its pages of compressed entries (model.h); logits only for
// the rows asked for.
#include <map>
#include <memory>
#include <string>

#include "core/error.h"
#include "model/deepseek_v41/model.h"
#include "model/model.h"

namespace gannet::model {

namespace {

using deepseek_v41::DeepseekV41;

class DeepseekV41Model final : public Model {
 public:
  DeepseekV41Model(const io::ModelConfig& cfg, const io::Checkpoint& ckpt) : cfg_(cfg), m_(cfg, ckpt) {}

  const io::ModelConfig& config() const override { return cfg_; }
  ExpertParallel* expert_parallel() override { return m_.expert_parallel(); }
  void forward_idle(ThreadPool* pool) override { m_.forward_idle(pool); }
  CacheSpec cache_spec() const override { return m_.cache_spec(); }

  int64_t image_span_tokens(int64_t grid_h, int64_t grid_w) const override {
    return m_.vision() ? m_.vision()->span_tokens(grid_h, grid_w) : -1;
  }
  std::vector<float> encode_image(const float* pixels, int64_t grid_h, int64_t grid_w, ThreadPool* pool) const override {
    if (!m_.vision()) return Model::encode_image(pixels, grid_h, grid_w, pool);
    return m_.vision()->encode(pixels, grid_h, grid_w, pool);
  }

  void reserve(int64_t max_tokens, int64_t max_logits) override {
    hidden_.resize(size_t(max_tokens * cfg_.hidden_size));
    rows_.resize(size_t(max_logits * cfg_.hidden_size));
    if (m_.dspark_enabled()) capture_.resize(size_t(max_tokens * m_.capture_width()));
  }

  void forward(const Batch& b, const CacheViews& cache, float* logits, ThreadPool* pool) override {
    const int64_t n = b.n_tokens, d = cfg_.hidden_size;
    if (int64_t(hidden_.size()) < n * d) hidden_.resize(size_t(n * d));
    if (int64_t(rows_.size()) < b.n_logits * d) rows_.resize(size_t(b.n_logits * d));
    if (m_.dspark_enabled() && int64_t(capture_.size()) < n * m_.capture_width())
      capture_.resize(size_t(n * m_.capture_width()));
    const int64_t sources = int64_t(m_.config().kv_source_layer_ids.size());
    arenas_.resize(size_t(sources));
    for (int64_t i = 0; i < sources; ++i) {
      const auto [g, l] = m_.source_arena(i);
      GANNET_CHECK(g < int64_t(cache.groups.size()) && l < int64_t(cache.groups[size_t(g)].size()), "cache views");
      arenas_[size_t(i)] = &cache.groups[size_t(g)][size_t(l)];
    }
    // Each sequence's tokens are consecutive in the batch, at consecutive positions.
    mems_.clear();
    chunks_.clear();
    for (int64_t at = 0; at < n;) {
      const int32_t s = b.token_seq[at];
      int64_t end = at + 1;
      while (end < n && b.token_seq[end] == s) ++end;
      for (int64_t i = at + 1; i < end; ++i)
        GANNET_CHECK(b.positions[i] == b.positions[i - 1] + 1, "positions of a sequence must be consecutive");
      const kernels::AttentionSeq& seq = b.seqs[s];
      GANNET_CHECK(seq.state_slot >= 0 && seq.state_slot < cache.num_state_slots, "sequence without a state slot");
      mems_.push_back({cache.state_slot(seq.state_slot), seq.block_table, arenas_.data()});
      DeepseekV41::Chunk c;
      c.pos0 = b.positions[at];
      c.n = end - at;
      c.row0 = at;
      c.replay_from = seq.replay_from;
      c.window_from = seq.window_from;
      c.write_from = seq.cached_until;
      chunks_.push_back(c);
      at = end;
    }
    for (size_t i = 0; i < chunks_.size(); ++i) chunks_[i].m = &mems_[i];
    m_.forward_batch(chunks_, b.token_ids, n, hidden_.data(), pool, m_.dspark_enabled() ? capture_.data() : nullptr,
                     b.embeds);
    for (int64_t r = 0; r < b.n_logits; ++r)
      std::copy_n(hidden_.data() + int64_t(b.logit_rows[r]) * d, d, rows_.data() + r * d);
    if (b.n_logits) m_.logits(rows_.data(), b.n_logits, logits, pool);
  }

  // Bytes one decode token reads: everything but the routed experts and the Engram
  // tables, plus num_experts_per_tok experts per layer and the Engram rows it looks up.
  std::map<std::string, uint64_t> weight_bytes_by_format() const override {
    std::map<std::string, uint64_t> m;
    const auto& c = m_.config();
    auto add = [&](const kernels::PackedWeight& w, double share = 1.0) {
      if (w.n) m[kernels::weight_format_name(w.format)] += uint64_t(double(w.bytes()) * share);
    };
    const auto& W = m_.weights();
    add(W.embed, 1.0 / double(c.vocab_size));
    add(W.head);
    for (const auto& lw : W.layers) {
      for (const auto* w : {&lw.hc_attn.fn, &lw.hc_ffn.fn, &lw.wq_a, &lw.wq_b, &lw.wkv, &lw.wo_a, &lw.wo_b, &lw.comp_wkv,
                            &lw.comp_wgate, &lw.idx_wk, &lw.idx_wq_b, &lw.idx_weights_proj, &lw.moe.router})
        add(*w);
      for (const auto& e : lw.moe.shared) add(e.w1), add(e.w2), add(e.w3);
      const double share = double(c.num_experts_per_tok) / double(c.n_routed_experts);
      for (const auto& e : lw.moe.experts) add(e.w1, share), add(e.w2, share), add(e.w3, share);
      if (const ExpertParallel* ep = m_.expert_parallel())  // this rank's slots
        for (int64_t s = 0; s < ep->slots(); ++s) {
          const MoeExpert& e = ep->slot_weights(&lw - W.layers.data(), s);
          if (e.w1.data) add(e.w1, share), add(e.w2, share), add(e.w3, share);
        }
      if (lw.has_engram) {
        add(lw.engram.wkv);
        const double rows = double((c.engram_max_ngram_size - 1) * c.engram_n_heads);
        add(lw.engram.table, rows / double(lw.engram.table.n));
      }
    }
    return m;
  }
  uint64_t weight_bytes() const override {
    uint64_t t = 0;
    for (auto& [k, v] : weight_bytes_by_format()) t += v;
    return t;
  }
  uint64_t output_weight_bytes() const override { return m_.weights().head.bytes(); }

  int64_t prefix_replay_start(int64_t hit, int64_t replay_from) const override {
    return m_.prefix_replay_start(hit, replay_from);
  }
  // The layers up to the last KV source (with their compressors), the Engram history and
  // the drafter's rings hold a function of the tokens up to `at`. The decoder layers after
  // the last source, under bounded replay, attend nothing before replay_from: their rings
  // are never read when the snapshot ends at or before it, whatever the saving sequence
  // left there.
  bool state_restorable(int64_t at, int64_t replay_from) const override {
    return replay_from == 0 || at <= replay_from;
  }
  int64_t draft_block() const override { return m_.dspark_enabled() ? m_.dspark_block() : 0; }
  void draft(const Batch& last, const DraftJob* jobs, int64_t n_jobs, const CacheViews& cache,
             ThreadPool* pool) override {
    GANNET_CHECK(m_.dspark_enabled(), "drafting without the DSpark drafter enabled");
    const int64_t cw = m_.capture_width();
    draft_mems_.resize(size_t(n_jobs));
    draft_jobs_.resize(size_t(n_jobs));
    for (int64_t i = 0; i < n_jobs; ++i) {
      const DraftJob& j = jobs[i];
      GANNET_CHECK(j.seq >= 0 && j.seq < last.n_seqs && j.row0 >= 0 && j.row0 + j.n <= last.n_tokens, "draft job rows");
      const kernels::AttentionSeq& seq = last.seqs[j.seq];
      draft_mems_[size_t(i)] = {cache.state_slot(seq.state_slot), seq.block_table, arenas_.data()};
      DeepseekV41::DraftJob& d = draft_jobs_[size_t(i)];
      d = {};
      d.m = &draft_mems_[size_t(i)];
      d.main_hidden = capture_.data() + j.row0 * cw;
      d.seed_n = j.n;
      d.seed_pos0 = j.pos0;
      d.p = j.pos0 + j.n - 1;
      d.lo = seq.replay_from;
      d.token = j.token;
      d.drafts = j.drafts;
      d.confidence = j.confidence;
      d.draft_logits = j.draft_logits;
      d.choose = j.choose;
    }
    m_.dspark(draft_jobs_, pool);
  }

 private:
  io::ModelConfig cfg_;
  DeepseekV41 m_;
  std::vector<float> hidden_, rows_, capture_;  // capture_: the DSpark targets of the last forward
  std::vector<deepseek_v41::SeqMem> draft_mems_;
  std::vector<DeepseekV41::DraftJob> draft_jobs_;
  std::vector<const kernels::CacheArena*> arenas_;
  std::vector<deepseek_v41::SeqMem> mems_;
  std::vector<DeepseekV41::Chunk> chunks_;
};

}  // namespace

std::unique_ptr<Model> make_deepseek_v41(const io::ModelConfig& cfg, const io::Checkpoint& ckpt) {
  return std::make_unique<DeepseekV41Model>(cfg, ckpt);
}

}  // namespace gannet::model
