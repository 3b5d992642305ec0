// A linear weight w[n, k] in any storage format, used in place (zero-copy) from the
// memory map, with its block scales:
//   kF32, kBF16, kF16  plain elements, no scales
//   kFp8Block          FP8 E4M3 codes [n, k]; one scale per block_n x block_k tile,
//                      scales [ceil(n/block_n), ceil(k/block_k)] as E8M0 (V4.1: 32x32) or
//                      f32 (DeepSeek-V3 / Qwen3-FP8 weight_scale_inv: 128x128)
//   kMxfp4             FP4 E2M1 codes, two per byte, low nibble first, rows of k/2 bytes;
//                      one E8M0 scale per 32 along k: scales [n, ceil(k/32)]
//   kInt8Row           int8 [n, k]; one f32 scale per output row: scales [n]
//
// The canonical product (the specification every kernel variant reproduces bit for bit):
// a weight element's value is its decoded code times its block's scale, rounded once to
// f32 (exact for power-of-two scales); y[i, j] is the canonical f32 dot (canonical.h) of
// x row i with that dequantized w row j. So an output depends only on its own row of x
// and of w: not on the batch, the thread count or the ISA.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "core/dtype.h"

namespace gannet::kernels {

enum class WeightFormat : uint8_t { kF32, kBF16, kF16, kFp8Block, kMxfp4, kInt8Row };

const char* weight_format_name(WeightFormat f);

// Bytes holding `elems` consecutive elements of a row (4-bit formats round up).
constexpr int64_t packed_bytes(WeightFormat f, int64_t elems) {
  switch (f) {
    case WeightFormat::kF32: return elems * 4;
    case WeightFormat::kBF16:
    case WeightFormat::kF16: return elems * 2;
    case WeightFormat::kFp8Block:
    case WeightFormat::kInt8Row: return elems;
    case WeightFormat::kMxfp4: return (elems + 1) / 2;
  }
  return 0;
}

struct PackedWeight {
  WeightFormat format = WeightFormat::kF32;
  int64_t n = 0, k = 0;             // rows (outputs) and columns (inputs)
  const void* data = nullptr;       // see the table above
  const void* scales = nullptr;     // nullptr for the plain formats
  DType scale_dtype = DType::F32;   // F8_E8M0 or F32
  int64_t block_n = 1, block_k = 1; // scale tile; kInt8Row: 1 x k, kMxfp4: 1 x 32
  // kFp8Block only: true once scan_codes() has found no NaN code (0x7f, 0xff) and no finite
  // scale s of 2^8 or more (s * 2^120 overflowing), which lets kernels decode E4M3 through
  // f16 (value / 2^8, exact) or straight into f32 bits (value / 2^120, exact) and multiply
  // by s times that power instead: the same real product, so the same rounding. false (not
  // scanned) is always correct, only slower.
  bool fp8_plain = false;
  // kFp8Block with fp8_plain, from scan_codes(): per row, 1 where the row holds a subnormal
  // E4M3 code (exponent field 0, mantissa not 0). Read straight into f32 bits, such a code
  // is an f32 subnormal, exact but slow on CPUs that take a microcode assist per
  // subnormal operand (Intel: a 2048 x 2048 GEMV whose codes were 1/8 subnormal ran 20-80x
  // slower); kernels run those rows through f16 instead (vcvtph2ps widens f16 subnormals
  // at full speed), with the same bits. A hint for speed only: null (not scanned) is
  // always correct. Whoever sets it covers rows [fp8_subnormal_first, + n).
  std::shared_ptr<const std::vector<uint8_t>> fp8_subnormal_rows;
  int64_t fp8_subnormal_first = 0;  // row 0's entry in fp8_subnormal_rows (a slice's: rows())

  int64_t scale_rows() const { return (n + block_n - 1) / block_n; }
  int64_t scale_cols() const { return (k + block_k - 1) / block_k; }
  int64_t row_bytes() const { return packed_bytes(format, k); }
  uint64_t data_bytes() const { return uint64_t(n) * uint64_t(row_bytes()); }  // exact, 4-bit included
  uint64_t scale_bytes() const;
  uint64_t bytes() const { return data_bytes() + scale_bytes(); }
  // The scale of element (row, col); 1 for the plain formats.
  float scale_at(int64_t row, int64_t col) const;
  // Row r dequantized: out[c] = decode(w[r, c]) * scale_at(r, c), rounded to f32.
  void dequant_row(int64_t r, float* out) const;  // out: [k]
  // Sets fp8_plain and fp8_subnormal_rows by reading every code and scale once (a
  // load-time pass).
  void scan_codes();
  // Rows [r0, r0 + count) as a weight of their own (r0 a multiple of block_n): data,
  // scales and the scan's marks follow.
  PackedWeight rows(int64_t r0, int64_t count) const;
  // Whether row r is marked in fp8_subnormal_rows (false where nothing was scanned).
  bool fp8_subnormal_row(int64_t r) const {
    return fp8_subnormal_rows && (*fp8_subnormal_rows)[size_t(fp8_subnormal_first + r)] != 0;
  }
  // Bit j set where row r0 + min(j, nr - 1) is marked, j < 4 (a GEMV tile whose missing
  // rows repeat its last one).
  unsigned fp8_subnormal_mask4(int64_t r0, int64_t nr) const {
    if (!fp8_subnormal_rows) return 0;
    unsigned m = 0;
    for (int j = 0; j < 4; ++j) m |= unsigned(fp8_subnormal_row(r0 + (j < nr ? j : nr - 1))) << j;
    return m;
  }
  // Whether any row of [r0, r1) is marked.
  bool fp8_subnormal_any(int64_t r0, int64_t r1) const {
    if (!fp8_subnormal_rows) return false;
    for (int64_t r = r0; r < r1; ++r)
      if (fp8_subnormal_row(r)) return true;
    return false;
  }
};

// y[m, n] = x[m, k] · dequant(w)ᵀ in the canonical order above (the scalar reference).
void matmul_packed_ref(const float* x, int64_t m, const PackedWeight& w, float* y);

}  // namespace gannet::kernels
