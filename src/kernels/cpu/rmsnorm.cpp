// rmsnorm: the scalar reference and dispatch.
#include "kernels/cpu/rmsnorm.h"

#include "kernels/cpu/canonical.h"
#include "kernels/cpu/dispatch.h"

namespace gannet::kernels {

namespace ref {
void rmsnorm_rows(const float* x, const float* w, float* y, int64_t rows, int64_t dim, float eps) {
  for (int64_t r = 0; r < rows; ++r) {
    const float* xr = x + r * dim;
    float* yr = y + r * dim;
    const float scale = rms_scale(dot_f32_ref(xr, xr, dim), dim, eps);
    for (int64_t i = 0; i < dim; ++i) yr[i] = w ? (xr[i] * scale) * w[i] : xr[i] * scale;
  }
}
}  // namespace ref

namespace avx2 {
void rmsnorm_rows(const float* x, const float* w, float* y, int64_t rows, int64_t dim, float eps);
}
namespace avx512 {
void rmsnorm_rows(const float* x, const float* w, float* y, int64_t rows, int64_t dim, float eps);
}

void rmsnorm_isa(Isa isa, const float* x, const float* w, float* y, int64_t rows, int64_t dim,
                 float eps) {
  auto fn = pick_variant(isa, ref::rmsnorm_rows, avx2::rmsnorm_rows, avx512::rmsnorm_rows);
  fn(x, w, y, rows, dim, eps);
}

void rmsnorm(const float* x, const float* w, float* y, int64_t rows, int64_t dim, float eps) {
  rmsnorm_isa(active_isa(), x, w, y, rows, dim, eps);
}

}  // namespace gannet::kernels
