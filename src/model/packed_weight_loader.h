// Finds a linear weight and its block scales in a checkpoint and returns them as a
// kernels::PackedWeight over the memory map (nothing copied). The storage conventions:
//   F32 / BF16 / F16 [n, k]                                  plain
//   F8_E4M3 [n, k] + scales F32 or F8_E8M0 [ceil(n/B), ceil(k/B)]
//       named `<name>_scale_inv` (Hugging Face FP8: DeepSeek-V3, Qwen3-FP8) or
//       `<stem>.scale` (`<name>` = `<stem>.weight`, DeepSeek-V4.1)          FP8 block
//   I8 or U8 [n, k/2] + F8_E8M0 `<stem>.scale` [n, ceil(k/32)]   MXFP4 (V4.1 experts)
//   I8 [n, k] + F32 `<name>_scale` / `<stem>.scale` [n] or [n, 1]           int8 per row
// Every mismatch (a missing scale, a scale of the wrong dtype or shape) is an error naming
// the tensors and the shapes expected.
#pragma once

#include <cstdint>
#include <string>

#include "io/checkpoint.h"
#include "kernels/cpu/packed_weight.h"

namespace gannet::model {

// fp8_block: the block size quantization_config gives (weight_block_size), 0 to infer it
// from the scale shape (128, then 64, 32, 16 are tried).
kernels::PackedWeight load_packed_weight(const io::Checkpoint& ckpt, const std::string& name, int64_t n, int64_t k,
                                         int64_t fp8_block = 0);

}  // namespace gannet::model
