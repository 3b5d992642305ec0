// Per-ISA bodies of softmax.h.
#pragma once

#include <cstdint>

namespace gannet::kernels {

#define GANNET_SOFTMAX_DECL            \
  void softmax(float* x, int64_t n); \
  int64_t argmax(const float* x, int64_t n);

namespace ref {
GANNET_SOFTMAX_DECL
}
namespace avx2 {
GANNET_SOFTMAX_DECL
}
namespace avx512 {
GANNET_SOFTMAX_DECL
}

#undef GANNET_SOFTMAX_DECL

}  // namespace gannet::kernels
