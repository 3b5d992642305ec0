// Temperature, top-k, top-p, min-p and the draw, in integer arithmetic so that the chosen
// token is an exact function of (row, filters, 64 random bits).
//
// The scheme (the specification; the implementation only avoids work, never changes it):
//   m    = max_i l_i over the row (l: float logits after penalties).
//   w_i  = floor(2^40 * exp((double(l_i) - double(m)) * (1.0 / T)) + 0.5)   (std::exp)
//          so the most likely token weighs exactly 2^40 and a token below ~2^-41 of it
//          weighs 0 and can never be drawn. A 129k vocabulary sums to < 2^58.
//   top-k: K = the first k ids in the order (l desc, id asc); k <= 0 or k >= vocab: all.
//   order: K is walked in the canonical order (w desc, l desc, id asc). Since w is
//          non-decreasing in l this is (l desc, id asc); keying on w first keeps the
//          bucketed search below exact even if exp were not monotone.
//   top-p: P = floor(p * 2^32 + 0.5), W = sum of w over K, C_j = weight of the candidates
//          before j. Candidate j is kept iff j == 0 or 2^32 * C_j < P * W (128-bit),
//          i.e. the smallest prefix whose weight reaches p of the total. (p = 1: skipped.)
//   min-p: kept iff w_j >= ceil(min_p * 2^40) (relative to the top token's 2^40).
//   draw:  W' = weight kept, t = floor(r * W' / 2^64) for the 64 random bits r; the token
//          is the first kept candidate whose inclusive cumulative weight exceeds t.
// Reproducibility: everything after w is integer arithmetic; w itself uses libm's exp, so
// bits are guaranteed for one binary on one machine (glibc picks an exp variant by CPU;
// the two agree except, very rarely, on the last bit of a weight).
// Cost for a 129k vocabulary: with top-k, one streaming selection pass and a sort of k
// (~60 us); without, one exp pass (skipped for tokens under the cut when min-p is the
// only cut), a histogram of weights by bit length, and a sort of at most two bit-length
// buckets: the one holding the top-p/min-p cut and the one holding t (~0.7 ms), searched
// by quickselect rather than sorted.
#pragma once

#include <array>
#include <bit>
#include <cmath>
#include <cstdint>
#include <vector>

#include "kernels/cpu/fixed_point_weights.h"

namespace gannet::sampling {

inline constexpr int kWeightBits = 40;  // w of the most likely token = 2^kWeightBits
inline constexpr int kTopPBits = 32;    // resolution of top_p

// Fixed-point weight of a logit relative to the row max; inv_temperature = 1.0 / T. (The
// kernel beside it computes a whole row's, with the same bits, in vector lanes.)
using kernels::fixed_point_weight;
static_assert(kernels::kFixedPointWeightBits == kWeightBits);

struct DrawFilters {
  double temperature = 1.0;  // > 0
  int64_t top_k = 0;         // <= 0: off
  double top_p = 1.0;        // (0, 1]
  double min_p = 0.0;        // [0, 1]
};

// Index of the largest value, lowest index on ties. Aborts on NaN or a non-finite max
// (a broken model, or every token masked).
int32_t checked_argmax(const float* logits, int64_t n);

class FixedPointDraw {
 public:
  explicit FixedPointDraw(int64_t vocab_size);

  // logits: [vocab]. Returns the token the scheme above picks for `random` bits.
  int32_t draw(const float* logits, const DrawFilters& f, uint64_t random);

  // The whole distribution the scheme draws from: w[i] = token i's weight if the filters
  // keep it, else 0; returns the kept total W' (so draw() picks token i with probability
  // w[i] / W', up to its 2^-64 rounding). Written plainly (a sort when a filter is on);
  // speculative rejection sampling needs every token's probability, not one draw.
  uint64_t kept_weights(const float* logits, const DrawFilters& f, uint64_t* w);

  struct Candidate {
    uint64_t weight;
    float logit;
    int32_t id;
  };

 private:
  static constexpr int kBuckets = kWeightBits + 2;  // bit lengths 0 .. 41

  int32_t draw_top_k(const float* logits, const DrawFilters& f, uint64_t random);
  int32_t draw_bucketed(const float* logits, const DrawFilters& f, uint64_t random);
  int64_t gather_bucket(const float* logits, int bucket);  // into cand_ (unordered), returns its size

  int64_t vocab_;
  std::vector<int32_t> ids_;        // [vocab] top-k selection buffer
  std::vector<uint64_t> weights_;   // [vocab] w_i by id (bucketed path)
  std::vector<uint8_t> bucket_of_;  // [vocab] bit length of w_i (bucketed path)
  std::vector<Candidate> cand_;     // [vocab] candidates in canonical order
  std::array<uint64_t, kBuckets> bucket_weight_{};  // sum of w per bit length
};

}  // namespace gannet::sampling
