// Quantizers that turn a float weight into a packed one (packed_weight.h): used by
// `gannet make-model --dtype fp8|int8` to write checkpoints and by `--quantize fp8|int8` to
// convert a float checkpoint at load time. Deterministic: the same input gives the same
// bytes on every machine (plain f32 arithmetic, no reductions whose order could vary).
//   int8 per row:  s = amax(row) / 127 (f32 division); q = clamp(round_half_even(w / s),
//                  -127, 127); an all-zero row gets s = 1.
//   FP8 block:     per block_n x block_k tile s = amax(tile) / 448 (f32 scale, the Hugging
//                  Face `weight_scale_inv` convention); q = e4m3(clamp(w / s, -448, 448))
//                  rounded to nearest even; an all-zero tile gets s = 1.
// Non-finite weights are refused (the caller names the tensor).
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <vector>

#include "kernels/cpu/packed_weight.h"

namespace gannet::kernels {

// A packed weight together with the storage its pointers refer to.
struct OwnedPackedWeight {
  PackedWeight w;
  std::vector<uint8_t> data, scales;
};

// row(r, out) writes row r (k floats) of the source weight [n, k].
using RowSource = std::function<void(int64_t r, float* out)>;

// Throws gannet::Error on a non-finite element, naming its row and column.
std::shared_ptr<OwnedPackedWeight> quantize_int8_row(int64_t n, int64_t k, const RowSource& row);
std::shared_ptr<OwnedPackedWeight> quantize_fp8_block(int64_t n, int64_t k, int64_t block, const RowSource& row);

}  // namespace gannet::kernels
