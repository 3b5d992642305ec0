// Run-time choice among a kernel's scalar reference and its AVX2 / AVX-512 variants.
#pragma once

#include "core/cpu_features.h"
#include "core/error.h"

namespace gannet::kernels {

// The variant for isa; aborts if this CPU cannot run it (the *_isa entry points are for
// tests and benchmarks, which ask isa_supported() first).
template <typename Fn>
Fn pick_variant(Isa isa, Fn scalar, Fn avx2, Fn avx512) {
  GANNET_CHECK(isa_supported(isa), "kernel path ", isa_name(isa), " is not supported by this CPU");
  return isa == Isa::kAvx512 ? avx512 : isa == Isa::kAvx2 ? avx2 : scalar;
}

}  // namespace gannet::kernels
