// The lightning indexer's scores of one query row against the compressed entries, shared by
// DeepSeek-V4 and V4.1: sum over heads h, in order, of relu(q_h . k_e) * softmax_scale *
// (w_h * heads_scale), each dot product summed over c in order (the spec's bits).
#pragma once

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <limits>

namespace gannet::model::deepseek_v41 {

// q: [nih, idh] of the row; w: its nih head weights; keys_t: the E keys transposed,
// [idh, E], so the entries' sums run side by side in vector lanes. Entries from `visible`
// on score -inf. dots: E floats of scratch; sc: the E scores.
//
// Eight entries at a time keep their running dot products in two registers (GCC/Clang
// vector extension of the baseline target's 4-float width) across the whole
// sum over c, instead of loading and storing dots[] for every c; each lane still adds
// q[c] * k[c] (a product, then a sum: contraction is off) in order of c, so the bits are
// the scalar loop's.
//
// ld: floats between the rows of keys_t (E when it holds exactly the E keys; more when
// these E are a range of a wider array: an entry's score never depends on the others).
inline void index_scores(const float* q, const float* w, int64_t nih, int64_t idh, const float* keys_t, int64_t ld,
                         int64_t E, int64_t visible, float softmax_scale, float heads_scale, float* dots, float* sc) {
  using f4 = float __attribute__((vector_size(16)));  // the baseline target's register width
  const int64_t nv = std::clamp<int64_t>(visible, 0, E);
  const int64_t nv8 = nv - nv % 8;
  std::fill(sc, sc + nv, 0.0f);
  for (int64_t h = 0; h < nih; ++h) {
    const float* qh = q + h * idh;
    const float wh = w[h] * heads_scale;
    for (int64_t e = 0; e < nv8; e += 8) {
      f4 lo = {}, hi = {};
      for (int64_t c = 0; c < idh; ++c) {
        f4 k0, k1;
        std::memcpy(&k0, keys_t + c * ld + e, sizeof k0);
        std::memcpy(&k1, keys_t + c * ld + e + 4, sizeof k1);
        lo += qh[c] * k0;
        hi += qh[c] * k1;
      }
      for (int j = 0; j < 4; ++j) {
        sc[e + j] += (std::max(lo[j], 0.0f) * softmax_scale) * wh;
        sc[e + 4 + j] += (std::max(hi[j], 0.0f) * softmax_scale) * wh;
      }
    }
    std::fill(dots + nv8, dots + nv, 0.0f);
    for (int64_t c = 0; c < idh; ++c) {
      const float qc = qh[c];
      const float* kc = keys_t + c * ld;
      for (int64_t e = nv8; e < nv; ++e) dots[e] += qc * kc[e];
    }
    for (int64_t e = nv8; e < nv; ++e) sc[e] += (std::max(dots[e], 0.0f) * softmax_scale) * wh;
  }
  std::fill(sc + nv, sc + E, -std::numeric_limits<float>::infinity());
}

inline void index_scores(const float* q, const float* w, int64_t nih, int64_t idh, const float* keys_t, int64_t E,
                         int64_t visible, float softmax_scale, float heads_scale, float* dots, float* sc) {
  index_scores(q, w, nih, idh, keys_t, E, E, visible, softmax_scale, heads_scale, dots, sc);
}

}  // namespace gannet::model::deepseek_v41
