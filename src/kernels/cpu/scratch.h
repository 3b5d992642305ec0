// Grow-only per-thread float buffers for the ISA-specific kernel files.
//
// The *_avx2.cpp / *_avx512.cpp files are compiled with wider -m flags than the rest of
// the build. Any inline function or template they instantiate out of line (a
// std::vector<float> member, say) is a weak symbol that the linker may pick for the
// whole program, so a scalar path on a CPU without those instructions would run AVX-512
// code and die with SIGILL. Those files therefore use no std containers: their scratch
// memory comes from here, compiled for the baseline. tests/check_isa_objects.sh keeps
// it so.
#pragma once

#include <cstddef>

namespace gannet::kernels {

// One buffer per slot per thread; two live uses in one call chain take different slots.
enum class ScratchSlot : int {
  kPackedAvx2Dequant,   // packed_matmul_avx2: [kNr, ld] dequantised rows
  kPackedAvx512XLanes,  // packed_matmul_avx512: x in a lane order
  kPackedAvx2XLanes,    // packed_matmul_avx2: x in the MXFP4 GEMV's lane order, or FP8's scaled x
  kLaneGemmW,           // lane_gemm_avx512: packed weight panels
  kLaneGemmP,           // lane_gemm_avx512: partial products
  kLaneGemmRows,        // lane_gemm_impl.h: dequantised rows (kernels without kPackedPanels)
  kPackedAvx512Acc,     // packed_matmul_avx512: accumulators of the k-blocked few-row tiles
  kCount
};

// At least n floats, starting on a 64-byte boundary, valid until this thread's next call
// with the same slot and a larger n; contents are not kept across growth.
float* thread_scratch(ScratchSlot slot, size_t n);

}  // namespace gannet::kernels
