// Dense decoder-only transformers: LlamaForCausalLM, Qwen2ForCausalLM (q/k/v biases),
// Qwen3ForCausalLM (RMSNorm on each q/k head before RoPE). Pre-norm blocks of GQA
// attention with RoPE and a gated MLP (SiLU or GELU); optional biases and tied embeddings.
#pragma once

#include <map>
#include <memory>
#include <vector>

#include "kernels/cpu/activations.h"
#include "kernels/cpu/rope.h"
#include "model/linear.h"
#include "model/model.h"

namespace gannet::model {

class DenseDecoder final : public Model {
 public:
  DenseDecoder(const io::ModelConfig& cfg, const io::Checkpoint& ckpt);

  const io::ModelConfig& config() const override { return cfg_; }
  CacheSpec cache_spec() const override;
  void reserve(int64_t max_tokens, int64_t max_logits) override;
  void forward(const Batch& batch, const CacheViews& cache, float* logits, ThreadPool* pool) override;
  uint64_t weight_bytes() const override;
  std::map<std::string, uint64_t> weight_bytes_by_format() const override;
  uint64_t output_weight_bytes() const override { return lm_head_.bytes(); }

 private:
  struct Layer {
    std::vector<float> input_norm, post_norm;  // [hidden]
    std::vector<float> q_norm, k_norm;         // [head_dim], Qwen3 only
    Linear q, k, v, o;                         // q: [heads*head_dim, hidden], ...
    Linear gate, up, down;                     // gate/up: [ffn, hidden], down: [hidden, ffn]
  };

  io::ModelConfig cfg_;
  Linear embed_;    // [vocab, hidden]
  Linear lm_head_;  // [vocab, hidden]; the embedding when tied
  std::vector<float> final_norm_;
  std::vector<Layer> layers_;
  kernels::RopeTable rope_;
  kernels::GatedAct act_ = kernels::GatedAct::kSilu;  // config hidden_act

  // Scratch, sized by reserve().
  int64_t max_tokens_ = 0, max_logits_ = 0;
  std::vector<float> x_, xn_, q_, k_, v_, attn_, gate_, up_, logit_in_;
};

}  // namespace gannet::model
