// config.json -> ModelConfig. Accepts both the long Hugging Face key spellings and the
// short GPT-style ones (n_embd, n_layer, n_head, ...).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace gannet::io {

struct RopeScaling {
  enum class Kind { kNone, kLinear, kLlama3, kYarn } kind = Kind::kNone;
  double factor = 1.0;
  double low_freq_factor = 1.0, high_freq_factor = 4.0;  // llama3
  int64_t original_max_position_embeddings = 0;          // llama3, yarn
  double beta_fast = 32.0, beta_slow = 1.0;              // yarn
  double mscale = 0.0, mscale_all_dim = 0.0;             // yarn (0 = unset)
  double attention_factor = 0.0;                         // yarn (0 = derive)
};

struct ModelConfig {
  std::string architecture;    // architectures[0], the registry key
  std::string model_type;
  int64_t hidden_size = 0;
  int64_t intermediate_size = 0;
  int64_t num_hidden_layers = 0;
  int64_t num_attention_heads = 0;
  int64_t num_key_value_heads = 0;
  int64_t head_dim = 0;
  int64_t vocab_size = 0;
  int64_t max_position_embeddings = 0;
  double rms_norm_eps = 1e-6;
  double rope_theta = 10000.0;
  RopeScaling rope_scaling;
  bool tie_word_embeddings = false;
  bool attention_bias = false;  // q/k/v (and o for llama) biases
  bool qk_norm = false;         // Qwen3: RMSNorm over each head of q and k before RoPE
  std::string torch_dtype;
  int64_t bos_token_id = -1;
  std::vector<int64_t> eos_token_ids;

  // Parameter count implied by the shapes (embeddings counted once when tied).
  int64_t num_parameters() const;
  // Bytes of K and V per token across all layers for a cache element of `elem_bytes`.
  int64_t kv_bytes_per_token(int64_t elem_bytes = 4) const;
};

// Parses config.json text; `file` names the source in error messages. Throws
// gannet::Error for bad JSON, missing required fields or inconsistent values.
ModelConfig parse_model_config(const std::string& text, const std::string& file);
ModelConfig load_model_config(const std::string& model_dir);

// Reads generation_config.json if present and fills bos/eos (it overrides config.json).
void apply_generation_config(const std::string& model_dir, ModelConfig& cfg);

std::string read_file(const std::string& path);  // throws gannet::Error naming the file

}  // namespace gannet::io
