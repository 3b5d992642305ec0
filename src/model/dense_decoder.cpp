#include "model/dense_decoder.h"

#include <cmath>

#include "core/error.h"
#include "kernels/cpu/activations.h"
#include "kernels/cpu/rmsnorm.h"
#include "model/rope_params.h"

namespace gannet::model {

namespace {

kernels::RopeTable make_rope(const io::ModelConfig& c) {
  return kernels::RopeTable(int(c.head_dim), c.rope_theta, c.max_position_embeddings, rope_scaling_params(c.rope_scaling));
}

}  // namespace

DenseDecoder::DenseDecoder(const io::ModelConfig& cfg, const io::Checkpoint& ckpt) : cfg_(cfg) {
  const int64_t h = cfg.hidden_size, hd = cfg.head_dim, q = cfg.num_attention_heads * hd,
                kv = cfg.num_key_value_heads * hd, f = cfg.intermediate_size;
  LinearLoad load;
  if (cfg.quantization.method == io::WeightQuantization::Method::kFp8Block) load.fp8_block = cfg.quantization.block;
  load.quantize = cfg.quantize_at_load;
  load.exact_activations = cfg.exact_activations;
  load.pow2_activation_scales = cfg.quantization.pow2_activation_scales;
  LinearLoad embed_load = load;  // the embedding is gathered, not multiplied: kept as stored
  embed_load.quantize = io::WeightQuantization::Method::kNone;
  embed_ = Linear(ckpt, "model.embed_tokens.weight", cfg.vocab_size, h, "", embed_load);
  // Tied models usually omit lm_head.weight; if present it is used.
  if (ckpt.has("lm_head.weight") || !cfg.tie_word_embeddings) {
    lm_head_ = Linear(ckpt, "lm_head.weight", cfg.vocab_size, h, "", load);
  } else {
    lm_head_ = embed_;
    // --quantize converts the output projection too (its own copy; the embedding lookup
    // keeps the stored rows).
    lm_head_.quantize(load.quantize, "lm_head (tied to model.embed_tokens.weight)");
  }
  final_norm_ = load_vector_f32(ckpt, "model.norm.weight", h);
  // The last layer must exist before anything is sized by the layer count.
  ckpt.get("model.layers." + std::to_string(cfg.num_hidden_layers - 1) + ".input_layernorm.weight");
  layers_.resize(size_t(cfg.num_hidden_layers));
  for (int64_t l = 0; l < cfg.num_hidden_layers; ++l) {
    Layer& L = layers_[size_t(l)];
    const std::string p = "model.layers." + std::to_string(l) + ".";
    const std::string a = p + "self_attn.";
    L.input_norm = load_vector_f32(ckpt, p + "input_layernorm.weight", h);
    L.post_norm = load_vector_f32(ckpt, p + "post_attention_layernorm.weight", h);
    const bool b = cfg.attention_bias;
    L.q = Linear(ckpt, a + "q_proj.weight", q, h, b ? a + "q_proj.bias" : "", load);
    L.k = Linear(ckpt, a + "k_proj.weight", kv, h, b ? a + "k_proj.bias" : "", load);
    L.v = Linear(ckpt, a + "v_proj.weight", kv, h, b ? a + "v_proj.bias" : "", load);
    L.o = Linear(ckpt, a + "o_proj.weight", h, q, cfg.o_proj_bias ? a + "o_proj.bias" : "", load);
    if (cfg.qk_norm) {
      L.q_norm = load_vector_f32(ckpt, a + "q_norm.weight", hd);
      L.k_norm = load_vector_f32(ckpt, a + "k_norm.weight", hd);
    }
    const std::string m = p + "mlp.";
    const bool mb = cfg.mlp_bias;
    L.gate = Linear(ckpt, m + "gate_proj.weight", f, h, mb ? m + "gate_proj.bias" : "", load);
    L.up = Linear(ckpt, m + "up_proj.weight", f, h, mb ? m + "up_proj.bias" : "", load);
    L.down = Linear(ckpt, m + "down_proj.weight", h, f, mb ? m + "down_proj.bias" : "", load);
  }
  // Built last: its size follows head_dim, which the tensor shapes have now confirmed.
  rope_ = make_rope(cfg);
  switch (cfg.activation) {
    case io::HiddenAct::kSilu: act_ = kernels::GatedAct::kSilu; break;
    case io::HiddenAct::kGeluErf: act_ = kernels::GatedAct::kGeluErf; break;
    case io::HiddenAct::kGeluTanh: act_ = kernels::GatedAct::kGeluTanh; break;
  }
}

CacheSpec DenseDecoder::cache_spec() const {
  // K and V rows of every layer, one entry per position; no per-sequence state.
  CacheSpec s;
  const bool bf16 = cfg_.kv_cache_bf16;
  const int64_t row = cfg_.num_key_value_heads * cfg_.head_dim * (bf16 ? 2 : 4);
  const auto fmt = bf16 ? kernels::CacheFormat::kBF16 : kernels::CacheFormat::kF32;
  s.groups.push_back({"k", cfg_.num_hidden_layers, row, 1, fmt});
  s.groups.push_back({"v", cfg_.num_hidden_layers, row, 1, fmt});
  return s;
}

namespace {
// The attention kernels' view of layer l's K and V arenas.
kernels::KvCacheLayerMut kv_layer(const CacheViews& cache, size_t l) {
  const kernels::CacheArena& k = cache.groups[0][l];
  const kernels::CacheArena& v = cache.groups[1][l];
  kernels::KvCacheLayerMut m;
  m.k = reinterpret_cast<float*>(k.base);
  m.v = reinterpret_cast<float*>(v.base);
  m.block_stride = k.block_stride / int64_t(sizeof(float));
  m.slot_stride = k.entry_stride / int64_t(sizeof(float));
  m.block_size = k.block_size;
  return m;
}
kernels::KvCacheLayerBf16 kv_layer_bf16(const CacheViews& cache, size_t l) {
  const kernels::CacheArena& k = cache.groups[0][l];
  const kernels::CacheArena& v = cache.groups[1][l];
  kernels::KvCacheLayerBf16 m;
  m.k = reinterpret_cast<uint16_t*>(k.base);
  m.v = reinterpret_cast<uint16_t*>(v.base);
  m.block_stride = k.block_stride / 2;
  m.slot_stride = k.entry_stride / 2;
  m.block_size = k.block_size;
  return m;
}
}  // namespace

std::map<std::string, uint64_t> DenseDecoder::weight_bytes_by_format() const {
  std::map<std::string, uint64_t> out;
  auto add = [&](const Linear& l) { out[kernels::weight_format_name(l.format())] += l.bytes(); };
  add(lm_head_);
  for (const Layer& L : layers_)
    for (const Linear* l : {&L.q, &L.k, &L.v, &L.o, &L.gate, &L.up, &L.down}) add(*l);
  return out;
}

uint64_t DenseDecoder::weight_bytes() const {
  uint64_t b = lm_head_.bytes();  // the embedding is gathered row by row, not streamed
  for (const Layer& L : layers_)
    b += L.q.bytes() + L.k.bytes() + L.v.bytes() + L.o.bytes() + L.gate.bytes() + L.up.bytes() + L.down.bytes();
  return b;
}

void DenseDecoder::reserve(int64_t max_tokens, int64_t max_logits) {
  GANNET_CHECK(max_tokens > 0 && max_logits > 0);
  max_tokens_ = max_tokens;
  max_logits_ = max_logits;
  kernels::attention_reserve_context(rope_.max_positions());
  const size_t n = size_t(max_tokens);
  const int64_t hd = cfg_.head_dim;
  x_.assign(n * size_t(cfg_.hidden_size), 0.0f);                     // [n, hidden]
  xn_.assign(n * size_t(cfg_.hidden_size), 0.0f);                    // [n, hidden]
  q_.assign(n * size_t(cfg_.num_attention_heads * hd), 0.0f);         // [n, heads, head_dim]
  k_.assign(n * size_t(cfg_.num_key_value_heads * hd), 0.0f);         // [n, kv_heads, head_dim]
  v_.assign(n * size_t(cfg_.num_key_value_heads * hd), 0.0f);         // [n, kv_heads, head_dim]
  attn_.assign(n * size_t(cfg_.num_attention_heads * hd), 0.0f);      // [n, heads, head_dim]
  gate_.assign(n * size_t(cfg_.intermediate_size), 0.0f);            // [n, ffn]
  up_.assign(n * size_t(cfg_.intermediate_size), 0.0f);              // [n, ffn]
  logit_in_.assign(size_t(max_logits) * size_t(cfg_.hidden_size), 0.0f);  // [n_logits, hidden]
}

void DenseDecoder::forward(const Batch& b, const CacheViews& cache, float* logits, ThreadPool* pool) {
  GANNET_CHECK(!b.embeds, "image rows for a model without vision");
  const int64_t n = b.n_tokens, h = cfg_.hidden_size, hd = cfg_.head_dim;
  const int nh = int(cfg_.num_attention_heads), nkv = int(cfg_.num_key_value_heads);
  const float eps = float(cfg_.rms_norm_eps);
  GANNET_CHECK(n > 0 && n <= max_tokens_, "batch of ", n, " tokens, reserved ", max_tokens_);
  GANNET_CHECK(b.n_logits >= 0 && b.n_logits <= max_logits_);
  GANNET_CHECK(cache.groups.size() == 2 && int64_t(cache.groups[0].size()) == cfg_.num_hidden_layers &&
               int64_t(cache.groups[1].size()) == cfg_.num_hidden_layers);
  for (int64_t i = 0; i < n; ++i) {
    GANNET_CHECK(b.token_ids[i] >= 0 && b.token_ids[i] < cfg_.vocab_size, "token id ", b.token_ids[i]);
    GANNET_CHECK(b.positions[i] >= 0 && b.positions[i] < rope_.max_positions(), "position ", b.positions[i]);
    embed_.row_f32(b.token_ids[i], &x_[size_t(i * h)]);
  }
  const float scale = 1.0f / std::sqrt(float(hd));
  for (size_t l = 0; l < layers_.size(); ++l) {
    const Layer& L = layers_[l];
    kernels::rmsnorm(x_.data(), L.input_norm.data(), xn_.data(), n, h, eps);
    L.q.forward(xn_.data(), n, q_.data(), pool);
    L.k.forward(xn_.data(), n, k_.data(), pool);
    L.v.forward(xn_.data(), n, v_.data(), pool);
    if (cfg_.qk_norm) {
      kernels::rmsnorm(q_.data(), L.q_norm.data(), q_.data(), n * nh, hd, eps);
      kernels::rmsnorm(k_.data(), L.k_norm.data(), k_.data(), n * nkv, hd, eps);
    }
    kernels::apply_rope(q_.data(), n, nh, int(hd), b.positions, rope_, false);
    kernels::apply_rope(k_.data(), n, nkv, int(hd), b.positions, rope_, false);
    if (cfg_.kv_cache_bf16) {
      const kernels::KvCacheLayerBf16 kv = kv_layer_bf16(cache, l);
      kernels::kv_store_bf16(k_.data(), v_.data(), n, b.seqs, b.token_seq, b.positions, nkv, int(hd), kv);
      kernels::attention_bf16(q_.data(), n, nh, nkv, int(hd), scale, b.token_seq, b.positions, b.seqs, b.n_seqs, kv,
                              attn_.data(), pool);
    } else {
      const kernels::KvCacheLayerMut kv = kv_layer(cache, l);
      kernels::kv_store(k_.data(), v_.data(), n, b.seqs, b.token_seq, b.positions, nkv, int(hd), kv);
      kernels::attention(q_.data(), n, nh, nkv, int(hd), scale, b.token_seq, b.positions, b.seqs,
                         kernels::as_const(kv), attn_.data(), pool);
    }
    L.o.forward(attn_.data(), n, xn_.data(), pool);
    for (int64_t i = 0; i < n * h; ++i) x_[size_t(i)] += xn_[size_t(i)];
    kernels::rmsnorm(x_.data(), L.post_norm.data(), xn_.data(), n, h, eps);
    L.gate.forward(xn_.data(), n, gate_.data(), pool);
    L.up.forward(xn_.data(), n, up_.data(), pool);
    kernels::gated_act_mul(act_, gate_.data(), up_.data(), gate_.data(), n * cfg_.intermediate_size);
    L.down.forward(gate_.data(), n, xn_.data(), pool);
    for (int64_t i = 0; i < n * h; ++i) x_[size_t(i)] += xn_[size_t(i)];
  }
  // Only the requested rows go through the final norm and the vocabulary projection.
  for (int64_t r = 0; r < b.n_logits; ++r) {
    const int32_t row = b.logit_rows[r];
    GANNET_CHECK(row >= 0 && row < n);
    kernels::rmsnorm(&x_[size_t(row * h)], final_norm_.data(), &logit_in_[size_t(r * h)], 1, h, eps);
  }
  if (b.n_logits > 0) lm_head_.forward(logit_in_.data(), b.n_logits, logits, pool);
}

std::unique_ptr<Model> make_dense_decoder(const io::ModelConfig& cfg, const io::Checkpoint& ckpt) {
  return std::make_unique<DenseDecoder>(cfg, ckpt);
}

}  // namespace gannet::model
