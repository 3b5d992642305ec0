// Named model shapes for `gannet make-model`: tiny (tests), small, 1b (Llama-3.2-1B-like,
// for benchmarks). The same shapes serve every dense architecture.
#pragma once

#include <cstdint>
#include <string>

#include "core/dtype.h"

namespace gannet::model {

struct Preset {
  std::string name;
  int64_t hidden_size, intermediate_size, num_layers, num_heads, num_kv_heads, head_dim;
  int64_t vocab_size, max_position_embeddings;
  bool tie_word_embeddings;
  DType dtype;  // default storage dtype
};

// Throws gannet::Error listing the valid names.
Preset find_preset(const std::string& name);

// Dense architectures make-model can write: "llama", "qwen2", "qwen3". Returns the
// Hugging Face class name (LlamaForCausalLM, ...); throws gannet::Error otherwise.
std::string architecture_for(const std::string& arch);

}  // namespace gannet::model
