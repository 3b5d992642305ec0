// DeepSeek-V4.1 `config.json`: the composite config (`text_config` + `vision_config` +
// top-level `quantization_config`) of DeepseekV41ForCausalLM, or a flat text config.
// Every key of the text config is read, defaulted as transformers' DeepseekV41TextConfig
// defaults it (the released values), or refused naming it; the derived schedules
// (compress_ratios, KV / index / candidate sources) are checked as transformers checks
// them. deepseek-v4-architecture.md §9 says what each field does.
#pragma once

#include <cstdint>
#include <nlohmann/json_fwd.hpp>
#include <string>
#include <vector>

#include "io/rope_config.h"

namespace gannet::io {

struct DeepseekV41Config {
  int64_t vocab_size = 129280;
  int64_t hidden_size = 5120;
  int64_t num_hidden_layers = 40;
  int64_t num_attention_heads = 64;
  int64_t head_dim = 512;
  int64_t qk_rope_head_dim = 64;
  int64_t q_lora_rank = 1280;
  int64_t o_groups = 8;
  int64_t o_lora_rank = 1024;
  int64_t sliding_window = 128;
  // Per layer, backbone then the DSpark layers (always 0): 0 window only, 1 one entry per
  // token, m > 1 one entry per m tokens. [num_hidden_layers + num_nextn_predict_layers]
  std::vector<int64_t> compress_ratios;
  std::vector<int64_t> kv_source_layer_ids;
  std::vector<int64_t> index_source_layer_ids;
  int64_t candidate_source_layer_id = -1;  // -1: no two-level top-k
  int64_t candidate_topk_blocks = 2048;
  int64_t candidate_block_size = 8;
  int64_t index_n_heads = 32;
  int64_t index_head_dim = 128;
  int64_t index_topk = 512;
  double rope_theta = 10000.0;            // window-only layers, no scaling
  double compress_rope_theta = 160000.0;  // layers with a compressed branch
  RopeScaling compress_scaling;           // rope_scaling, applied to the compress table only
  int64_t max_position_embeddings = 1048576;
  int64_t n_routed_experts = 384;
  int64_t num_experts_per_tok = 6;
  int64_t n_shared_experts = 1;
  int64_t moe_intermediate_size = 2304;
  std::string scoring_func = "sqrtsoftplus";  // sqrtsoftplus, softmax, sigmoid
  double gate_temp = 1.0;
  bool norm_topk_prob = true;
  double routed_scaling_factor = 1.5;
  double swiglu_limit = 10.0;
  int64_t hc_mult = 4;
  int64_t hc_sinkhorn_iters = 20;
  double hc_eps = 1e-6;
  double rms_norm_eps = 1e-20;
  std::vector<int64_t> engram_layer_ids;
  int64_t engram_vocab_size = 16000000;
  std::vector<int64_t> engram_num_embeddings;
  int64_t engram_max_ngram_size = 4;
  int64_t engram_n_heads = 8;
  int64_t engram_head_dim = 256;
  int64_t engram_pad_id = 2;
  int64_t engram_compressed_vocab_size = 99092;
  int64_t num_nextn_predict_layers = 3;
  int64_t dspark_block_size = 5;
  int64_t dspark_noise_token_id = 128799;
  std::vector<int64_t> dspark_target_layer_ids;
  int64_t dspark_markov_rank = 256;
  int64_t dspark_n_routed_experts = 128;
  int64_t dspark_num_experts_per_tok = 3;
  int64_t bos_token_id = -1;
  std::vector<int64_t> eos_token_ids;
  // quantization_config: FP8 E4M3 linears with E8M0 scales on weight_block x weight_block
  // tiles, MXFP4 routed experts.
  int64_t weight_block = 32;

  // vision_config (deepseek-v41-vision.md §1): the ViT, its aligner window and the image
  // processor's budget; present only in a checkpoint that carries the vision tower.
  struct Vision {
    bool present = false;
    int64_t hidden_size = 1024;
    int64_t intermediate_size = 2816;
    int64_t num_hidden_layers = 32;
    int64_t num_attention_heads = 16;
    int64_t patch_size = 14;
    int64_t downsample_ratio = 3;
    double rope_theta = 10000.0;
    int64_t max_image_tokens = 1024;
    int64_t min_pixels = 295936;
    double max_wh_ratio = 0;  // 0: none (null)
  } vision;
  // The placeholder every image-span position carries (<｜deepseek_image｜>); -1: none. A
  // text-only checkpoint may name it too (it then takes no images: vision.present).
  int64_t image_token_id = -1;

  bool is_kv_source(int64_t layer) const;
  bool is_index_source(int64_t layer) const;
  // The KV source whose compressed cache layer `layer` reads (the latest at or before it),
  // -1 for window-only layers.
  int64_t kv_source_of(int64_t layer) const;
  // Engram position of `layer` in engram_layer_ids, or -1.
  int64_t engram_index(int64_t layer) const;
};

// j: the whole config.json object (composite or flat). Throws gannet::Error naming the
// file and the field.
DeepseekV41Config parse_deepseek_v41_config(const nlohmann::json& j, const std::string& file);

}  // namespace gannet::io
