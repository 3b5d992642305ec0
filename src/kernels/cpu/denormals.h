// MXCSR control for kernels that emulate vdpbf16ps with plain FMAs (canonical.h's bf16
// step): vdpbf16ps reads denormal inputs as zero and flushes tiny results; FMAs do the
// same with MXCSR.DAZ and MXCSR.FTZ set (tininess after rounding, signed zero), which was
// checked against the hardware instruction. SSE state, so any x86-64 kernel file may use it.
#pragma once

#include <immintrin.h>

namespace gannet::kernels {

// Sets DAZ and FTZ for its scope; restores the caller's MXCSR on destruction. Arithmetic
// that must stay inside (or outside) the scope is fenced with the ISA headers' pin().
class DenormalsAreZero {
 public:
  DenormalsAreZero() : saved_(_mm_getcsr()) { _mm_setcsr(saved_ | 0x8040u); }
  ~DenormalsAreZero() { _mm_setcsr(saved_); }
  DenormalsAreZero(const DenormalsAreZero&) = delete;
  DenormalsAreZero& operator=(const DenormalsAreZero&) = delete;

 private:
  unsigned saved_;
};

}  // namespace gannet::kernels
