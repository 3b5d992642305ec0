// apply_rope: the scalar reference and the per-token dispatch.
#include "kernels/cpu/rope.h"

#include <vector>

#include "core/error.h"
#include "kernels/cpu/dispatch.h"
#include "kernels/cpu/rope_impl.h"

namespace gannet::kernels {

namespace ref {

GANNET_ROPE_HEADS(rope_heads) {
  const int half = rotary_dim / 2;
  for (int h = 0; h < n_heads; ++h) {
    float* v = x + int64_t(h) * head_dim + rotary_offset;
    for (int i = 0; i < half; ++i) {
      const int ia = interleaved ? 2 * i : i, ib = interleaved ? 2 * i + 1 : i + half;
      const float c = cos[i], s = inverse ? -sin[i] : sin[i];
      const float a = v[ia], b = v[ib];
      // a*c + b*(-s) is bit-identical to a*c - b*s; SIMD variants use the former.
      v[ia] = a * c - b * s;
      v[ib] = b * c + a * s;
    }
  }
}

}  // namespace ref

void apply_rope_isa(Isa isa, float* x, int64_t n_tokens, int n_heads, int head_dim,
                    const int32_t* positions, const RopeTable& table, bool interleaved,
                    int rotary_offset, bool inverse) {
  const int rd = table.rotary_dim();
  GANNET_CHECK(rotary_offset >= 0 && rotary_offset + rd <= head_dim, "rotary_dim=", rd,
               " offset=", rotary_offset, " head_dim=", head_dim);
  auto heads = pick_variant(isa, ref::rope_heads, avx2::rope_heads, avx512::rope_heads);
  thread_local std::vector<float> scratch;  // [2, rotary_dim / 2], positions past the table
  for (int64_t t = 0; t < n_tokens; ++t) {
    const int64_t pos = positions[t];
    GANNET_CHECK(pos >= 0 && pos < table.max_positions(), "position ", pos, " of ",
                 table.max_positions());
    const float* c = table.cos_row(pos);
    const float* s = table.sin_row(pos);
    if (!c) {
      scratch.resize(rd);
      table.cos_sin(pos, scratch.data(), scratch.data() + rd / 2);
      c = scratch.data();
      s = scratch.data() + rd / 2;
    }
    heads(x + t * n_heads * head_dim, n_heads, head_dim, rd, rotary_offset, c, s, interleaved, inverse);
  }
}

void apply_rope(float* x, int64_t n_tokens, int n_heads, int head_dim, const int32_t* positions,
                const RopeTable& table, bool interleaved, int rotary_offset, bool inverse) {
  apply_rope_isa(active_isa(), x, n_tokens, n_heads, head_dim, positions, table, interleaved,
                 rotary_offset, inverse);
}

}  // namespace gannet::kernels
