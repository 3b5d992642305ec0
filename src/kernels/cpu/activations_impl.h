// Per-ISA bodies of activations.h.
#pragma once

#include <cstdint>

namespace gannet::kernels {

#define GANNET_ACTIVATIONS_DECL                                                 \
  void silu_mul(const float* gate, const float* up, float* out, int64_t n);   \
  void gelu_erf_mul(const float* gate, const float* up, float* out, int64_t n); \
  void gelu_tanh_mul(const float* gate, const float* up, float* out, int64_t n); \
  void add(const float* a, const float* b, float* y, int64_t n);             \
  void exp_n(const float* x, float* y, int64_t n);                           \
  void add_weighted_rows(const float* w, const float* base, const int32_t* idx, int64_t rows, int64_t ld, float* y, \
                         int64_t d);

namespace ref {
GANNET_ACTIVATIONS_DECL
}
namespace avx2 {
GANNET_ACTIVATIONS_DECL
}
namespace avx512 {
GANNET_ACTIVATIONS_DECL
}

#undef GANNET_ACTIVATIONS_DECL

}  // namespace gannet::kernels
