// config.json -> ModelConfig. Accepts both the long Hugging Face key spellings and the
// short GPT-style ones (n_embd, n_layer, n_head, ...). Every field that changes the
// forward pass is honoured or refused with an error naming it (docs/config-fields.md
// lists each field of the dense architectures and what gannet does with it).
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "io/quant_config.h"
#include "io/rope_config.h"

namespace gannet::io {

struct DeepseekV41Config;
struct DeepseekV4Config;

enum class HiddenAct { kSilu, kGeluErf, kGeluTanh };

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
  std::string rope_source;      // which key the rope settings came from (info)
  std::string hidden_act = "silu";  // as written (hidden_act or hidden_activation)
  HiddenAct activation = HiddenAct::kSilu;
  bool tie_word_embeddings = false;
  bool attention_bias = false;  // q/k/v biases
  bool o_proj_bias = false;     // Llama and Qwen3 with attention_bias; never Qwen2
  bool mlp_bias = false;        // gate/up/down biases (Llama only)
  bool qk_norm = false;         // Qwen3: RMSNorm over each head of q and k before RoPE
  WeightQuantization quantization;  // quantization_config (quant_config.h)
  // Not from config.json: `--quantize fp8|int8` asks the loader to convert the float
  // linears it finds (kNone: keep them as stored).
  WeightQuantization::Method quantize_at_load = WeightQuantization::Method::kNone;
  // Not from config.json: `--exact-activations on` fake-quantizes each activation row to
  // FP8 E4M3 before every FP8 or MXFP4 product, per block of the weight's block_k
  // (power-of-two scales when quantization_config.scale_fmt is ue8m0), as the GPU kernels
  // of FP8 checkpoints and the DeepSeek-V4 reference do (deepseek-v4-architecture.md §3.3).
  bool exact_activations = false;
  std::string torch_dtype;      // dtype / torch_dtype: storage hint, compute is float32
  int64_t bos_token_id = -1;
  std::vector<int64_t> eos_token_ids;
  // DeepseekV41ForCausalLM: its whole config (deepseek_v41_config.h); the fields above
  // then hold what the engine needs in common terms (hidden_size of the text model,
  // intermediate_size = moe_intermediate_size, ...). Null for other architectures.
  std::shared_ptr<const DeepseekV41Config> deepseek_v41;
  // DeepseekV4ForCausalLM: its whole config (deepseek_v4_config.h), as for V4.1.
  std::shared_ptr<const DeepseekV4Config> deepseek_v4;
  // Not from config.json: DeepSeek-V4's KV / indexer fake quantizations (on, as the
  // official reference; --no-kv-fake-quant turns them off, as transformers computes).
  bool kv_fake_quant = true;
  // Not from config.json: dense models keep K and V in bf16 (--kv-cache-dtype bf16).
  bool kv_cache_bf16 = false;
  // Speculative decoding: drafts a step may verify (0: off). Models with per-sequence rings
  // (DeepSeek-V4.1) size them so that rejected drafts never overwrite what they still need.
  int64_t speculative_tokens = 0;
  // DSpark drafting (DeepSeek-V4.1 with its mtp.* drafter): state slots hold the drafter's rings.
  bool dspark = false;
  // Not from config.json: expert parallelism (model/expert_parallel.h) over ep_size ranks
  // of an mpirun job, this process being ep_rank; 1: every expert on this process.
  int ep_rank = 0, ep_size = 1;
  int64_t ep_redundant = 0;   // spare expert slots per rank
  int64_t eplb_interval = 0;  // forwards between rebalances (0: none)
  int64_t eplb_window = 0;    // forwards of load history (0: the interval)

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
