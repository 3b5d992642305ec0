#include "model/deepseek_v41/model.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>

#include "core/error.h"
#include "kernels/cpu/fake_quant.h"
#include "kernels/cpu/packed_matmul.h"
#include "kernels/cpu/rmsnorm.h"
#include "model/deepseek_v41/mhc.h"

namespace gannet::model::deepseek_v41 {

namespace {

constexpr float kNegInf = -std::numeric_limits<float>::infinity();

kernels::RopeScalingParams to_kernel(const io::RopeScaling& r) {
  kernels::RopeScalingParams s;
  switch (r.kind) {
    case io::RopeScaling::Kind::kNone: s.kind = kernels::RopeScalingKind::kNone; break;
    case io::RopeScaling::Kind::kLinear: s.kind = kernels::RopeScalingKind::kLinear; break;
    case io::RopeScaling::Kind::kLlama3: s.kind = kernels::RopeScalingKind::kLlama3; break;
    case io::RopeScaling::Kind::kYarn: s.kind = kernels::RopeScalingKind::kYarn; break;
  }
  s.factor = r.factor;
  s.low_freq_factor = r.low_freq_factor;
  s.high_freq_factor = r.high_freq_factor;
  s.original_max_position_embeddings = r.original_max_position_embeddings;
  s.beta_fast = r.beta_fast;
  s.beta_slow = r.beta_slow;
  s.mscale = r.mscale;
  s.mscale_all_dim = r.mscale_all_dim;
  s.attention_factor = r.attention_factor;
  s.truncate = r.truncate;
  return s;
}

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
void fq4e_rows(float* x, int64_t rows, int64_t n, int64_t block) {
  if (n % block) return;
  for (int64_t r = 0; r < rows; ++r) kernels::fake_quant_fp4_e4m3_scale(x + r * n, n, block);
}

// The k best of scores[0, n) (ties: the lower index first), in index order.
std::vector<int32_t> top_k(const float* scores, int64_t n, int64_t k) {
  std::vector<int32_t> idx(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) idx[size_t(i)] = int32_t(i);
  k = std::min(k, n);
  std::partial_sort(idx.begin(), idx.begin() + k, idx.end(), [&](int32_t a, int32_t b) {
    return scores[a] > scores[b] || (scores[a] == scores[b] && a < b);
  });
  idx.resize(static_cast<size_t>(k));
  std::sort(idx.begin(), idx.end());
  return idx;
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
  exact_activations_ = cfg.exact_activations;
  if (exact_activations_)
    fail(ckpt.dir(), ": --exact-activations is not implemented for DeepSeek-V4.1 yet (the reference data is "
                     "without activation quantization)");
  for (int64_t l : c_.kv_source_layer_ids)
    if (!c_.is_index_source(l))
      fail(ckpt.dir(), ": config.json: KV source layer ", l,
           " is not in index_source_layer_ids (its layers would have no top-k over its entries)");
  w_ = load_weights(c_, ckpt);
  for (const LayerWeights& lw : w_.layers) {
    MoeConfig mc;
    mc.hidden = c_.hidden_size;
    mc.n_experts = c_.n_routed_experts;
    mc.top_k = c_.num_experts_per_tok;
    mc.n_shared = c_.n_shared_experts;
    mc.scoring = scoring_of(c_.scoring_func);
    mc.norm_topk_prob = c_.norm_topk_prob;
    mc.routed_scaling_factor = float(c_.routed_scaling_factor);
    mc.swiglu_limit = float(c_.swiglu_limit);
    mc.gate_temp = float(c_.gate_temp);
    moe_.emplace_back(mc, lw.moe);
  }
  // Engram: without a tokenizer-derived map the identity map is the only one that fits a
  // compressed vocabulary equal to the vocabulary.
  if (!c_.engram_layer_ids.empty()) {
    if (c_.engram_compressed_vocab_size != c_.vocab_size)
      fail(ckpt.dir(), ": engram_compressed_vocab_size (", c_.engram_compressed_vocab_size, ") differs from vocab_size (",
           c_.vocab_size, "): the Engram token map must then come from the tokenizer, which gannet does not build yet");
    token_map_.resize(size_t(c_.vocab_size));
    for (int64_t i = 0; i < c_.vocab_size; ++i) token_map_[size_t(i)] = i;
    engram_ = make_engram_layout(c_, token_map_);
  }
  rope_main_ = kernels::RopeTable(int(c_.qk_rope_head_dim), c_.rope_theta, c_.max_position_embeddings);
  rope_compress_ = kernels::RopeTable(int(c_.qk_rope_head_dim), c_.compress_rope_theta, c_.max_position_embeddings,
                                      to_kernel(c_.compress_scaling));
}

SeqState DeepseekV41::new_state() const {
  SeqState s;
  s.layers.resize(size_t(c_.num_hidden_layers));
  for (int64_t l = 0; l < c_.num_hidden_layers; ++l)
    s.layers[size_t(l)].window.assign(size_t(c_.sliding_window * c_.head_dim), 0.0f);
  return s;
}

void DeepseekV41::compress(int64_t l, LayerState& ls, const float* a, int64_t n, ThreadPool* pool) const {
  const LayerWeights& lw = w_.layers[size_t(l)];
  const int64_t D = c_.head_dim, ratio = c_.compress_ratios[size_t(l)], idh = c_.index_head_dim;
  const float eps = float(c_.rms_norm_eps);
  std::vector<float> kv(size_t(n * D));
  kernels::matmul_packed(a, n, lw.comp_wkv, kv.data(), pool);
  std::vector<float> latent;  // [groups, D]
  int64_t first_entry = ls.entries;
  if (ratio == 1) {
    latent.resize(size_t(n * D));
    kernels::rmsnorm(kv.data(), lw.comp_norm.data(), latent.data(), n, D, eps);
  } else {
    std::vector<float> gate(size_t(n * D));
    kernels::matmul_packed(a, n, lw.comp_wgate, gate.data(), pool);
    // The open group's tokens, then this chunk's: every `ratio` of them close a group.
    std::vector<float> all_kv(ls.open_kv), all_gate(ls.open_gate);
    all_kv.insert(all_kv.end(), kv.begin(), kv.end());
    all_gate.insert(all_gate.end(), gate.begin(), gate.end());
    const int64_t total = ls.open + n, groups = total / ratio;
    latent.assign(size_t(groups * D), 0.0f);
    std::vector<float> pooled(size_t(groups * D));
    for (int64_t g = 0; g < groups; ++g)
      for (int64_t ch = 0; ch < D; ++ch) {
        float mx = kNegInf;
        for (int64_t i = 0; i < ratio; ++i) mx = std::max(mx, all_gate[size_t((g * ratio + i) * D + ch)]);
        float e[8], sum = 0.0f;
        for (int64_t i = 0; i < ratio; ++i) {
          e[i] = std::exp(all_gate[size_t((g * ratio + i) * D + ch)] - mx);
          sum += e[i];
        }
        float acc = 0.0f;
        for (int64_t i = 0; i < ratio; ++i) acc += (e[i] / sum) * all_kv[size_t((g * ratio + i) * D + ch)];
        pooled[size_t(g * D + ch)] = acc;
      }
    kernels::rmsnorm(pooled.data(), lw.comp_norm.data(), latent.data(), groups, D, eps);
    const int64_t rest = total - groups * ratio;
    ls.open_kv.assign(all_kv.end() - rest * D, all_kv.end());
    ls.open_gate.assign(all_gate.end() - rest * D, all_gate.end());
    ls.open = rest;
  }
  const int64_t groups = int64_t(latent.size()) / D;
  if (groups == 0) return;
  std::vector<int32_t> pos(static_cast<size_t>(groups));
  for (int64_t g = 0; g < groups; ++g) pos[size_t(g)] = int32_t((first_entry + g) * ratio);
  // Index keys from the latent before its RoPE: k_norm(wk latent), RoPE, FQ4 / 32.
  std::vector<float> k(size_t(groups * idh)), kn(size_t(groups * idh));
  kernels::matmul_packed(latent.data(), groups, lw.idx_wk, k.data(), pool);
  kernels::rmsnorm(k.data(), lw.idx_k_norm.data(), kn.data(), groups, idh, eps);
  kernels::apply_rope(kn.data(), groups, 1, int(idh), pos.data(), rope_compress_, true, int(idh - c_.qk_rope_head_dim));
  fq4_rows(kn.data(), groups, idh, 32);
  ls.idx_k.insert(ls.idx_k.end(), kn.begin(), kn.end());
  // Main entries: RoPE at the group's first position, FQ4 with E4M3 scales / 16.
  kernels::apply_rope(latent.data(), groups, 1, int(D), pos.data(), rope_compress_, true, int(D - c_.qk_rope_head_dim));
  fq4e_rows(latent.data(), groups, D, 16);
  ls.comp_kv.insert(ls.comp_kv.end(), latent.begin(), latent.end());
  ls.entries += groups;
}

void DeepseekV41::index(int64_t l, const SeqState& st, const float* a, const float* qr, int64_t n, Shared& sh,
                        ThreadPool* pool) const {
  const LayerWeights& lw = w_.layers[size_t(l)];
  const int64_t src = c_.kv_source_of(l);
  const LayerState& ss = st.layers[size_t(src)];
  const int64_t E = ss.entries, ratio = c_.compress_ratios[size_t(l)];
  if (E == 0) return;  // nothing to score yet: what earlier sources published stands
  const int64_t nih = c_.index_n_heads, idh = c_.index_head_dim;
  std::vector<float> q(size_t(n * nih * idh)), wts(size_t(n * nih));
  kernels::matmul_packed(qr, n, lw.idx_wq_b, q.data(), pool);
  std::vector<int32_t> pos(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) pos[size_t(i)] = int32_t(st.pos + i);
  kernels::apply_rope(q.data(), n, int(nih), int(idh), pos.data(), rope_compress_, true, int(idh - c_.qk_rope_head_dim));
  fq4_rows(q.data(), n * nih, idh, 32);
  kernels::matmul_packed(a, n, lw.idx_weights_proj, wts.data(), pool);
  const float softmax_scale = 1.0f / std::sqrt(float(idh)), heads_scale = 1.0f / std::sqrt(float(nih));
  const bool is_cand_src = l == c_.candidate_source_layer_id;
  const bool use_cand = !is_cand_src && c_.candidate_source_layer_id >= 0 && c_.candidate_source_layer_id < l && sh.has_cand;
  std::vector<float> sc(static_cast<size_t>(E));
  if (is_cand_src) {
    sh.cand.assign(size_t(n), {});
    sh.has_cand = true;
  }
  sh.topk.assign(size_t(n), {});
  for (int64_t i = 0; i < n; ++i) {
    const int64_t visible = (st.pos + i + 1) / ratio;
    for (int64_t e = 0; e < E; ++e) {
      if (e >= visible) {
        sc[size_t(e)] = kNegInf;
        continue;
      }
      float s = 0.0f;
      for (int64_t h = 0; h < nih; ++h) {
        const float* qh = q.data() + (i * nih + h) * idh;
        const float* ke = ss.idx_k.data() + e * idh;
        float dot = 0.0f;
        for (int64_t c = 0; c < idh; ++c) dot += qh[c] * ke[c];
        s += (std::max(dot, 0.0f) * softmax_scale) * (wts[size_t(i * nih + h)] * heads_scale);
      }
      sc[size_t(e)] = s;
    }
    if (is_cand_src) {
      // Blocks of B entries scored by their best member; the block holding the newest
      // visible entry always kept; the best topk_blocks blocks with a finite score.
      const int64_t B = c_.candidate_block_size, nb = (E + B - 1) / B;
      std::vector<float> bs(size_t(nb), kNegInf);
      for (int64_t e = 0; e < E; ++e) bs[size_t(e / B)] = std::max(bs[size_t(e / B)], sc[size_t(e)]);
      if (visible >= 1) bs[size_t((visible - 1) / B)] = std::numeric_limits<float>::infinity();
      std::vector<uint8_t>& mask = sh.cand[size_t(i)];
      mask.assign(size_t(E), 0);
      for (int32_t b : top_k(bs.data(), nb, c_.candidate_topk_blocks))
        if (bs[size_t(b)] > kNegInf)
          for (int64_t e = b * B; e < std::min(E, (b + 1) * B); ++e) mask[size_t(e)] = 1;
    } else if (use_cand) {
      const std::vector<uint8_t>& mask = sh.cand[size_t(i)];
      for (int64_t e = 0; e < E; ++e)
        if (e >= int64_t(mask.size()) || !mask[size_t(e)]) sc[size_t(e)] = kNegInf;
    }
    for (int32_t e : top_k(sc.data(), E, c_.index_topk))
      if (sc[size_t(e)] > kNegInf) sh.topk[size_t(i)].push_back(e);
  }
  sh.has_topk = true;
}

void DeepseekV41::attention(int64_t l, SeqState& st, const float* a, int64_t n, Shared& sh, float* out,
                            ThreadPool* pool) const {
  const LayerWeights& lw = w_.layers[size_t(l)];
  LayerState& ls = st.layers[size_t(l)];
  const int64_t D = c_.head_dim, H = c_.num_attention_heads, R = c_.qk_rope_head_dim, W = c_.sliding_window;
  const int64_t ratio = c_.compress_ratios[size_t(l)];
  const float eps = float(c_.rms_norm_eps);
  const kernels::RopeTable& rope = ratio ? rope_compress_ : rope_main_;
  std::vector<int32_t> pos(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) pos[size_t(i)] = int32_t(st.pos + i);

  std::vector<float> qa(size_t(n * c_.q_lora_rank)), qr(qa.size()), q(size_t(n * H * D));
  kernels::matmul_packed(a, n, lw.wq_a, qa.data(), pool);
  kernels::rmsnorm(qa.data(), lw.q_norm.data(), qr.data(), n, c_.q_lora_rank, eps);
  kernels::matmul_packed(qr.data(), n, lw.wq_b, q.data(), pool);
  kernels::apply_rope(q.data(), n, int(H), int(D), pos.data(), rope, true, int(D - R));
  std::vector<float> kv0(size_t(n * D)), kv(size_t(n * D));
  kernels::matmul_packed(a, n, lw.wkv, kv0.data(), pool);
  kernels::rmsnorm(kv0.data(), lw.kv_norm.data(), kv.data(), n, D, eps);
  kernels::apply_rope(kv.data(), n, 1, int(D), pos.data(), rope, true, int(D - R));
  fq8_rows(kv.data(), n, D, 32);

  const LayerState* src = nullptr;
  if (ratio) {
    if (c_.is_kv_source(l)) compress(l, ls, a, n, pool);
    if (c_.is_index_source(l)) index(l, st, a, qr.data(), n, sh, pool);
    src = &st.layers[size_t(c_.kv_source_of(l))];
  }

  // Attention per query over its window and its selected compressed entries.
  std::vector<float> o(size_t(n * H * D), 0.0f);
  const float scale = 1.0f / std::sqrt(float(D));
  std::vector<const float*> keys;
  std::vector<float> sc;
  for (int64_t i = 0; i < n; ++i) {
    const int64_t p = st.pos + i;
    keys.clear();
    for (int64_t kp = std::max<int64_t>(0, p - W + 1); kp <= p; ++kp)
      keys.push_back(kp >= st.pos ? kv.data() + (kp - st.pos) * D : ls.window.data() + (kp % W) * D);
    if (src && sh.has_topk && src->entries > 0)
      for (int32_t e : sh.topk[size_t(i)])
        if (e < src->entries) keys.push_back(src->comp_kv.data() + int64_t(e) * D);
    sc.resize(keys.size());
    for (int64_t h = 0; h < H; ++h) {
      const float* qh = q.data() + (i * H + h) * D;
      float mx = lw.attn_sink[size_t(h)];
      for (size_t j = 0; j < keys.size(); ++j) {
        float dot = 0.0f;
        for (int64_t c = 0; c < D; ++c) dot += qh[c] * keys[j][c];
        sc[j] = dot * scale;
        mx = std::max(mx, sc[j]);
      }
      float sum = std::exp(lw.attn_sink[size_t(h)] - mx);
      for (size_t j = 0; j < keys.size(); ++j) {
        sc[j] = std::exp(sc[j] - mx);
        sum += sc[j];
      }
      float* oh = o.data() + (i * H + h) * D;
      for (size_t j = 0; j < keys.size(); ++j) {
        const float pj = sc[j] / sum;
        for (int64_t c = 0; c < D; ++c) oh[c] += pj * keys[j][c];
      }
    }
  }
  // The window ring keeps the last W positions.
  for (int64_t i = std::max<int64_t>(0, n - W); i < n; ++i)
    std::memcpy(ls.window.data() + ((st.pos + i) % W) * D, kv.data() + i * D, size_t(D) * 4);

  kernels::apply_rope(o.data(), n, int(H), int(D), pos.data(), rope, true, int(D - R), /*inverse=*/true);
  // Grouped output projection: group g's heads through rows [g * o_lora, (g + 1) * o_lora)
  // of wo_a, then wo_b over all groups.
  const int64_t G = c_.o_groups, gin = H / G * D, olr = c_.o_lora_rank;
  std::vector<float> og(size_t(n * gin)), zg(size_t(n * olr)), z(size_t(n * G * olr));
  for (int64_t g = 0; g < G; ++g) {
    kernels::PackedWeight wg = lw.wo_a;
    wg.n = olr;
    wg.data = static_cast<const uint8_t*>(lw.wo_a.data) + g * olr * lw.wo_a.row_bytes();
    if (wg.scales)
      wg.scales = static_cast<const uint8_t*>(lw.wo_a.scales) +
                  (g * olr / lw.wo_a.block_n) * lw.wo_a.scale_cols() * int64_t(dtype_size(lw.wo_a.scale_dtype));
    for (int64_t i = 0; i < n; ++i) std::memcpy(og.data() + i * gin, o.data() + i * H * D + g * gin, size_t(gin) * 4);
    kernels::matmul_packed(og.data(), n, wg, zg.data(), pool);
    for (int64_t i = 0; i < n; ++i) std::memcpy(z.data() + i * G * olr + g * olr, zg.data() + i * olr, size_t(olr) * 4);
  }
  kernels::matmul_packed(z.data(), n, lw.wo_b, out, pool);
}

void DeepseekV41::forward(SeqState& st, const int32_t* tokens, int64_t n, float* logits, ThreadPool* pool) const {
  if (n <= 0) return;
  const int64_t d = c_.hidden_size, hc = c_.hc_mult;
  for (int64_t i = 0; i < n; ++i)
    if (tokens[i] < 0 || tokens[i] >= c_.vocab_size)
      fail("token id ", tokens[i], " is outside the vocabulary (", c_.vocab_size, ")");
  if (st.pos + n > c_.max_position_embeddings)
    fail("positions up to ", st.pos + n, " exceed max_position_embeddings (", c_.max_position_embeddings, ")");
  std::vector<float> X(size_t(n * hc * d));
  {
    std::vector<float> e(static_cast<size_t>(d));
    for (int64_t i = 0; i < n; ++i) {
      w_.embed.dequant_row(tokens[i], e.data());
      for (int64_t k = 0; k < hc; ++k) std::memcpy(X.data() + (i * hc + k) * d, e.data(), size_t(d) * 4);
    }
  }
  // Engram row ids per Engram layer: [layers][n][cols].
  std::vector<std::vector<int64_t>> hash(c_.engram_layer_ids.size());
  if (!hash.empty()) {
    const int64_t N = engram_.max_ngram;
    std::vector<int64_t> ids(st.recent);  // compressed history, oldest first, then the chunk
    const int64_t r = int64_t(ids.size());
    for (int64_t i = 0; i < n; ++i) ids.push_back(token_map_[size_t(tokens[i])]);
    std::vector<int64_t> back(static_cast<size_t>(N));
    for (size_t li = 0; li < hash.size(); ++li) {
      hash[li].resize(size_t(n * engram_.cols));
      for (int64_t i = 0; i < n; ++i) {
        const int64_t avail = std::min<int64_t>(N, st.pos + i + 1);
        for (int64_t s = 0; s < avail; ++s) back[size_t(s)] = ids[size_t(r + i - s)];
        engram_hash(engram_, int64_t(li), back.data(), avail, hash[li].data() + i * engram_.cols);
      }
    }
    const int64_t keep = std::min<int64_t>(N - 1, int64_t(ids.size()));
    st.recent.assign(ids.end() - keep, ids.end());
  }

  std::vector<float> pre(size_t(n * hc), 0.0f), a_pre(pre.size()), f_pre(pre.size());
  std::vector<float> post(size_t(n * hc)), comb(size_t(n * hc * hc));
  for (int64_t i = 0; i < n; ++i) pre[size_t(i * hc)] = 1.0f;  // the first collapse reads stream 0
  std::vector<float> col(size_t(n * d)), nrm(size_t(n * d)), y(size_t(n * d));
  MhcWorkspace mws;
  MoeWorkspace moe_ws;
  Shared sh;
  for (int64_t l = 0; l < c_.num_hidden_layers; ++l) {
    const LayerWeights& lw = w_.layers[size_t(l)];
    if (lw.has_engram) {
      const int64_t li = c_.engram_index(l);
      engram_apply(c_, lw.engram, hash[size_t(li)].data(), X.data(), n, pool);
    }
    mhc_mixes(c_, lw.hc_attn, X.data(), n, a_pre.data(), post.data(), comb.data(), mws, pool);
    mhc_collapse(X.data(), n, hc, d, pre.data(), col.data());
    kernels::rmsnorm(col.data(), lw.attn_norm.data(), nrm.data(), n, d, float(c_.rms_norm_eps));
    attention(l, st, nrm.data(), n, sh, y.data(), pool);
    mhc_expand(X.data(), n, hc, d, y.data(), post.data(), comb.data());
    mhc_mixes(c_, lw.hc_ffn, X.data(), n, f_pre.data(), post.data(), comb.data(), mws, pool);
    mhc_collapse(X.data(), n, hc, d, a_pre.data(), col.data());
    kernels::rmsnorm(col.data(), lw.ffn_norm.data(), nrm.data(), n, d, float(c_.rms_norm_eps));
    moe_[size_t(l)].forward(nrm.data(), n, y.data(), moe_ws, pool);
    mhc_expand(X.data(), n, hc, d, y.data(), post.data(), comb.data());
    pre.swap(f_pre);
  }
  mhc_collapse(X.data(), n, hc, d, pre.data(), col.data());
  kernels::rmsnorm(col.data(), w_.norm.data(), nrm.data(), n, d, float(c_.rms_norm_eps));
  if (logits) kernels::matmul_packed(nrm.data(), n, w_.head, logits, pool);
  st.pos += n;
}

}  // namespace gannet::model::deepseek_v41
