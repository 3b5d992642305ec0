// Scalar reference of matmul.h: one canonical dot per output element.
#include "kernels/cpu/canonical.h"
#include "kernels/cpu/matmul_impl.h"

namespace gannet::kernels::ref {

GANNET_MATMUL_F32_COLS(matmul_f32_cols) {
  for (int64_t i = 0; i < m; ++i)
    for (int64_t j = n0; j < n1; ++j) y[i * ldy + j] = dot_f32_ref(x + i * k, w + j * k, k);
}

GANNET_MATMUL_BF16_COLS(matmul_bf16_cols) {
  for (int64_t i = 0; i < m; ++i)
    for (int64_t j = n0; j < n1; ++j) y[i * ldy + j] = dot_bf16_ref(xb + i * ldx, w + j * k, k);
}

}  // namespace gannet::kernels::ref
