// softmax.h: the scalar reference and dispatch.
#include "kernels/cpu/softmax.h"

#include <cmath>

#include "kernels/cpu/canonical.h"
#include "kernels/cpu/dispatch.h"
#include "kernels/cpu/exp.h"
#include "kernels/cpu/softmax_impl.h"

namespace gannet::kernels {

namespace ref {

void softmax(float* x, int64_t n) {
  float m = -INFINITY;
  for (int64_t i = 0; i < n; ++i) m = x[i] > m ? x[i] : m;
  for (int64_t i = 0; i < n; ++i) x[i] = exp_f32(x[i] - m);
  const float sum = sum_f32_ref(x, n);
  for (int64_t i = 0; i < n; ++i) x[i] = x[i] / sum;
}

int64_t argmax(const float* x, int64_t n) {
  float m = -INFINITY;
  for (int64_t i = 0; i < n; ++i) m = x[i] > m ? x[i] : m;
  for (int64_t i = 0; i < n; ++i)
    if (x[i] == m) return i;
  return 0;
}

}  // namespace ref

void softmax_isa(Isa isa, float* x, int64_t n) {
  auto fn = pick_variant(isa, ref::softmax, avx2::softmax, avx512::softmax);
  fn(x, n);
}
void softmax(float* x, int64_t n) { softmax_isa(active_isa(), x, n); }

int64_t argmax_isa(Isa isa, const float* x, int64_t n) {
  auto fn = pick_variant(isa, ref::argmax, avx2::argmax, avx512::argmax);
  return fn(x, n);
}
int64_t argmax(const float* x, int64_t n) { return argmax_isa(active_isa(), x, n); }

}  // namespace gannet::kernels
