// DeepseekV4ForCausalLM behind the engine's Model interface: each sequence runs over its
// state slot and its pages of compressed entries (model.h); all of a step's sequences in
// one forward.
#include <map>
#include <memory>

#include "core/error.h"
#include "core/dtype.h"
#include "model/deepseek_v4/model.h"
#include "model/deepseek_v4/tensor_plan.h"
#include "model/model.h"

namespace gannet::model {

namespace {

using deepseek_v4::DeepseekV4;

class DeepseekV4Model final : public Model {
 public:
  DeepseekV4Model(const io::ModelConfig& cfg, const io::Checkpoint& ckpt)
      : cfg_(cfg), m_(cfg, ckpt) {}
  const io::ModelConfig& config() const override { return cfg_; }
  CacheSpec cache_spec() const override { return m_.cache_spec(); }
  ExpertParallel* expert_parallel() override { return m_.expert_parallel(); }
  void forward_idle(ThreadPool* pool) override { m_.forward_idle(pool); }
  void reserve(int64_t max_tokens, int64_t max_logits) override {
    hidden_.resize(size_t(max_tokens * cfg_.hidden_size));
    rows_.resize(size_t(max_logits * cfg_.hidden_size));
  }
  void forward(const Batch& b, const CacheViews& cache, float* logits, ThreadPool* pool) override {
    GANNET_CHECK(!b.embeds, "image rows for a model without vision");
    const int64_t n = b.n_tokens, d = cfg_.hidden_size;
    if (int64_t(hidden_.size()) < n * d) hidden_.resize(size_t(n * d));
    if (int64_t(rows_.size()) < b.n_logits * d) rows_.resize(size_t(b.n_logits * d));
    arenas_.resize(size_t(m_.compressed_layers()));
    for (int64_t i = 0; i < m_.compressed_layers(); ++i) {
      const auto [g, l] = m_.arena_of(i);
      arenas_[size_t(i)] = &cache.groups[size_t(g)][size_t(l)];
    }
    // Each sequence's tokens are consecutive in the batch, at consecutive positions; one
    // forward for all of them.
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
      DeepseekV4::Chunk c;
      c.pos0 = b.positions[at];
      c.n = end - at;
      c.row0 = at;
      c.window_from = seq.window_from;
      c.write_from = seq.cached_until;
      chunks_.push_back(c);
      at = end;
    }
    for (size_t i = 0; i < chunks_.size(); ++i) chunks_[i].m = &mems_[i];
    m_.forward_batch(chunks_, b.token_ids, n, hidden_.data(), pool);
    for (int64_t r = 0; r < b.n_logits; ++r)
      std::copy_n(hidden_.data() + int64_t(b.logit_rows[r]) * d, d, rows_.data() + r * d);
    if (b.n_logits) m_.logits(rows_.data(), b.n_logits, logits, pool);
  }
  // Bytes one decode token reads (tensor_plan.h): everything but the routed experts, plus
  // num_experts_per_tok of them per layer and one embedding and routing-table row; by the
  // stored dtype.
  std::map<std::string, uint64_t> weight_bytes_by_format() const override {
    std::map<std::string, uint64_t> m;
    const auto& c = m_.config();
    const double share = double(c.num_experts_per_tok) / double(c.n_routed_experts);
    for (const auto& t : deepseek_v4::tensor_plan(c)) {
      double read = double(t.bytes);
      if (t.routed_expert) read *= share;
      else if (t.name == "embed.weight" || t.int_range > 0) read /= double(c.vocab_size);
      m[std::string(dtype_name(t.dtype))] += uint64_t(read);
    }
    return m;
  }
  uint64_t weight_bytes() const override { return deepseek_v4::size_summary(m_.config()).read_bytes_per_token; }
  // V4 has no decoder bounded replay: replay_from is always 0 here.
  int64_t prefix_replay_start(int64_t hit, int64_t replay_from) const override {
    GANNET_CHECK(replay_from == 0, "bounded replay on DeepSeek-V4");
    return m_.prefix_replay_start(hit);
  }
  // Window rings and open compressor groups: a function of the tokens up to `at`.
  bool state_restorable(int64_t at, int64_t replay_from) const override {
    (void)at, (void)replay_from;
    return true;
  }
  uint64_t output_weight_bytes() const override {
    return uint64_t(m_.config().vocab_size) * uint64_t(m_.config().hidden_size) * 2;  // head.weight, BF16
  }

 private:
  io::ModelConfig cfg_;
  DeepseekV4 m_;
  std::vector<float> hidden_, rows_;
  std::vector<const kernels::CacheArena*> arenas_;
  std::vector<deepseek_v4::SeqMem> mems_;
  std::vector<DeepseekV4::Chunk> chunks_;
};

}  // namespace

std::unique_ptr<Model> make_deepseek_v4(const io::ModelConfig& cfg, const io::Checkpoint& ckpt) {
  return std::make_unique<DeepseekV4Model>(cfg, ckpt);
}

}  // namespace gannet::model
