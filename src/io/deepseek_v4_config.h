// DeepSeek-V4-Flash `config.json` (DeepseekV4ForCausalLM, a flat config). Every key is read,
// defaulted as the released config, or refused naming it. deepseek-v4-architecture.md §2.
#pragma once

#include <cstdint>
#include <nlohmann/json_fwd.hpp>
#include <string>
#include <vector>

#include "io/rope_config.h"

namespace gannet::io {

struct DeepseekV4Config {
  int64_t vocab_size = 129280, hidden_size = 4096, num_hidden_layers = 43, num_attention_heads = 64;
  int64_t head_dim = 512, qk_rope_head_dim = 64, q_lora_rank = 1024, o_groups = 8, o_lora_rank = 1024;
  int64_t sliding_window = 128;
  std::vector<int64_t> compress_ratios;  // per backbone layer: 0 window only, 4 CSA, other > 0 HCA
  double rope_theta = 10000.0, compress_rope_theta = 160000.0;
  RopeScaling compress_scaling;
  int64_t max_position_embeddings = 1048576;
  int64_t index_n_heads = 64, index_head_dim = 128, index_topk = 512;
  int64_t n_routed_experts = 256, num_experts_per_tok = 6, n_shared_experts = 1, moe_intermediate_size = 2048;
  int64_t num_hash_layers = 3;
  std::string scoring_func = "sqrtsoftplus";
  bool norm_topk_prob = true;
  double routed_scaling_factor = 1.5, swiglu_limit = 10.0;
  int64_t hc_mult = 4, hc_sinkhorn_iters = 20;
  double hc_eps = 1e-6, rms_norm_eps = 1e-6;
  int64_t num_nextn_predict_layers = 1;
  int64_t weight_block = 128;
  int64_t bos_token_id = -1;
  std::vector<int64_t> eos_token_ids;
};

DeepseekV4Config parse_deepseek_v4_config(const nlohmann::json& j, const std::string& file);

}  // namespace gannet::io
