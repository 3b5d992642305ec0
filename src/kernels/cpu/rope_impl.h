// Per-ISA bodies of apply_rope: rotate every head of one token with given cos/sin rows.
#pragma once

#include <cstdint>

namespace gannet::kernels {

// x: [n_heads, head_dim] of one token; cos, sin: [rotary_dim / 2]; sin is negated when
// inverse.
#define GANNET_ROPE_HEADS(name)                                                              \
  void name(float* x, int n_heads, int head_dim, int rotary_dim, int rotary_offset,          \
            const float* cos, const float* sin, bool interleaved, bool inverse)

namespace ref {
GANNET_ROPE_HEADS(rope_heads);
}
namespace avx2 {
GANNET_ROPE_HEADS(rope_heads);
}
namespace avx512 {
GANNET_ROPE_HEADS(rope_heads);
}

}  // namespace gannet::kernels
