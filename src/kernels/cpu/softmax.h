// softmax and argmax over one vector. softmax's order: m = max (exact in any order);
// e[i] = exp_f32(x[i] - m); sum = the canonical 16-lane sum of e (canonical.h);
// x[i] = e[i] / sum. So the bits do not depend on ISA.
#pragma once

#include <cstdint>

#include "core/cpu_features.h"

namespace gannet::kernels {

void softmax(float* x, int64_t n);  // x: [n], in place, n >= 1
void softmax_isa(Isa isa, float* x, int64_t n);

// Smallest i with x[i] == max over the non-NaN x; 0 if all are NaN. x: [n], n >= 1.
int64_t argmax(const float* x, int64_t n);
int64_t argmax_isa(Isa isa, const float* x, int64_t n);

}  // namespace gannet::kernels
