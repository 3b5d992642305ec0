// fixed_point_weights: the scalar reference and dispatch.
#include "kernels/cpu/fixed_point_weights.h"

#include "kernels/cpu/dispatch.h"

namespace gannet::kernels {

namespace ref {
void fixed_point_weights(const float* logits, int64_t n, float max_logit, double inv_t, double skip_below,
                         uint64_t* w) {
  for (int64_t i = 0; i < n; ++i) {
    const bool skip = (double(logits[i]) - double(max_logit)) * inv_t < skip_below;
    w[i] = skip ? 0 : fixed_point_weight(logits[i], max_logit, inv_t);
  }
}
}  // namespace ref

namespace avx2 {
void fixed_point_weights(const float* logits, int64_t n, float max_logit, double inv_t, double skip_below,
                         uint64_t* w);
}

void fixed_point_weights_isa(Isa isa, const float* logits, int64_t n, float max_logit, double inv_t,
                             double skip_below, uint64_t* w) {
  // AVX-512 machines run the AVX2 variant: the pass is bound by the exp polynomial, and
  // four double lanes already hide the libm calls.
  auto fn = pick_variant(isa, ref::fixed_point_weights, avx2::fixed_point_weights, avx2::fixed_point_weights);
  fn(logits, n, max_logit, inv_t, skip_below, w);
}

void fixed_point_weights(const float* logits, int64_t n, float max_logit, double inv_t, double skip_below,
                         uint64_t* w) {
  fixed_point_weights_isa(active_isa(), logits, n, max_logit, inv_t, skip_below, w);
}

}  // namespace gannet::kernels
