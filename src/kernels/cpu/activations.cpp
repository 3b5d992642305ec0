// activations.h: the scalar reference and dispatch.
#include "kernels/cpu/activations.h"

#include "kernels/cpu/activations_impl.h"
#include "kernels/cpu/dispatch.h"
#include "kernels/cpu/exp.h"
#include "kernels/cpu/gelu.h"

namespace gannet::kernels {

namespace ref {
void silu_mul(const float* gate, const float* up, float* out, int64_t n) {
  for (int64_t i = 0; i < n; ++i) {
    const float g = gate[i];
    out[i] = (g / (1.0f + exp_f32(-g))) * up[i];
  }
}
void gelu_erf_mul(const float* gate, const float* up, float* out, int64_t n) {
  for (int64_t i = 0; i < n; ++i) out[i] = gelu_erf_f32(gate[i]) * up[i];
}
void gelu_tanh_mul(const float* gate, const float* up, float* out, int64_t n) {
  for (int64_t i = 0; i < n; ++i) out[i] = gelu_tanh_f32(gate[i]) * up[i];
}
void add(const float* a, const float* b, float* y, int64_t n) {
  for (int64_t i = 0; i < n; ++i) y[i] = a[i] + b[i];
}
void exp_n(const float* x, float* y, int64_t n) {
  for (int64_t i = 0; i < n; ++i) y[i] = exp_f32(x[i]);
}
void add_weighted_rows(const float* w, const float* base, const int32_t* idx, int64_t rows, int64_t ld, float* y,
                       int64_t d) {
  for (int64_t j = 0; j < rows; ++j) {
    const float* r = base + (idx ? int64_t(idx[j]) : j) * ld;
    for (int64_t c = 0; c < d; ++c) y[c] += w[j] * r[c];
  }
}
}  // namespace ref

void silu_mul_isa(Isa isa, const float* gate, const float* up, float* out, int64_t n) {
  auto fn = pick_variant(isa, ref::silu_mul, avx2::silu_mul, avx512::silu_mul);
  fn(gate, up, out, n);
}
void silu_mul(const float* gate, const float* up, float* out, int64_t n) {
  silu_mul_isa(active_isa(), gate, up, out, n);
}

void gelu_erf_mul_isa(Isa isa, const float* gate, const float* up, float* out, int64_t n) {
  auto fn = pick_variant(isa, ref::gelu_erf_mul, avx2::gelu_erf_mul, avx512::gelu_erf_mul);
  fn(gate, up, out, n);
}
void gelu_erf_mul(const float* gate, const float* up, float* out, int64_t n) {
  gelu_erf_mul_isa(active_isa(), gate, up, out, n);
}
void gelu_tanh_mul_isa(Isa isa, const float* gate, const float* up, float* out, int64_t n) {
  auto fn = pick_variant(isa, ref::gelu_tanh_mul, avx2::gelu_tanh_mul, avx512::gelu_tanh_mul);
  fn(gate, up, out, n);
}
void gelu_tanh_mul(const float* gate, const float* up, float* out, int64_t n) {
  gelu_tanh_mul_isa(active_isa(), gate, up, out, n);
}
void gated_act_mul(GatedAct act, const float* gate, const float* up, float* out, int64_t n) {
  switch (act) {
    case GatedAct::kSilu: return silu_mul(gate, up, out, n);
    case GatedAct::kGeluErf: return gelu_erf_mul(gate, up, out, n);
    case GatedAct::kGeluTanh: return gelu_tanh_mul(gate, up, out, n);
  }
}

void add_isa(Isa isa, const float* a, const float* b, float* y, int64_t n) {
  auto fn = pick_variant(isa, ref::add, avx2::add, avx512::add);
  fn(a, b, y, n);
}
void add(const float* a, const float* b, float* y, int64_t n) { add_isa(active_isa(), a, b, y, n); }

void exp_n_isa(Isa isa, const float* x, float* y, int64_t n) {
  auto fn = pick_variant(isa, ref::exp_n, avx2::exp_n, avx512::exp_n);
  fn(x, y, n);
}
void exp_n(const float* x, float* y, int64_t n) { exp_n_isa(active_isa(), x, y, n); }

void add_weighted_rows_isa(Isa isa, const float* w, const float* base, const int32_t* idx, int64_t rows, int64_t ld,
                           float* y, int64_t d) {
  auto fn = pick_variant(isa, ref::add_weighted_rows, avx2::add_weighted_rows, avx512::add_weighted_rows);
  fn(w, base, idx, rows, ld, y, d);
}
void add_weighted_rows(const float* w, const float* base, const int32_t* idx, int64_t rows, int64_t ld, float* y,
                       int64_t d) {
  add_weighted_rows_isa(active_isa(), w, base, idx, rows, ld, y, d);
}

}  // namespace gannet::kernels
