// RMSNorm as Hugging Face computes it in float32: y = (x * (1 / sqrt(mean(x^2) + eps))) * w,
// where sum(x^2) is the canonical dot (canonical.h), mean = sum / dim, and 1/sqrt is an
// exact division and square root (no approximate rsqrt).
#pragma once

#include <cmath>
#include <cstdint>

#include "core/cpu_features.h"

namespace gannet::kernels {

// x, y: [rows, dim] (y may equal x); w: [dim], or nullptr for no weight.
void rmsnorm(const float* x, const float* w, float* y, int64_t rows, int64_t dim, float eps);
void rmsnorm_isa(Isa isa, const float* x, const float* w, float* y, int64_t rows, int64_t dim,
                 float eps);

// The per-row scale 1 / sqrt(sum_sq / dim + eps) shared by every variant.
inline float rms_scale(float sum_sq, int64_t dim, float eps) {
  return 1.0f / std::sqrt(sum_sq / float(dim) + eps);
}

}  // namespace gannet::kernels
