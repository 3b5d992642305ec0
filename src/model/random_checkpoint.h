// Writes a random-weight checkpoint in exactly the Hugging Face layout (config.json,
// generation_config.json, safetensors, tokenizer files). Byte-identical for equal inputs.
#pragma once

#include <cstdint>
#include <functional>
#include <string>

#include "core/dtype.h"

namespace gannet::model {

struct RandomCheckpointOptions {
  std::string arch = "llama";     // llama | qwen2 | qwen3
  std::string preset = "tiny";    // tiny | small | 1b
  uint64_t seed = 0;
  int dtype_override = -1;        // -1: the preset's dtype; else a DType (F32, BF16 or F16)
  // "fp8" or "int8": the linear layers (q/k/v/o/gate/up/down projections; not the
  // embedding or lm_head) are quantized (packed_quantize.h) and config.json declares it
  // (fp8: transformers' fine-grained FP8 with 128x128 f32 `weight_scale_inv`; int8:
  // compressed-tensors channel-wise int8 with `weight_scale`). The other tensors keep the
  // float dtype. What is written follows the final config's quantization_config, so an
  // override of it (e.g. another weight_block_size) is honoured.
  std::string weight_quant;
  uint64_t shard_bytes = 0;       // 0: one model.safetensors; else shards + index
  // A JSON object merged into the preset's config.json before anything is written: each
  // key replaces the preset's (null removes it). The tensors follow the merged config
  // (shapes, biases, tying), so any dense configuration can be made, e.g.
  // {"head_dim": 48, "hidden_act": "gelu", "attention_bias": true}.
  std::string config_overrides;
};

// Element i of a random tensor: mean + std * (approximately standard normal), a pure
// function of (key, i); key = random_tensor_key(seed, tensor name). Same bits everywhere.
uint64_t random_tensor_key(uint64_t seed, const std::string& name);
float random_tensor_value(uint64_t key, int64_t i, float mean, float std);

// Creates `out_dir` (which must not exist or be empty). progress(bytes_done, total).
void write_random_checkpoint(const RandomCheckpointOptions& opt, const std::string& out_dir,
                             const std::function<void(uint64_t, uint64_t)>& progress = nullptr);

}  // namespace gannet::model
