#include "engine/flops_estimator.h"

#include <algorithm>
#include <cmath>

#include "io/deepseek_v41_config.h"
#include "io/deepseek_v4_config.h"
#include "model/deepseek_v41/model.h"
#include "model/deepseek_v41/weights.h"

#include "core/error.h"

namespace gannet::engine {

namespace {

// Per-element FLOP costs of the elementwise kernels (see the header for what each covers).
constexpr int64_t kRmsNormFlops = 4;
constexpr int64_t kRopeFlops = 3;
constexpr int64_t kSiluMulFlops = 4;
constexpr int64_t kSoftmaxFlopsPerScore = 5;

bool is_dense_decoder(const std::string& arch) {
  return arch == "LlamaForCausalLM" || arch == "Qwen2ForCausalLM" || arch == "Qwen3ForCausalLM";
}

// The shapes of one layer, as the dense decoder loads them.
struct LayerShape {
  int64_t linear_params;  // q, k, v, o, gate, up, down weights
  int64_t bias_elems;     // q, k, v (+ o) biases when attention_bias; gate, up, down when mlp_bias
  int64_t norm_elems;     // input and post-attention norms (+ Qwen3 q/k norms)
  int64_t elementwise_per_token;
};

LayerShape layer_shape(const io::ModelConfig& c) {
  const int64_t h = c.hidden_size, f = c.intermediate_size, hd = c.head_dim;
  const int64_t q = c.num_attention_heads * hd, kv = c.num_key_value_heads * hd;
  LayerShape s{};
  s.linear_params = h * q + 2 * h * kv + q * h + 3 * h * f;
  if (c.attention_bias) s.bias_elems = q + 2 * kv;
  if (c.o_proj_bias) s.bias_elems += h;
  if (c.mlp_bias) s.bias_elems += 2 * f + h;
  s.norm_elems = 2 * h + (c.qk_norm ? 2 * hd : 0);
  s.elementwise_per_token = 2 * kRmsNormFlops * h       // input and post-attention norms
                            + s.bias_elems              // bias adds
                            + (c.qk_norm ? kRmsNormFlops * (q + kv) : 0)
                            + kRopeFlops * (q + kv)     // RoPE on q and k
                            + kSiluMulFlops * f         // act(gate) * up (SiLU; GELU counted alike)
                            + 2 * h;                    // two residual adds
  return s;
}

}  // namespace

double StepCost::total_bytes() const {
  return weight_bytes + moe_expert_bytes + kv_read_bytes + kv_write_bytes + activation_bytes;
}

FlopsEstimator::FlopsEstimator(const io::ModelConfig& cfg, double weight_elem_bytes, double kv_elem_bytes)
    : cfg_(cfg), weight_elem_bytes_(weight_elem_bytes), kv_elem_bytes_(kv_elem_bytes) {
  if (cfg.deepseek_v41) {
    const io::DeepseekV41Config& c = *cfg.deepseek_v41;
    for (const model::deepseek_v41::TensorPlan& t : model::deepseek_v41::tensor_plan(c)) {
      if (t.engram_table) {
        if (t.params) v41_engram_bytes_ += double((c.engram_max_ngram_size - 1) * c.engram_n_heads * t.shape[1]);
        continue;
      }
      if (t.routed_expert) {
        v41_expert_params_ += double(t.params);
        v41_expert_bytes_ += double(t.bytes);
        continue;
      }
      if (t.name == "embed.weight") {
        v41_embed_row_bytes_ = double(t.bytes) / double(c.vocab_size);
        continue;
      }
      if (t.name == "head.weight") {
        v41_head_bytes_ = double(t.bytes);
        continue;
      }
      v41_dense_bytes_ += double(t.bytes);
      if (t.shape.size() == 2 && t.params) v41_dense_params_ += double(t.params);
    }
    v41_expert_params_ /= double(c.num_hidden_layers * c.n_routed_experts);
    v41_expert_bytes_ /= double(c.num_hidden_layers * c.n_routed_experts);
    v41_kv_token_bytes_ = model::deepseek_v41::make_cache_layout(c).spec.bytes_per_token();
    return;
  }
  if (cfg.deepseek_v4) {
    // Parameter counts from the config (deepseek-v4-architecture.md §5-§8): attention's
    // low-rank q, single-latent kv and grouped output; compressors (overlapping, 2 x
    // head_dim wide, at ratio 4) with the Lightning indexer's projections; mHC mixes; the
    // router; the shared expert. Bytes of the dense part come from the loaded model
    // (set_streamed_weight_bytes) less the routed experts and the embedding.
    const io::DeepseekV4Config& c = *cfg.deepseek_v4;
    const double d = double(c.hidden_size), H = double(c.num_attention_heads), D = double(c.head_dim);
    const double q = double(c.q_lora_rank), og = double(c.o_groups * c.o_lora_rank), hc = double(c.hc_mult);
    const double inter = double(c.moe_intermediate_size), E = double(c.n_routed_experts);
    const double nih = double(c.index_n_heads), idh = double(c.index_head_dim);
    for (int64_t l = 0; l < c.num_hidden_layers; ++l) {
      const int64_t r = c.compress_ratios[size_t(l)];
      double p = q * d + H * D * q + D * d + og * (H * D / double(c.o_groups)) + d * og;  // attention
      p += 2 * (2 + hc) * hc * hc * d;                                                     // mHC mixes
      p += E * d + 3.0 * double(c.n_shared_experts) * inter * d;                            // router, shared
      if (r > 0) p += 2 * (r == 4 ? 2 * D : D) * d;                                         // compressor
      if (r == 4) p += nih * idh * q + nih * d + 2 * (2 * idh) * d;                         // indexer
      v4_dense_params_ += p;
      // Cache per token: the window row (state) and the compressed entry's share.
      v4_kv_token_bytes_ += D * 4 + (r > 0 ? (D + (r == 4 ? idh : 0)) * 4 / double(r) : 0);
    }
    v4_dense_params_ += hc * hc * d;  // the head's mHC mix
    v4_expert_params_ = 3 * inter * d;
    v4_expert_bytes_ = v4_expert_params_ * (0.5 + 1.0 / 32);
    return;
  }
  if (!is_dense_decoder(cfg.architecture))
    fail("flops estimator: architecture '", cfg.architecture,
         "' is not a dense decoder (LlamaForCausalLM, Qwen2ForCausalLM, Qwen3ForCausalLM)");
  if (cfg.hidden_size <= 0 || cfg.intermediate_size <= 0 || cfg.num_hidden_layers <= 0 ||
      cfg.num_attention_heads <= 0 || cfg.num_key_value_heads <= 0 || cfg.head_dim <= 0 ||
      cfg.vocab_size <= 0 || cfg.num_attention_heads % cfg.num_key_value_heads != 0)
    fail("flops estimator: model shapes must be positive with heads a multiple of kv heads (hidden ",
         cfg.hidden_size, ", ffn ", cfg.intermediate_size, ", layers ", cfg.num_hidden_layers,
         ", heads ", cfg.num_attention_heads, ", kv heads ", cfg.num_key_value_heads, ", head_dim ",
         cfg.head_dim, ", vocab ", cfg.vocab_size, ")");
  if (!(weight_elem_bytes > 0) || !(kv_elem_bytes > 0))
    fail("flops estimator: element sizes must be positive (weights ", weight_elem_bytes, ", kv ",
         kv_elem_bytes, ")");
}

StepCost FlopsEstimator::step_v41(const StepShape& shape) const {
  const io::DeepseekV41Config& m = *cfg_.deepseek_v41;
  StepCost c;
  double T = 0, R = 0, attn = 0, kv_read = 0;
  const double H = double(m.num_attention_heads), D = double(m.head_dim);
  const auto lay = model::deepseek_v41::make_cache_layout(m);
  for (const StepShape::Seq& s : shape.seqs) {
    T += double(s.num_tokens);
    R += s.wants_logits ? 1 : 0;
    for (int64_t l = 0; l < m.num_hidden_layers; ++l) {
      const int64_t ratio = m.compress_ratios[size_t(l)];
      double selected_max = 0;
      for (int64_t i = 0; i < s.num_tokens; ++i) {
        const int64_t p = s.context_before + i;
        double keys = double(std::min<int64_t>(m.sliding_window, p + 1));
        if (ratio) {
          const int64_t visible = (p + 1) / ratio;
          keys += double(std::min<int64_t>(m.index_topk, visible));
          selected_max = double(visible);
          if (m.is_index_source(l)) attn += double(visible) * double(m.index_n_heads) * 2.0 * double(m.index_head_dim);
        }
        attn += H * 4.0 * D * keys;
      }
      kv_read += double(std::min<int64_t>(m.sliding_window, s.context_before)) * double(lay.win_bytes);
      if (ratio) {
        kv_read += std::min(selected_max, double(m.index_topk) * double(s.num_tokens)) * double(lay.kv_bytes);
        if (m.is_index_source(l)) kv_read += selected_max * double(lay.key_bytes);
      }
    }
  }
  if (T == 0) return c;
  const double L = double(m.num_hidden_layers), E = double(m.n_routed_experts), k = double(m.num_experts_per_tok);
  c.matmul_flops = 2.0 * T * (v41_dense_params_ + L * k * v41_expert_params_) +
                   2.0 * R * double(m.vocab_size) * double(m.hidden_size);
  c.attention_flops = attn;
  c.flops = c.matmul_flops + c.attention_flops;
  c.weight_bytes = v41_dense_bytes_ + T * v41_embed_row_bytes_ + (R > 0 ? v41_head_bytes_ : 0.0);
  const double touched = E * (1.0 - std::pow(1.0 - k / E, T));
  c.moe_expert_bytes = L * touched * v41_expert_bytes_ + T * v41_engram_bytes_;
  c.kv_read_bytes = kv_read;
  c.kv_write_bytes = T * v41_kv_token_bytes_;
  return c;
}

StepCost FlopsEstimator::step_v4(const StepShape& shape) const {
  const io::DeepseekV4Config& m = *cfg_.deepseek_v4;
  StepCost c;
  double T = 0, R = 0, attn = 0, kv_read = 0;
  const double H = double(m.num_attention_heads), D = double(m.head_dim), idh = double(m.index_head_dim);
  for (const StepShape::Seq& s : shape.seqs) {
    T += double(s.num_tokens);
    R += s.wants_logits ? 1 : 0;
    for (int64_t l = 0; l < m.num_hidden_layers; ++l) {
      const int64_t r = m.compress_ratios[size_t(l)];
      double visible_last = 0;
      for (int64_t i = 0; i < s.num_tokens; ++i) {
        const int64_t p = s.context_before + i;
        double keys = double(std::min<int64_t>(m.sliding_window, p + 1));
        if (r > 0) {
          const double visible = double((p + 1) / r);
          visible_last = visible;
          // Ratio 4 (CSA): the indexer scores every entry, attention takes the top index_topk;
          // other ratios (HCA): every entry.
          if (r == 4) {
            keys += std::min(double(m.index_topk), visible);
            attn += visible * double(m.index_n_heads) * 2.0 * idh;
          } else {
            keys += visible;
          }
        }
        attn += H * 4.0 * D * keys;
      }
      kv_read += double(std::min<int64_t>(m.sliding_window, s.context_before)) * D * 4;
      if (r == 4) kv_read += visible_last * idh * 4 + std::min(visible_last, double(m.index_topk) * double(s.num_tokens)) * D * 4;
      else if (r > 0) kv_read += visible_last * D * 4;
    }
  }
  if (T == 0) return c;
  const double L = double(m.num_hidden_layers), E = double(m.n_routed_experts), k = double(m.num_experts_per_tok);
  const double V = double(m.vocab_size), d = double(m.hidden_size);
  c.matmul_flops = 2.0 * T * (v4_dense_params_ + L * k * v4_expert_params_) + 2.0 * R * V * d;
  c.attention_flops = attn;
  c.flops = c.matmul_flops + c.attention_flops;
  // The model's weight_bytes() (less the head: layer_linear_bytes_) is what a one-token
  // forward reads: the dense part, num_experts_per_tok experts per layer and one embedding
  // row (and a hash-routing row), not every expert.
  const double embed_row = d * 2;  // bf16, as released
  const double token_experts = L * k * v4_expert_bytes_;
  const double streamed = layer_linear_bytes_ >= 0 ? layer_linear_bytes_ : v4_dense_params_ + token_experts + embed_row;
  const double dense = std::max(0.0, streamed - token_experts - embed_row);
  const double head = lm_head_bytes_ >= 0 ? lm_head_bytes_ : V * d * 2;
  c.weight_bytes = dense + T * d * 2 + (R > 0 ? head : 0.0);
  const double touched = E * (1.0 - std::pow(1.0 - k / E, T));
  c.moe_expert_bytes = L * touched * v4_expert_bytes_;
  c.kv_read_bytes = kv_read;
  c.kv_write_bytes = T * v4_kv_token_bytes_;
  return c;
}

StepCost FlopsEstimator::step(const StepShape& shape) const {
  if (cfg_.deepseek_v41) return step_v41(shape);
  if (cfg_.deepseek_v4) return step_v4(shape);
  StepCost c;
  if (shape.seqs.empty()) return c;
  // Integer sums stay exact in double up to 2^53, far beyond any real step.
  int64_t tokens = 0, logit_rows = 0, kv_positions = 0;
  int64_t pairs = 0;  // (query, key) pairs per query head per layer
  for (const StepShape::Seq& s : shape.seqs) {
    GANNET_CHECK(s.num_tokens >= 1 && s.context_before >= 0, "seq of ", s.num_tokens,
                 " tokens after ", s.context_before);
    tokens += s.num_tokens;
    logit_rows += s.wants_logits ? 1 : 0;
    kv_positions += s.context_before + s.num_tokens;
    // Positions context_before .. context_before + n - 1 attend to p + 1 keys each.
    pairs += s.num_tokens * s.context_before + s.num_tokens * (s.num_tokens + 1) / 2;
  }
  const double T = double(tokens), R = double(logit_rows), P = double(pairs);
  const double L = double(cfg_.num_hidden_layers), h = double(cfg_.hidden_size);
  const double V = double(cfg_.vocab_size), hd = double(cfg_.head_dim);
  const double nh = double(cfg_.num_attention_heads);
  const double kv_row = double(cfg_.num_key_value_heads) * hd;  // elements of K (or V) per position
  const LayerShape ls = layer_shape(cfg_);

  c.matmul_flops = L * 2.0 * T * double(ls.linear_params) + 2.0 * R * h * V;
  c.attention_flops = L * nh * 4.0 * hd * P;
  c.softmax_flops = L * nh * (double(kSoftmaxFlopsPerScore) * P + hd * T);
  c.elementwise_flops = L * T * double(ls.elementwise_per_token) + double(kRmsNormFlops) * h * R;
  c.flops = c.matmul_flops + c.attention_flops + c.softmax_flops + c.elementwise_flops;

  const double linears = layer_linear_bytes_ >= 0 ? layer_linear_bytes_ : L * double(ls.linear_params) * weight_elem_bytes_;
  const double lm_head = lm_head_bytes_ >= 0 ? lm_head_bytes_ : V * h * weight_elem_bytes_;
  c.weight_bytes = linears                                            // layer linears
                   + L * double(ls.norm_elems + ls.bias_elems) * 4.0  // f32 norms and biases
                   + T * h * weight_elem_bytes_;                      // embedding gather
  // The final norm and the vocabulary projection run only for logit rows.
  if (logit_rows > 0) c.weight_bytes += h * 4.0 + lm_head;
  c.kv_read_bytes = L * double(kv_positions) * 2.0 * kv_row * kv_elem_bytes_;
  c.kv_write_bytes = L * T * 2.0 * kv_row * kv_elem_bytes_;
  // activation_bytes stays 0 and moe_expert_bytes is 0 for dense models (see the header).
  return c;
}

StepCost FlopsEstimator::decode_step(int64_t batch, int64_t context) const {
  GANNET_CHECK(batch >= 0, "batch ", batch);
  StepShape s;
  s.seqs.assign(size_t(batch), StepShape::Seq{1, context, true});
  return step(s);
}

StepCost FlopsEstimator::prefill(int64_t prompt_len) const {
  StepShape s;
  s.seqs.push_back({prompt_len, 0, true});
  return step(s);
}

double FlopsEstimator::flops_per_token_dense() const {
  if (cfg_.deepseek_v41)
    return 2.0 * (v41_dense_params_ + double(cfg_.num_hidden_layers) * double(cfg_.deepseek_v41->num_experts_per_tok) *
                                          v41_expert_params_ +
                  double(cfg_.vocab_size) * double(cfg_.hidden_size));
  if (cfg_.deepseek_v4)
    return 2.0 * (v4_dense_params_ + double(cfg_.num_hidden_layers) * double(cfg_.deepseek_v4->num_experts_per_tok) *
                                         v4_expert_params_ +
                  double(cfg_.vocab_size) * double(cfg_.hidden_size));
  return 2.0 * (double(cfg_.num_hidden_layers) * double(layer_shape(cfg_).linear_params) +
                double(cfg_.vocab_size) * double(cfg_.hidden_size));
}

void FlopsEstimator::set_streamed_weight_bytes(double layer_linears, double lm_head) {
  if (!(layer_linears >= 0) || !(lm_head >= 0))
    fail("flops estimator: streamed weight bytes must be >= 0 (", layer_linears, ", ", lm_head, ")");
  layer_linear_bytes_ = layer_linears;
  lm_head_bytes_ = lm_head;
}

}  // namespace gannet::engine
