#include "kernels/cpu/packed_weight.h"

#include <cmath>
#include <cstring>
#include <vector>

#include "core/error.h"
#include "kernels/cpu/canonical.h"

namespace gannet::kernels {

const char* weight_format_name(WeightFormat f) {
  switch (f) {
    case WeightFormat::kF32: return "f32";
    case WeightFormat::kBF16: return "bf16";
    case WeightFormat::kF16: return "f16";
    case WeightFormat::kFp8Block: return "fp8-block";
    case WeightFormat::kMxfp4: return "mxfp4";
    case WeightFormat::kInt8Row: return "int8-row";
  }
  return "?";
}

uint64_t PackedWeight::scale_bytes() const {
  if (!scales) return 0;
  return uint64_t(scale_rows()) * uint64_t(scale_cols()) * dtype_size(scale_dtype);
}

PackedWeight PackedWeight::rows(int64_t r0, int64_t count) const {
  GANNET_CHECK(r0 >= 0 && count >= 0 && r0 + count <= n && r0 % block_n == 0, "rows [", r0, ", ", r0 + count,
               ") of a weight of ", n, " rows in blocks of ", block_n);
  PackedWeight w = *this;
  w.n = count;
  w.data = static_cast<const uint8_t*>(data) + r0 * row_bytes();
  if (scales) w.scales = static_cast<const uint8_t*>(scales) + (r0 / block_n) * scale_cols() * int64_t(dtype_size(scale_dtype));
  w.fp8_subnormal_first = fp8_subnormal_first + r0;
  return w;
}

float PackedWeight::scale_at(int64_t row, int64_t col) const {
  if (!scales) return 1.0f;
  const int64_t i = (row / block_n) * scale_cols() + col / block_k;
  if (scale_dtype == DType::F8_E8M0) return e8m0_to_f32(static_cast<const uint8_t*>(scales)[i]);
  // Tensors in a safetensors file need not be aligned: read through memcpy.
  float v;
  std::memcpy(&v, static_cast<const uint8_t*>(scales) + i * 4, 4);
  return v;
}

void PackedWeight::dequant_row(int64_t r, float* out) const {
  GANNET_CHECK(r >= 0 && r < n, "row ", r, " of ", n);
  switch (format) {
    // Plain elements are read through memcpy: a mapped tensor need not be aligned.
    case WeightFormat::kF32:
      std::memcpy(out, static_cast<const uint8_t*>(data) + r * row_bytes(), size_t(k) * 4);
      return;
    case WeightFormat::kBF16:
    case WeightFormat::kF16: {
      const uint8_t* w = static_cast<const uint8_t*>(data) + r * row_bytes();
      for (int64_t c = 0; c < k; ++c) {
        uint16_t h;
        std::memcpy(&h, w + c * 2, 2);
        out[c] = format == WeightFormat::kBF16 ? bf16_to_f32(h) : f16_to_f32(h);
      }
      return;
    }
    case WeightFormat::kFp8Block: {
      const uint8_t* w = static_cast<const uint8_t*>(data) + r * row_bytes();
      for (int64_t c = 0; c < k; ++c) out[c] = fp8_e4m3_to_f32(w[c]) * scale_at(r, c);
      return;
    }
    case WeightFormat::kMxfp4: {
      const uint8_t* w = static_cast<const uint8_t*>(data) + r * row_bytes();
      for (int64_t c = 0; c < k; ++c) {
        const uint8_t byte = w[c / 2];
        out[c] = fp4_e2m1_to_f32(c % 2 ? uint8_t(byte >> 4) : uint8_t(byte & 0xf)) * scale_at(r, c);
      }
      return;
    }
    case WeightFormat::kInt8Row: {
      const int8_t* w = static_cast<const int8_t*>(data) + r * row_bytes();
      const float s = scale_at(r, 0);
      for (int64_t c = 0; c < k; ++c) out[c] = float(w[c]) * s;
      return;
    }
  }
}

void PackedWeight::scan_codes() {
  fp8_plain = false;
  fp8_subnormal_rows.reset();
  fp8_subnormal_first = 0;
  if (format != WeightFormat::kFp8Block || !data) return;
  const uint8_t* p = static_cast<const uint8_t*>(data);
  auto sub = std::make_shared<std::vector<uint8_t>>(size_t(n), uint8_t(0));
  uint8_t nan_seen = 0;
  for (int64_t r = 0; r < n; ++r) {
    const uint8_t* row = p + r * k;
    uint8_t nan = 0, subnormal = 0;
    for (int64_t c = 0; c < k; ++c) {
      nan |= uint8_t((row[c] & 0x7f) == 0x7f);
      subnormal |= uint8_t((row[c] & 0x78) == 0 && (row[c] & 0x07) != 0);
    }
    nan_seen |= nan;
    (*sub)[size_t(r)] = subnormal;
  }
  if (nan_seen) return;
  for (int64_t i = 0; i < scale_rows(); ++i)
    for (int64_t j = 0; j < scale_cols(); ++j) {
      const float s = scale_at(i * block_n, j * block_k);
      if (std::isfinite(s) && !std::isfinite(s * 0x1p120f)) return;
    }
  fp8_plain = true;
  fp8_subnormal_rows = std::move(sub);
}

void matmul_packed_ref(const float* x, int64_t m, const PackedWeight& w, float* y) {
  std::vector<float> row(size_t(w.k));
  for (int64_t j = 0; j < w.n; ++j) {
    w.dequant_row(j, row.data());
    for (int64_t i = 0; i < m; ++i) y[i * w.n + j] = dot_f32_ref(x + i * w.k, row.data(), w.k);
  }
}

}  // namespace gannet::kernels
