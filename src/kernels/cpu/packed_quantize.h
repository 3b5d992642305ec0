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

// Memory of its own mapping, in whole 2 MiB pages marked for transparent huge pages
// before the first touch: decode streams quantized weights once per token, and at each
// 4 KiB page the hardware prefetchers stop (as for the checkpoint mappings,
// safetensors.cpp). malloc's memory may come from a heap already touched in 4 KiB pages.
void* huge_page_alloc(size_t bytes);
void huge_page_free(void* p, size_t bytes) noexcept;
template <typename T>
struct HugePageAllocator {
  using value_type = T;
  HugePageAllocator() = default;
  template <typename U>
  HugePageAllocator(const HugePageAllocator<U>&) {}
  T* allocate(size_t n) { return static_cast<T*>(huge_page_alloc(n * sizeof(T))); }
  void deallocate(T* p, size_t n) noexcept { huge_page_free(p, n * sizeof(T)); }
  template <typename U>
  bool operator==(const HugePageAllocator<U>&) const { return true; }
};

// A packed weight together with the storage its pointers refer to.
struct OwnedPackedWeight {
  PackedWeight w;
  std::vector<uint8_t, HugePageAllocator<uint8_t>> data;
  std::vector<uint8_t> scales;
};

// row(r, out) writes row r (k floats) of the source weight [n, k].
using RowSource = std::function<void(int64_t r, float* out)>;

// Throws gannet::Error on a non-finite element, naming its row and column.
std::shared_ptr<OwnedPackedWeight> quantize_int8_row(int64_t n, int64_t k, const RowSource& row);
// FP8 E4M3 with one f32 scale per block x block tile. kAmax: the tile's amax / 448, the
// finest scale (Hugging Face fine-grained FP8, `make-model --dtype fp8`). kPow2: the
// smallest power of two s with amax / s <= 448 (DeepSeek's ue8m0 scale format), which the
// AVX2 decode GEMV folds into x instead of multiplying every weight (`--quantize fp8`); it
// costs at most one bit of range at the tile's top.
enum class Fp8Scales { kAmax, kPow2 };
std::shared_ptr<OwnedPackedWeight> quantize_fp8_block(int64_t n, int64_t k, int64_t block, const RowSource& row,
                                                      Fp8Scales scales = Fp8Scales::kAmax);

}  // namespace gannet::kernels
