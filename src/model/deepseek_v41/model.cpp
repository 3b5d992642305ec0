#include "model/deepseek_v41/model.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>

#include <filesystem>

#include "core/error.h"
#include "kernels/cpu/activations.h"
#include "kernels/cpu/fake_quant.h"
#include "kernels/cpu/matmul.h"
#include "kernels/cpu/packed_matmul.h"
#include "kernels/cpu/parallel_grain.h"
#include "kernels/cpu/rmsnorm.h"
#include "model/deepseek_v41/chunk_tasks.h"
#include "model/deepseek_v41/index_scores.h"
#include "model/deepseek_v41/mhc.h"
#include "model/deepseek_v41/topk.h"
#include "model/rope_params.h"
#include "tokenizer/engram_map.h"
#include "tokenizer/tokenizer.h"

namespace gannet::model::deepseek_v41 {

namespace {

constexpr float kNegInf = -std::numeric_limits<float>::infinity();


MoeScoring scoring_of(const std::string& s) {
  if (s == "softmax") return MoeScoring::kSoftmax;
  if (s == "sigmoid") return MoeScoring::kSigmoid;
  return MoeScoring::kSqrtSoftplus;
}

// x [rows, n] = FQ8 of each row in blocks of `block` (power-of-two scales) when n is a
// multiple of block, as the reference (which leaves other widths unquantized).
void fq8_rows(float* x, int64_t rows, int64_t n, int64_t block) {
  if (n % block) return;
  for (int64_t r = 0; r < rows; ++r) kernels::fake_quant_fp8(x + r * n, n, block, true);
}
void fq4_rows(float* x, int64_t rows, int64_t n, int64_t block) {
  if (n % block) return;
  for (int64_t r = 0; r < rows; ++r) kernels::fake_quant_fp4(x + r * n, n, block);
}


}  // namespace

// What the index sources of one forward publish for the layers after them: each query's
// selected compressed entries (indices into the entries of `source`), and the candidate
// source's per-query mask of allowed entries.
struct DeepseekV41::Shared {
  bool has_topk = false;
  std::vector<std::vector<int32_t>> topk;  // [n][selected]
  bool has_cand = false;
  std::vector<std::vector<uint8_t>> cand;  // [n][entries]
};

DeepseekV41::DeepseekV41(const io::ModelConfig& cfg, const io::Checkpoint& ckpt) {
  GANNET_CHECK(cfg.deepseek_v41 != nullptr, "DeepseekV41 needs a parsed DeepSeek-V4.1 config");
  c_ = *cfg.deepseek_v41;
  act_quant_ = cfg.exact_activations;
  if (cfg.quantize_at_load != io::WeightQuantization::Method::kNone)
    fail(ckpt.dir(), ": --quantize applies to dense models; DeepSeek-V4.1 checkpoints are already FP8/MXFP4");
  for (int64_t l : c_.kv_source_layer_ids)
    if (!c_.is_index_source(l))
      fail(ckpt.dir(), ": config.json: KV source layer ", l,
           " is not in index_source_layer_ids (its layers would have no top-k over its entries)");
  if (cfg.ep_size > 1) {
    ExpertParallelOptions o;
    o.redundant = cfg.ep_redundant;
    o.eplb_interval = cfg.eplb_interval;
    o.eplb_window = cfg.eplb_window;
    ep_ = std::make_unique<ExpertParallel>(cfg.ep_rank, cfg.ep_size, c_.n_routed_experts, c_.num_hidden_layers, o);
  }
  w_ = load_weights(c_, ckpt, ep_.get());
  if (c_.vision.present) {
    vw_ = std::make_unique<VisionWeights>(load_vision_weights(c_, ckpt));
    vision_ = std::make_unique<VisionEncoder>(c_, *vw_);
  }
  auto moe_config = [&](int64_t experts, int64_t top_k) {
    MoeConfig mc;
    mc.hidden = c_.hidden_size;
    mc.n_experts = experts;
    mc.top_k = top_k;
    mc.n_shared = c_.n_shared_experts;
    mc.scoring = scoring_of(c_.scoring_func);
    mc.norm_topk_prob = c_.norm_topk_prob;
    mc.routed_scaling_factor = float(c_.routed_scaling_factor);
    mc.swiglu_limit = float(c_.swiglu_limit);
    mc.gate_temp = float(c_.gate_temp);
    mc.act_quant_block = act_quant_ ? 32 : 0;
    return mc;
  };
  if (ep_) {
    for (int64_t l = 0; l < c_.num_hidden_layers; ++l) {
      MoeWeights& mw = w_.layers[size_t(l)].moe;
      for (size_t j = 0; j < mw.experts.size(); ++j) ep_->set_expert(l, mw.expert_ids[j], mw.experts[j]);
      mw.experts.clear();
      mw.expert_ids.clear();
    }
    ep_->finish_loading();
    for (int64_t l = 0; l < c_.num_hidden_layers; ++l)
      moe_.emplace_back(moe_config(c_.n_routed_experts, c_.num_experts_per_tok), w_.layers[size_t(l)].moe, ep_.get(), l);
  } else {
    for (const LayerWeights& lw : w_.layers)
      moe_.emplace_back(moe_config(c_.n_routed_experts, c_.num_experts_per_tok), lw.moe);
  }
  if (cfg.dspark) {
    if (!w_.has_dspark)
      fail("--speculative dspark: ", ckpt.dir(), " has no DSpark drafter (num_nextn_predict_layers = ",
           c_.num_nextn_predict_layers, ", ", w_.mtp_tensors, " mtp.* tensors)");
    if (c_.dspark_noise_token_id < 0 || c_.dspark_noise_token_id >= c_.vocab_size)
      fail(ckpt.dir(), ": config.json: dspark_noise_token_id ", c_.dspark_noise_token_id, " is outside the vocabulary (",
           c_.vocab_size, ")");
    if (c_.dspark_target_layer_ids.empty()) fail(ckpt.dir(), ": config.json: dspark_target_layer_ids is empty");
    if (cfg.speculative_tokens > c_.dspark_block_size)
      fail("--num-speculative-tokens ", cfg.speculative_tokens, ": the DSpark drafter proposes dspark_block_size = ",
           c_.dspark_block_size, " tokens per step");
    for (const LayerWeights& lw : w_.dspark.stages)
      dspark_moe_.emplace_back(moe_config(c_.dspark_n_routed_experts, c_.dspark_num_experts_per_tok), lw.moe);
  }
  // Engram's compressed token map comes from the checkpoint's tokenizer; without one, the
  // identity map is the only one that fits, when the compressed vocabulary is the vocabulary.
  if (!c_.engram_layer_ids.empty()) {
    const std::filesystem::path tj = std::filesystem::path(ckpt.dir()) / "tokenizer.json";
    if (std::filesystem::exists(tj)) {
      const tokenizer::Tokenizer tok = tokenizer::Tokenizer::from_dir(ckpt.dir());
      int64_t keys = 0;
      token_map_ = tokenizer::engram_compressed_map(tok, &keys);
      if (keys != c_.engram_compressed_vocab_size)
        fail(ckpt.dir(), ": the tokenizer's Engram map has ", keys, " distinct keys but engram_compressed_vocab_size is ",
             c_.engram_compressed_vocab_size, " (every hash would land elsewhere in the tables)");
      // Ids past the tokenizer's (padded vocabulary rows) hash as the pad token.
      const int64_t pad = c_.engram_pad_id < int64_t(token_map_.size()) ? token_map_[size_t(c_.engram_pad_id)] : 0;
      token_map_.resize(static_cast<size_t>(c_.vocab_size), pad);
    } else {
      if (c_.engram_compressed_vocab_size != c_.vocab_size)
        fail(ckpt.dir(), ": engram_compressed_vocab_size (", c_.engram_compressed_vocab_size, ") differs from vocab_size (",
             c_.vocab_size, ") and there is no tokenizer.json to build the Engram token map from");
      token_map_.resize(static_cast<size_t>(c_.vocab_size));
      for (int64_t i = 0; i < c_.vocab_size; ++i) token_map_[size_t(i)] = i;
    }
    engram_ = make_engram_layout(c_, token_map_);
  }
  rope_main_ = kernels::RopeTable(int(c_.qk_rope_head_dim), c_.rope_theta, c_.max_position_embeddings);
  rope_compress_ = kernels::RopeTable(int(c_.qk_rope_head_dim), c_.compress_rope_theta, c_.max_position_embeddings,
                                      rope_scaling_params(c_.compress_scaling));
  lay_ = make_cache_layout(c_, cfg.speculative_tokens, cfg.dspark ? c_.num_nextn_predict_layers : 0);
  for (int64_t l : c_.kv_source_layer_ids) last_src_ = std::max(last_src_, l);
}

CacheLayout make_cache_layout(const io::DeepseekV41Config& c, int64_t spec, int64_t dspark_stages) {
  CacheLayout lay;
  GANNET_CHECK(spec >= 0, "speculative tokens ", spec);
  lay.window_ring = c.sliding_window + spec;
  lay.history_ring = (c.engram_layer_ids.empty() ? 1 : c.engram_max_ngram_size) + spec;
  lay.open_ring.assign(size_t(c.num_hidden_layers), 0);
  // Cached forms: packed where the model's fake quantization applies (the width is a
  // multiple of its block), else f32 as the reference then leaves the values.
  const int64_t L = c.num_hidden_layers, D = c.head_dim, idh = c.index_head_dim;
  lay.win_packed = D % 32 == 0;
  lay.kv_packed = D % 16 == 0;
  lay.key_packed = idh % 32 == 0;
  lay.win_bytes = lay.win_packed ? D + D / 32 : D * 4;
  lay.kv_bytes = lay.kv_packed ? D / 2 + D / 16 : D * 4;
  lay.key_bytes = lay.key_packed ? idh / 2 + idh / 32 : idh * 4;
  int64_t off = 0;
  lay.window_off.assign(size_t(L), 0);
  lay.open_off.assign(size_t(L), -1);
  lay.source_index.assign(size_t(L), -1);
  for (int64_t l = 0; l < L; ++l) {
    lay.window_off[size_t(l)] = off;
    off += (lay.window_ring * lay.win_bytes + 7) / 8 * 8;
  }
  for (int64_t l = 0; l < L; ++l) {
    if (!c.is_kv_source(l)) continue;
    const int64_t m = c.compress_ratios[size_t(l)];
    if (m > 1) {
      // The open group [g0, L) must survive positions up to L - 1 + spec: at least
      // spec + m - 1 slots, in whole groups so a group's slots stay contiguous.
      const int64_t ring = (spec + m - 1 + m - 1) / m * m;
      lay.open_ring[size_t(l)] = std::max(m, ring);
      lay.open_off[size_t(l)] = off;
      off += 2 * lay.open_ring[size_t(l)] * D * 4;  // kv then gate, open_ring slots each
    }
    int64_t g = -1;
    for (size_t i = 0; i < lay.group_ratio.size(); ++i)
      if (lay.group_ratio[i] == m) g = int64_t(i);
    if (g < 0) {
      g = int64_t(lay.group_ratio.size());
      lay.group_ratio.push_back(m);
    }
    int64_t layer_in_group = 0;
    for (auto [gg, ll] : lay.source_arena) layer_in_group += gg == g;
    lay.source_index[size_t(l)] = int64_t(lay.source_arena.size());
    lay.source_arena.push_back({g, layer_in_group});
  }
  lay.history_off = off;
  off += lay.history_ring * 8;
  for (int64_t k = 0; k < dspark_stages; ++k) {
    lay.dspark_off.push_back(off);
    off += (lay.window_ring * lay.win_bytes + 7) / 8 * 8;
  }
  lay.state_bytes = (off + 63) / 64 * 64;
  for (size_t g = 0; g < lay.group_ratio.size(); ++g) {
    int64_t layers = 0;
    for (auto [gg, ll] : lay.source_arena) layers += gg == int64_t(g);
    lay.spec.groups.push_back({"compressed kv + index keys (ratio " + std::to_string(lay.group_ratio[g]) + ")", layers,
                               lay.kv_bytes + lay.key_bytes, lay.group_ratio[g],
                               lay.kv_packed || lay.key_packed ? kernels::CacheFormat::kMixed : kernels::CacheFormat::kF32});
  }
  lay.spec.state_bytes_per_seq = lay.state_bytes;
  return lay;
}

SeqState DeepseekV41::new_state(int64_t capacity) const {
  SeqState st;
  st.state.assign(size_t(lay_.state_bytes), 0);
  const int64_t n = int64_t(lay_.source_arena.size());
  st.arena_mem.resize(size_t(n));
  st.arenas.resize(size_t(n));
  for (int64_t i = 0; i < n; ++i) {
    const int64_t m = lay_.group_ratio[size_t(lay_.source_arena[size_t(i)].first)];
    const int64_t block = (capacity + m - 1) / m * m;
    const int64_t bytes = lay_.kv_bytes + lay_.key_bytes;
    st.arena_mem[size_t(i)].assign(size_t(block / m * bytes), 0);
    kernels::CacheArena& a = st.arenas[size_t(i)];
    a.base = st.arena_mem[size_t(i)].data();
    a.block_stride = block / m * bytes;
    a.entry_stride = bytes;
    a.tokens_per_entry = m;
    a.block_size = int(block);
  }
  for (auto& a : st.arenas) st.arena_ptrs.push_back(&a);
  return st;
}

void DeepseekV41::mm_many(const float* x, int64_t rows, std::span<const kernels::PackedProduct> ps,
                          ThreadPool* pool) const {
  if (act_quant_) {
    for (const kernels::PackedProduct& p : ps) mm(x, rows, *p.w, p.y, pool);
    return;
  }
  kernels::matmul_packed_many(x, rows, ps, pool);
}

void DeepseekV41::mm(const float* x, int64_t rows, const kernels::PackedWeight& w, float* y, ThreadPool* pool) const {
  if (act_quant_ && (w.format == kernels::WeightFormat::kFp8Block || w.format == kernels::WeightFormat::kMxfp4)) {
    std::vector<float> xq(x, x + rows * w.k);
    fq8_rows(xq.data(), rows, w.k, 32);
    kernels::matmul_packed(xq.data(), rows, w, y, pool);
    return;
  }
  kernels::matmul_packed(x, rows, w, y, pool);
}

uint8_t* DeepseekV41::window(const SeqMem& m, int64_t l) const { return m.state + lay_.window_off[size_t(l)]; }
float* DeepseekV41::open_kv(const SeqMem& m, int64_t l) const {
  return reinterpret_cast<float*>(m.state + lay_.open_off[size_t(l)]);
}
float* DeepseekV41::open_gate(const SeqMem& m, int64_t l) const {
  return open_kv(m, l) + lay_.open_ring[size_t(l)] * c_.head_dim;
}
int64_t* DeepseekV41::history(const SeqMem& m) const { return reinterpret_cast<int64_t*>(m.state + lay_.history_off); }
uint8_t* DeepseekV41::entry(const SeqMem& m, int64_t l_src, int64_t e) const {
  return m.entries[lay_.source_index[size_t(l_src)]]->entry(m.block_table, e);
}

void DeepseekV41::store_window(uint8_t* slot, const float* kv) const {
  const int64_t D = c_.head_dim;
  if (lay_.win_packed) kernels::pack_fp8_pow2(kv, D, 32, slot, slot + D);
  else std::memcpy(slot, kv, size_t(D) * 4);
}
void DeepseekV41::load_window(const uint8_t* slot, float* kv) const {
  const int64_t D = c_.head_dim;
  if (lay_.win_packed) kernels::unpack_fp8_pow2(slot, slot + D, D, 32, kv);
  else std::memcpy(kv, slot, size_t(D) * 4);
}
void DeepseekV41::store_entry(uint8_t* e, const float* kv, const float* key) const {
  const int64_t D = c_.head_dim, idh = c_.index_head_dim;
  if (lay_.kv_packed) kernels::pack_fp4_e4m3_scale(kv, D, 16, e, e + D / 2);
  else std::memcpy(e, kv, size_t(D) * 4);
  uint8_t* k = e + lay_.kv_bytes;
  if (lay_.key_packed) kernels::pack_fp4(key, idh, 32, k, k + idh / 2);
  else std::memcpy(k, key, size_t(idh) * 4);
}
void DeepseekV41::load_entry_kv(const uint8_t* e, float* kv) const {
  const int64_t D = c_.head_dim;
  if (lay_.kv_packed) kernels::unpack_fp4_e4m3_scale(e, e + D / 2, D, 16, kv);
  else std::memcpy(kv, e, size_t(D) * 4);
}
void DeepseekV41::load_entry_key(const uint8_t* e, float* key) const {
  const int64_t idh = c_.index_head_dim;
  const uint8_t* k = e + lay_.kv_bytes;
  if (lay_.key_packed) kernels::unpack_fp4(k, k + idh / 2, idh, 32, key);
  else std::memcpy(key, k, size_t(idh) * 4);
}

void DeepseekV41::compress(int64_t l, const Chunk& ch, const float* kv, const float* gate, ThreadPool* pool) const {
  const LayerWeights& lw = w_.layers[size_t(l)];
  const SeqMem& mem = *ch.m;
  const int64_t n = ch.n, D = c_.head_dim, ratio = c_.compress_ratios[size_t(l)], idh = c_.index_head_dim;
  const float eps = float(c_.rms_norm_eps);
  std::vector<float> latent;       // [groups, D] pooled, then normalized
  std::vector<int64_t> entry_ids;  // entry index of each group closed by this chunk
  if (ratio == 1) {
    latent.resize(size_t(n * D));
    kernels::rmsnorm(kv, lw.comp_norm.data(), latent.data(), n, D, eps);
    for (int64_t i = 0; i < n; ++i) entry_ids.push_back(ch.pos0 + i);
  } else {
    float* okv = open_kv(mem, l);
    float* ogate = open_gate(mem, l);
    std::vector<float> pooled;
    const int64_t ring = lay_.open_ring[size_t(l)];
    for (int64_t i = 0; i < n; ++i) {
      const int64_t p = ch.pos0 + i, slot = p % ring;
      std::memcpy(okv + slot * D, kv + i * D, size_t(D) * 4);
      std::memcpy(ogate + slot * D, gate + i * D, size_t(D) * 4);
      if (p % ratio != ratio - 1) continue;
      // The group [p - ratio + 1, p] closes: softmax over its slots, per channel.
      pooled.resize(pooled.size() + size_t(D));
      float* out = pooled.data() + pooled.size() - size_t(D);
      const float* gkv = okv + (slot - (ratio - 1)) * D;  // from the group's first slot
      const float* ggate = ogate + (slot - (ratio - 1)) * D;
      for (int64_t c = 0; c < D; ++c) {
        float mx = kNegInf;
        for (int64_t j = 0; j < ratio; ++j) mx = std::max(mx, ggate[j * D + c]);
        float e[8], sum = 0.0f;
        for (int64_t j = 0; j < ratio; ++j) {
          e[j] = std::exp(ggate[j * D + c] - mx);
          sum += e[j];
        }
        float acc = 0.0f;
        for (int64_t j = 0; j < ratio; ++j) acc += (e[j] / sum) * gkv[j * D + c];
        out[c] = acc;
      }
      entry_ids.push_back(p / ratio);
    }
    latent.resize(pooled.size());
    kernels::rmsnorm(pooled.data(), lw.comp_norm.data(), latent.data(), int64_t(entry_ids.size()), D, eps);
  }
  const int64_t groups = int64_t(entry_ids.size());
  if (groups == 0) return;
  std::vector<int32_t> pos(static_cast<size_t>(groups));
  for (int64_t g = 0; g < groups; ++g) pos[size_t(g)] = int32_t(entry_ids[size_t(g)] * ratio);
  // Index keys from the latent before its RoPE: k_norm(wk latent), RoPE.
  std::vector<float> k(size_t(groups * idh)), kn(size_t(groups * idh));
  kernels::matmul_packed(latent.data(), groups, lw.idx_wk, k.data(), pool);
  kernels::rmsnorm(k.data(), lw.idx_k_norm.data(), kn.data(), groups, idh, eps);
  kernels::apply_rope(kn.data(), groups, 1, int(idh), pos.data(), rope_compress_, true, int(idh - c_.qk_rope_head_dim));
  // Main entries: RoPE at the group's first position. Storing applies FQ4 / 32 to the key
  // and FQ4 with E4M3 scales / 16 to the entry.
  kernels::apply_rope(latent.data(), groups, 1, int(D), pos.data(), rope_compress_, true, int(D - c_.qk_rope_head_dim));
  for (int64_t g = 0; g < groups; ++g)  // prefix-cache replay: cached entries stay as they are
    if ((entry_ids[size_t(g)] + 1) * ratio > ch.write_from)
      store_entry(entry(mem, l, entry_ids[size_t(g)]), latent.data() + g * D, kn.data() + g * idh);
}

void DeepseekV41::index(int64_t l, const Chunk& ch, const float* q, const float* wts, Shared& sh,
                        ThreadPool* pool) const {
  const SeqMem& mem = *ch.m;
  const int64_t src = c_.kv_source_of(l), n = ch.n;
  const int64_t ratio = c_.compress_ratios[size_t(l)], E = (ch.pos0 + n) / ratio;
  if (E == 0) return;  // nothing to score yet: what earlier sources published stands
  const int64_t nih = c_.index_n_heads, idh = c_.index_head_dim;
  const float softmax_scale = 1.0f / std::sqrt(float(idh)), heads_scale = 1.0f / std::sqrt(float(nih));
  const bool is_cand_src = l == c_.candidate_source_layer_id;
  const bool use_cand = !is_cand_src && c_.candidate_source_layer_id >= 0 && c_.candidate_source_layer_id < l && sh.has_cand;
  const bool threads = pool && pool->size() > 1 && n * E * nih * idh >= kernels::kMinParallelMacs;
  std::vector<float> keys_t(static_cast<size_t>(E * idh));
  // Entries [e0, e1): their keys, transposed.
  auto unpack = [&](int64_t e0, int64_t e1) {
    std::vector<float> key(static_cast<size_t>(idh));
    for (int64_t e = e0; e < e1; ++e) {
      load_entry_key(entry(mem, src, e), key.data());
      for (int64_t c = 0; c < idh; ++c) keys_t[size_t(c * E + e)] = key[size_t(c)];
    }
  };
  if (is_cand_src) {
    sh.cand.assign(size_t(n), {});
    sh.has_cand = true;
  }
  sh.topk.assign(size_t(n), {});
  // Row i's selection from its scores sc (E of them).
  auto select = [&](int64_t i, float* sc) {
    const int64_t visible = (ch.pos0 + i + 1) / ratio;
    if (is_cand_src) {
      // Blocks of B entries scored by their best member; the block holding the newest
      // visible entry always kept; the best topk_blocks blocks with a finite score.
      const int64_t B = c_.candidate_block_size, nb = (E + B - 1) / B;
      std::vector<float> bs(size_t(nb), kNegInf);
      for (int64_t e = 0; e < E; ++e) bs[size_t(e / B)] = std::max(bs[size_t(e / B)], sc[size_t(e)]);
      if (visible >= 1) bs[size_t((visible - 1) / B)] = std::numeric_limits<float>::infinity();
      std::vector<uint8_t>& mask = sh.cand[size_t(i)];
      mask.assign(size_t(E), 0);
      for (int32_t b : top_k_lower_index(bs.data(), nb, c_.candidate_topk_blocks))
        if (bs[size_t(b)] > kNegInf)
          for (int64_t e = b * B; e < std::min(E, (b + 1) * B); ++e) mask[size_t(e)] = 1;
    } else if (use_cand) {
      const std::vector<uint8_t>& mask = sh.cand[size_t(i)];
      for (int64_t e = 0; e < E; ++e)
        if (e >= int64_t(mask.size()) || !mask[size_t(e)]) sc[size_t(e)] = kNegInf;
    }
    for (int32_t e : top_k_lower_index(sc, E, c_.index_topk))
      if (sc[size_t(e)] > kNegInf) sh.topk[size_t(i)].push_back(e);
  };
  // Rows [i0, i1): scores over every entry, then the selection (each row writes only its
  // own topk and cand entries).
  auto rows = [&](int64_t i0, int64_t i1) {
    std::vector<float> dots(static_cast<size_t>(E)), sc(static_cast<size_t>(E));
    for (int64_t i = i0; i < i1; ++i) {
      index_scores(q + i * nih * idh, wts + i * nih, nih, idh, keys_t.data(), E, (ch.pos0 + i + 1) / ratio,
                   softmax_scale, heads_scale, dots.data(), sc.data());
      select(i, sc.data());
    }
  };
  if (threads && n == 1) {  // decode: each task unpacks and scores a range of entries
    std::vector<float> dots(static_cast<size_t>(E)), sc(static_cast<size_t>(E));
    const int64_t visible = (ch.pos0 + 1) / ratio;
    pool->parallel_for(
        E,
        [&](int64_t e0, int64_t e1, int) {
          unpack(e0, e1);
          index_scores(q, wts, nih, idh, keys_t.data() + e0, E, e1 - e0, visible - e0, softmax_scale, heads_scale,
                       dots.data() + e0, sc.data() + e0);
        },
        8);
    select(0, sc.data());
  } else if (threads) {  // every row needs every key: all unpacked first, then rows split
    pool->parallel_for(E, [&](int64_t b, int64_t e, int) { unpack(b, e); }, 8);
    pool->parallel_for(n, [&](int64_t b, int64_t e, int) { rows(b, e); });
  } else {
    unpack(0, E);
    rows(0, n);
  }
  sh.has_topk = true;
}

void DeepseekV41::attention(int64_t l, const std::vector<Chunk>& chunks, const int32_t* pos, const float* a,
                            int64_t rows, std::vector<Shared>& shared, float* out, ThreadPool* pool) const {
  const LayerWeights& lw = w_.layers[size_t(l)];
  const int64_t N = rows;
  const int64_t D = c_.head_dim, H = c_.num_attention_heads, R = c_.qk_rope_head_dim, W = c_.sliding_window;
  const int64_t ratio = c_.compress_ratios[size_t(l)];
  const float eps = float(c_.rms_norm_eps);
  const kernels::RopeTable& rope = ratio ? rope_compress_ : rope_main_;

  // Projections of every row at once, those of one input in one parallel region.
  const bool comp = ratio && c_.is_kv_source(l), idx = ratio && c_.is_index_source(l);
  const int64_t nih = c_.index_n_heads, idh = c_.index_head_dim;
  std::vector<float> qa(size_t(N * c_.q_lora_rank)), qr(qa.size()), q(size_t(N * H * D));
  std::vector<float> kv0(size_t(N * D)), kv(size_t(N * D)), ckv(comp ? size_t(N * D) : 0),
      cgate(comp && ratio > 1 ? size_t(N * D) : 0), iq(idx ? size_t(N * nih * idh) : 0), iw(idx ? size_t(N * nih) : 0);
  std::vector<kernels::PackedProduct> on_a, on_qr;
  on_a.reserve(5);
  on_qr.reserve(2);
  on_a.push_back({&lw.wq_a, qa.data()});
  on_a.push_back({&lw.wkv, kv0.data()});
  if (act_quant_) {  // these two take mm's quantized x, the others plain x
    mm_many(a, N, on_a, pool);
    on_a.clear();
  }
  if (comp) on_a.push_back({&lw.comp_wkv, ckv.data()});
  if (comp && ratio > 1) on_a.push_back({&lw.comp_wgate, cgate.data()});
  if (idx) on_a.push_back({&lw.idx_weights_proj, iw.data()});
  kernels::matmul_packed_many(a, N, on_a, pool);
  kernels::rmsnorm(qa.data(), lw.q_norm.data(), qr.data(), N, c_.q_lora_rank, eps);
  on_qr.push_back({&lw.wq_b, q.data()});
  if (idx) on_qr.push_back({&lw.idx_wq_b, iq.data()});
  mm_many(qr.data(), N, on_qr, pool);
  kernels::apply_rope(q.data(), N, int(H), int(D), pos, rope, true, int(D - R));
  kernels::rmsnorm(kv0.data(), lw.kv_norm.data(), kv.data(), N, D, eps);
  kernels::apply_rope(kv.data(), N, 1, int(D), pos, rope, true, int(D - R));
  fq8_rows(kv.data(), N, D, 32);
  if (comp)
    for (const Chunk& ch : chunks)
      compress(l, ch, ckv.data() + ch.row0 * D, ratio > 1 ? cgate.data() + ch.row0 * D : nullptr, pool);
  // Decode and verify steps of several sequences: the indexer and the attention run a task
  // per sequence (each writes only its own rows, its Shared entry and its window ring).
  const bool per_chunk = one_task_per_chunk(chunks, pool);
  if (idx) {
    kernels::apply_rope(iq.data(), N, int(nih), int(idh), pos, rope_compress_, true, int(idh - R));
    fq4_rows(iq.data(), N * nih, idh, 32);
    auto index_chunks = [&](int64_t b, int64_t e, ThreadPool* inner) {
      for (int64_t ci = b; ci < e; ++ci) {
        const Chunk& ch = chunks[size_t(ci)];
        index(l, ch, iq.data() + ch.row0 * nih * idh, iw.data() + ch.row0 * nih, shared[size_t(ci)], inner);
      }
    };
    if (per_chunk)
      pool->parallel_for(int64_t(chunks.size()), [&](int64_t b, int64_t e, int) { index_chunks(b, e, nullptr); });
    else
      index_chunks(0, int64_t(chunks.size()), pool);
  }

  // Attention per query over its window and its selected compressed entries, read from
  // the cache in f32: the ring positions before the chunk, the entries selected.
  std::vector<float> o(size_t(N * H * D), 0.0f);
  const float scale = 1.0f / std::sqrt(float(D));
  struct Scratch {
    std::vector<float> past, ents, kbuf, sbuf;
    std::vector<int32_t> ublock, slot_of;  // slot_of: entry -> row of `ents`, -1 until loaded
    std::vector<std::vector<int32_t>> cols;  // per query of a block: its key rows in kbuf
  };
  // One chunk; with `inner`, each query block's (query, head) rows are split over the pool
  // (one sequence's decode or prefill). Several decode chunks run one chunk per task
  // instead. Each row's scores, softmax and weighted sum are the same either way.
  auto attend_chunk = [&](size_t ci, ThreadPool* inner) {
    thread_local Scratch tls;
    Scratch& S = tls;  // this thread's, also for the pool's threads running `rows` below
    const Chunk& ch = chunks[ci];
    const SeqMem& mem = *ch.m;
    const Shared& sh = shared[ci];
    const int64_t n = ch.n, pos0 = ch.pos0;
    const int64_t src = ratio ? c_.kv_source_of(l) : -1, entries = ratio ? (pos0 + n) / ratio : 0;
    // Bounded replay: a decoder layer's window holds nothing before replay_from; a
    // prefix-cache replay's windows nothing before window_from.
    const int64_t lo = std::max(l > last_src_ ? ch.replay_from : 0, ch.window_from);
    uint8_t* ring = window(mem, l);
    const int64_t RW = lay_.window_ring;
    if (int64_t(S.past.size()) < W * D) S.past.resize(size_t(W * D));
    for (int64_t kp = std::max<int64_t>(lo, pos0 - W + 1); kp < pos0; ++kp)
      load_window(ring + (kp % RW) * lay_.win_bytes, S.past.data() + (kp % W) * D);
    S.slot_of.clear();
    S.ents.clear();
    if (src >= 0 && sh.has_topk && entries > 0) {
      S.slot_of.assign(size_t(entries), -1);
      for (int64_t i = 0; i < n; ++i)
        for (int32_t e : sh.topk[size_t(i)])
          if (e < entries && S.slot_of[size_t(e)] < 0) {
            S.slot_of[size_t(e)] = int32_t(S.ents.size() / size_t(D));
            S.ents.resize(S.ents.size() + size_t(D));
            load_entry_kv(entry(mem, src, e), S.ents.data() + S.ents.size() - size_t(D));
          }
    }
    const float* ckv = kv.data() + ch.row0 * D;
    // Queries in blocks: the block's keys (its window span, then the union of its queries'
    // entries) are gathered once and scored with one canonical f32 product per row; each
    // query then takes its own keys, in position order then entry order.
    constexpr int64_t kQB = 16;
    for (int64_t i0 = 0; i0 < n; i0 += kQB) {
      const int64_t i1 = std::min(n, i0 + kQB), nq = i1 - i0;
      const int64_t kmin = std::max<int64_t>(lo, pos0 + i0 - W + 1), kmax = pos0 + i1 - 1;
      const int64_t nw = std::max<int64_t>(0, kmax - kmin + 1);  // 0: every query before replay_from
      std::vector<int32_t>& ublock = S.ublock;
      ublock.clear();
      if (!S.slot_of.empty())
        for (int64_t i = i0; i < i1; ++i)
          for (int32_t e : sh.topk[size_t(i)])
            if (e < entries) ublock.push_back(e);
      std::sort(ublock.begin(), ublock.end());
      ublock.erase(std::unique(ublock.begin(), ublock.end()), ublock.end());
      const int64_t nk = nw + int64_t(ublock.size());
      S.kbuf.resize(size_t(nk * D));
      for (int64_t kp = kmin; kp <= kmax; ++kp)
        std::memcpy(S.kbuf.data() + (kp - kmin) * D, kp >= pos0 ? ckv + (kp - pos0) * D : S.past.data() + (kp % W) * D,
                    size_t(D) * 4);
      for (size_t u = 0; u < ublock.size(); ++u)
        std::memcpy(S.kbuf.data() + (nw + int64_t(u)) * D, S.ents.data() + int64_t(S.slot_of[size_t(ublock[u])]) * D,
                    size_t(D) * 4);
      S.sbuf.resize(size_t(nq * H * nk));
      if (int64_t(S.cols.size()) < nq) S.cols.resize(size_t(nq));
      for (int64_t i = i0; i < i1; ++i) {
        std::vector<int32_t>& cols = S.cols[size_t(i - i0)];
        cols.clear();
        for (int64_t kp = std::max<int64_t>(lo, pos0 + i - W + 1); kp <= pos0 + i; ++kp)
          cols.push_back(int32_t(kp - kmin));
        if (!S.slot_of.empty())
          for (int32_t e : sh.topk[size_t(i)])
            if (e < entries)
              cols.push_back(int32_t(nw + (std::lower_bound(ublock.begin(), ublock.end(), e) - ublock.begin())));
      }
      const float* kb = S.kbuf.data();
      float* sb = S.sbuf.data();
      const float* qb = q.data() + (ch.row0 + i0) * H * D;
      // Rows [u0, u1) of the block, row u = query i0 + u / H, head u % H.
      auto rows = [&, i0, nk](int64_t u0, int64_t u1) {
        kernels::matmul_f32(qb + u0 * D, u1 - u0, D, kb, nk, sb + u0 * nk, nullptr);
        thread_local std::vector<float> sc;
        for (int64_t u = u0; u < u1; ++u) {
          const int64_t i = i0 + u / H, h = u % H;
          const std::vector<int32_t>& cols = S.cols[size_t(u / H)];
          sc.resize(cols.size());
          const float* srow = sb + u * nk;
          float mx = lw.attn_sink[size_t(h)];
          for (size_t j = 0; j < cols.size(); ++j) {
            sc[j] = srow[cols[j]] * scale;
            mx = std::max(mx, sc[j]);
          }
          float sum = std::exp(lw.attn_sink[size_t(h)] - mx);
          for (size_t j = 0; j < cols.size(); ++j) {
            sc[j] = std::exp(sc[j] - mx);
            sum += sc[j];
          }
          float* oh = o.data() + ((ch.row0 + i) * H + h) * D;
          for (size_t j = 0; j < cols.size(); ++j) sc[j] /= sum;
          kernels::add_weighted_rows(sc.data(), kb, cols.data(), int64_t(cols.size()), D, oh, D);
        }
      };
      const int64_t units = nq * H;
      if (inner && inner->size() > 1 && units * nk * D >= kernels::kMinParallelMacs)
        inner->parallel_for(units, [&](int64_t b, int64_t e, int) { rows(b, e); });
      else
        rows(0, units);
    }
    // The window ring keeps the last W positions.
    for (int64_t i = std::max<int64_t>(0, n - W); i < n; ++i)
      store_window(ring + ((pos0 + i) % RW) * lay_.win_bytes, ckv + i * D);
  };
  if (per_chunk)
    pool->parallel_for(int64_t(chunks.size()), [&](int64_t b, int64_t e, int) {
      for (int64_t ci = b; ci < e; ++ci) attend_chunk(size_t(ci), nullptr);
    });
  else
    for (size_t ci = 0; ci < chunks.size(); ++ci) attend_chunk(ci, pool);

  kernels::apply_rope(o.data(), N, int(H), int(D), pos, rope, true, int(D - R), /*inverse=*/true);
  // Grouped output projection (wo_a per head group, then wo_b over all groups).
  std::vector<float> z(size_t(N * c_.o_groups * c_.o_lora_rank));
  grouped_wo_a(lw.wo_a, o.data(), N, c_.o_groups, c_.o_lora_rank, z.data(), pool);
  mm(z.data(), N, lw.wo_b, out, pool);
}

void DeepseekV41::forward_seq(const SeqMem& m, const int32_t* tokens, int64_t n, int64_t pos0, float* hidden,
                              ThreadPool* pool) const {
  Chunk ch;
  ch.m = &m;
  ch.pos0 = pos0;
  ch.n = n;
  forward_batch({ch}, tokens, n, hidden, pool);
}

void DeepseekV41::forward_batch(const std::vector<Chunk>& chunks, const int32_t* tokens, int64_t N, float* hidden,
                                ThreadPool* pool, float* capture, const float* const* embeds) const {
  if (N <= 0) return;
  const int64_t d = c_.hidden_size, hc = c_.hc_mult;
  for (int64_t i = 0; i < N; ++i)
    if (tokens[i] < 0 || tokens[i] >= c_.vocab_size)
      fail("token id ", tokens[i], " is outside the vocabulary (", c_.vocab_size, ")");
  std::vector<int32_t> pos(static_cast<size_t>(N));
  int64_t covered = 0;
  for (const Chunk& ch : chunks) {
    GANNET_CHECK(ch.n > 0 && ch.row0 >= 0 && ch.row0 + ch.n <= N, "chunk rows");
    if (ch.pos0 < 0 || ch.pos0 + ch.n > c_.max_position_embeddings)
      fail("positions up to ", ch.pos0 + ch.n, " exceed max_position_embeddings (", c_.max_position_embeddings, ")");
    // A sequence (re)starts, or its prefix-cache replay does.
    if (ch.pos0 == 0 || (ch.window_from > 0 && ch.pos0 == ch.window_from))
      std::memset(ch.m->state, 0, size_t(lay_.state_bytes));
    for (int64_t i = 0; i < ch.n; ++i) pos[size_t(ch.row0 + i)] = int32_t(ch.pos0 + i);
    covered += ch.n;
  }
  GANNET_CHECK(covered == N, "chunks cover ", covered, " of ", N, " rows");
  std::vector<float> X(size_t(N * hc * d));
  // image [N]: 1 on image-span rows (their embedding comes from embeds).
  std::vector<uint8_t> image;
  if (embeds)
    for (int64_t i = 0; i < N; ++i)
      if (embeds[i]) {
        image.assign(size_t(N), 0);
        for (int64_t j = 0; j < N; ++j) image[size_t(j)] = embeds[j] != nullptr;
        break;
      }
  {
    std::vector<float> e(static_cast<size_t>(d));
    for (int64_t i = 0; i < N; ++i) {
      const float* row = e.data();
      if (!image.empty() && image[size_t(i)]) row = embeds[i];
      else w_.embed.dequant_row(tokens[i], e.data());
      for (int64_t k = 0; k < hc; ++k) std::memcpy(X.data() + (i * hc + k) * d, row, size_t(d) * 4);
    }
  }
  // Engram row ids per Engram layer [layers][N][cols], from each sequence's compressed
  // history (position p's id at p % max_ngram of its state).
  std::vector<std::vector<int64_t>> hash(c_.engram_layer_ids.size());
  if (!hash.empty()) {
    const int64_t NG = engram_.max_ngram, HR = lay_.history_ring;
    std::vector<int64_t> back(static_cast<size_t>(NG));
    for (auto& h : hash) h.resize(size_t(N * engram_.cols));
    for (const Chunk& ch : chunks) {
      int64_t* hist = history(*ch.m);
      for (int64_t i = 0; i < ch.n; ++i) {
        const int64_t p = ch.pos0 + i, row = ch.row0 + i;
        // An image-span position is DEAD (-1; compressed ids are >= 0): its own n-grams are
        // all padding, and a later position's n-grams stop where they reach it.
        hist[p % HR] = !image.empty() && image[size_t(row)] ? -1 : token_map_[size_t(tokens[row])];
        int64_t avail = std::min<int64_t>(NG, p + 1);
        for (int64_t s = 0; s < avail; ++s) {
          back[size_t(s)] = hist[(p - s) % HR];
          if (back[size_t(s)] < 0) avail = s;
        }
        for (size_t li = 0; li < hash.size(); ++li)
          engram_hash(engram_, int64_t(li), back.data(), avail, hash[li].data() + row * engram_.cols);
      }
    }
  }

  if (ep_) ep_->begin_forward();
  std::vector<float> pre(size_t(N * hc), 0.0f), a_pre(pre.size()), f_pre(pre.size());
  std::vector<float> post(size_t(N * hc)), comb(size_t(N * hc * hc));
  for (int64_t i = 0; i < N; ++i) pre[size_t(i * hc)] = 1.0f;  // the first collapse reads stream 0
  std::vector<float> col(size_t(N * d)), nrm(size_t(N * d)), y(size_t(N * d));
  MhcWorkspace mws;
  MoeWorkspace moe_ws;
  std::vector<Shared> sh(chunks.size());
  // Bounded replay: the decoder layers run on the kept rows only (all_rows maps them back).
  std::vector<Chunk> kept_chunks;
  std::vector<int64_t> kept_rows;  // row in the full batch of each kept row
  const std::vector<Chunk>* cur = &chunks;
  const int64_t N_all = N;
  bool replaying = false;
  for (const Chunk& ch : chunks) replaying |= ch.replay_from > ch.pos0;
  const int64_t cw = capture_width();
  if (capture && replaying && !replay_mask_only_)
    std::fill(capture, capture + N * cw, std::numeric_limits<float>::quiet_NaN());
  for (int64_t l = 0; l < c_.num_hidden_layers; ++l) {
    if (l == last_src_ + 1 && replaying && !replay_mask_only_) {
      for (size_t ci = 0; ci < chunks.size(); ++ci) {
        const Chunk& ch = chunks[ci];
        const int64_t skip = std::clamp<int64_t>(ch.replay_from - ch.pos0, 0, ch.n);
        // Indexer results are per query row: drop the skipped rows' entries.
        Shared& s = sh[ci];
        if (s.has_topk) s.topk.erase(s.topk.begin(), s.topk.begin() + std::min<int64_t>(skip, int64_t(s.topk.size())));
        if (s.has_cand) s.cand.erase(s.cand.begin(), s.cand.begin() + std::min<int64_t>(skip, int64_t(s.cand.size())));
        if (skip == ch.n) continue;
        Chunk k = ch;
        k.pos0 = ch.pos0 + skip;
        k.n = ch.n - skip;
        k.row0 = int64_t(kept_rows.size());
        for (int64_t i = skip; i < ch.n; ++i) kept_rows.push_back(ch.row0 + i);
        kept_chunks.push_back(k);
      }
      // Keep only the Shared entries of chunks that still have rows.
      std::vector<Shared> sh2;
      for (size_t ci = 0; ci < chunks.size(); ++ci)
        if (std::clamp<int64_t>(chunks[ci].replay_from - chunks[ci].pos0, 0, chunks[ci].n) < chunks[ci].n)
          sh2.push_back(std::move(sh[ci]));
      sh = std::move(sh2);
      const int64_t M = int64_t(kept_rows.size());
      auto compact = [&](std::vector<float>& v, int64_t width) {
        for (int64_t i = 0; i < M; ++i)
          std::memmove(v.data() + i * width, v.data() + kept_rows[size_t(i)] * width, size_t(width) * 4);
      };
      compact(X, hc * d);
      compact(pre, hc);
      if (!image.empty())
        for (int64_t i = 0; i < M; ++i) image[size_t(i)] = image[size_t(kept_rows[size_t(i)])];
      for (auto& h : hash)
        for (int64_t i = 0; i < M; ++i)
          std::memmove(h.data() + i * engram_.cols, h.data() + kept_rows[size_t(i)] * engram_.cols,
                       size_t(engram_.cols) * 8);
      for (int64_t i = 0; i < M; ++i) pos[size_t(i)] = pos[size_t(kept_rows[size_t(i)])];
      N = M;
      cur = &kept_chunks;
      if (N == 0) {
        // Nothing left to compute, but the other ranks' exchanges still need this one.
        for (int64_t l2 = l; ep_ && l2 < c_.num_hidden_layers; ++l2)
          moe_[size_t(l2)].forward(nullptr, 0, nullptr, moe_ws, pool);
        break;
      }
    }
    const std::vector<Chunk>& chunks_l = *cur;
    const LayerWeights& lw = w_.layers[size_t(l)];
    const uint8_t* img = image.empty() ? nullptr : image.data();
    if (lw.has_engram)
      engram_apply(c_, lw.engram, hash[size_t(c_.engram_index(l))].data(), X.data(), N, act_quant_, pool, img);
    if (capture)
      for (size_t t = 0; t < c_.dspark_target_layer_ids.size(); ++t) {
        if (c_.dspark_target_layer_ids[t] != l) continue;
        for (int64_t i = 0; i < N; ++i) {
          const int64_t row = cur == &chunks ? i : kept_rows[size_t(i)];
          float* out = capture + row * cw + int64_t(t) * d;
          const float* x = X.data() + i * hc * d;
          for (int64_t c = 0; c < d; ++c) {
            float acc = x[c];
            for (int64_t k = 1; k < hc; ++k) acc += x[k * d + c];
            out[c] = acc / float(hc);
          }
        }
      }
    mhc_mixes(c_, lw.hc_attn, X.data(), N, a_pre.data(), post.data(), comb.data(), mws, pool);
    mhc_collapse(X.data(), N, hc, d, pre.data(), col.data());
    kernels::rmsnorm(col.data(), lw.attn_norm.data(), nrm.data(), N, d, float(c_.rms_norm_eps));
    attention(l, chunks_l, pos.data(), nrm.data(), N, sh, y.data(), pool);
    mhc_expand(X.data(), N, hc, d, y.data(), post.data(), comb.data());
    mhc_mixes(c_, lw.hc_ffn, X.data(), N, f_pre.data(), post.data(), comb.data(), mws, pool);
    mhc_collapse(X.data(), N, hc, d, a_pre.data(), col.data());
    kernels::rmsnorm(col.data(), lw.ffn_norm.data(), nrm.data(), N, d, float(c_.rms_norm_eps));
    moe_[size_t(l)].forward(nrm.data(), N, y.data(), moe_ws, pool, nullptr, img);
    mhc_expand(X.data(), N, hc, d, y.data(), post.data(), comb.data());
    pre.swap(f_pre);
  }
  if (cur == &chunks) {
    mhc_collapse(X.data(), N, hc, d, pre.data(), col.data());
    kernels::rmsnorm(col.data(), w_.norm.data(), hidden, N, d, float(c_.rms_norm_eps));
    return;
  }
  std::fill(hidden, hidden + N_all * d, std::numeric_limits<float>::quiet_NaN());
  if (N == 0) return;
  mhc_collapse(X.data(), N, hc, d, pre.data(), col.data());
  kernels::rmsnorm(col.data(), w_.norm.data(), nrm.data(), N, d, float(c_.rms_norm_eps));
  for (int64_t i = 0; i < N; ++i) std::memcpy(hidden + kept_rows[size_t(i)] * d, nrm.data() + i * d, size_t(d) * 4);
}

void DeepseekV41::forward_idle(ThreadPool* pool) const {
  if (!ep_) return;
  ep_->begin_forward();
  MoeWorkspace ws;
  for (const MoeLayer& m : moe_) m.forward(nullptr, 0, nullptr, ws, pool);
}

int64_t DeepseekV41::prefix_replay_start(int64_t hit, int64_t replay_from) const {
  const int64_t W = c_.sliding_window, NG = c_.engram_layer_ids.empty() ? 1 : c_.engram_max_ngram_size;
  // Positions the window chains of `layers` layers (and the Engram history) need behind
  // the first position that must be exact; rounded up to an even position (ratio-2 groups
  // then close inside the replay).
  auto span = [&](int64_t layers) { return NG + layers * W; };
  // DSpark's rings need no more: they take the captured input residuals of target layers
  // (below the last layer) at the last W positions, at or after hit - W, which the replay
  // already makes exact (layer t's input is exact from s + NG + t * W); with bounded
  // replay the drafter attends nothing before replay_from.
  int64_t s = replay_from > 0 ? std::min(hit, replay_from) - span(last_src_ + 1) : hit - span(c_.num_hidden_layers);
  s = s / 2 * 2;  // toward 0: more replay, never less
  return s > 0 ? s : -1;
}

void DeepseekV41::logits(const float* hidden, int64_t rows, float* out, ThreadPool* pool) const {
  kernels::matmul_packed(hidden, rows, w_.head, out, pool);
}

void DeepseekV41::forward(SeqState& st, const int32_t* tokens, int64_t n, float* out, ThreadPool* pool,
                          int64_t replay_from, const float* const* embeds) const {
  if (n <= 0) return;
  const int64_t cap = int64_t(st.arenas.empty() ? c_.max_position_embeddings : st.arenas[0].block_size);
  if (st.pos + n > cap) fail("sequence state holds ", cap, " positions; ", st.pos + n, " asked");
  std::vector<float> hidden(size_t(n * c_.hidden_size));
  const SeqMem mem = st.mem();
  Chunk ch;
  ch.m = &mem;
  ch.pos0 = st.pos;
  ch.n = n;
  ch.replay_from = replay_from;
  forward_batch({ch}, tokens, n, hidden.data(), pool, nullptr, embeds);
  if (out) logits(hidden.data(), n, out, pool);
  st.pos += n;
}

}  // namespace gannet::model::deepseek_v41
