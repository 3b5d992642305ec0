// Natural logarithms built only from +, *, fma, division and bit operations (like
// exp_f32 in exp.h), so their results are fixed by this code, not by the C library, and
// the MoE router's sqrt-softplus score is the same on every machine and compiler.
#pragma once

namespace gannet::kernels {

// ln(x), about 1 ulp. ln(+0) = -inf, ln(x < 0) = NaN, ln(+inf) = +inf, NaN returns NaN.
float log_f32(float x);

// ln(1 + a), about 1 ulp also near a = 0: ln(u) + err / u with u = 1 + a rounded and err
// its exact rounding error.
float log1p_f32(float a);

// torch.nn.functional.softplus with beta 1: z for z > 20 (torch's threshold, where
// ln(1 + e^z) and z agree in f32), log1p_f32(exp_f32(z)) otherwise.
float softplus_f32(float z);

}  // namespace gannet::kernels
