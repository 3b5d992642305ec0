// What a model needs from the cache: per-token K/V rows per layer, and a fixed-size
// per-sequence state slot (empty for dense models; DeepSeek-V4.1 keeps window rings and
// compressor state there).
#pragma once

#include <cstdint>

#include "core/dtype.h"

namespace gannet::model {

struct CacheSpec {
  int64_t num_layers = 0;
  int64_t num_kv_heads = 0;
  int64_t head_dim = 0;
  DType kv_dtype = DType::F32;
  int64_t state_bytes_per_seq = 0;

  // K and V, all layers.
  int64_t bytes_per_token() const { return 2 * num_layers * num_kv_heads * head_dim * int64_t(dtype_size(kv_dtype)); }
};

}  // namespace gannet::model
