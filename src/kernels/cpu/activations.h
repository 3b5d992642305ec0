// Elementwise activations: gated MLP products act(gate) * up (SiLU, GELU erf and tanh
// forms), exp and vector add. Every element is
// computed by the same fixed sequence of rounded operations on every ISA.
#pragma once

#include <cstdint>

#include "core/cpu_features.h"

namespace gannet::kernels {

// out[i] = (g / (1 + exp_f32(-g))) * up[i], g = gate[i]. gate, up, out: [n]; out may
// equal gate or up.
void silu_mul(const float* gate, const float* up, float* out, int64_t n);
void silu_mul_isa(Isa isa, const float* gate, const float* up, float* out, int64_t n);

// out[i] = gelu(gate[i]) * up[i] with the erf form (gelu_erf_f32 in gelu.h) or the tanh
// form (gelu_tanh_f32). out may equal gate or up.
void gelu_erf_mul(const float* gate, const float* up, float* out, int64_t n);
void gelu_erf_mul_isa(Isa isa, const float* gate, const float* up, float* out, int64_t n);
void gelu_tanh_mul(const float* gate, const float* up, float* out, int64_t n);
void gelu_tanh_mul_isa(Isa isa, const float* gate, const float* up, float* out, int64_t n);

// The gated product for a model's hidden activation.
enum class GatedAct { kSilu, kGeluErf, kGeluTanh };
void gated_act_mul(GatedAct act, const float* gate, const float* up, float* out, int64_t n);

// y[i] = exp_f32(x[i]) (exp.h). x, y: [n]; y may equal x.
void exp_n(const float* x, float* y, int64_t n);
void exp_n_isa(Isa isa, const float* x, float* y, int64_t n);

// y[i] = a[i] + b[i]. a, b, y: [n]; y may equal a or b.
void add(const float* a, const float* b, float* y, int64_t n);
void add_isa(Isa isa, const float* a, const float* b, float* y, int64_t n);

// For j = 0 .. rows - 1 in order: y[c] = y[c] + w[j] * r_j[c] (the product rounded, then
// the sum: no fused multiply-add), r_j = base + (idx ? idx[j] : j) * ld. y: [d]. An
// attention head's weighted sum of value rows, as the plain loop computes it.
void add_weighted_rows(const float* w, const float* base, const int32_t* idx, int64_t rows, int64_t ld, float* y,
                       int64_t d);
void add_weighted_rows_isa(Isa isa, const float* w, const float* base, const int32_t* idx, int64_t rows, int64_t ld,
                           float* y, int64_t d);

}  // namespace gannet::kernels
