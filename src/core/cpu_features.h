// CPU feature detection and the kernel path chosen from it at run time.
#pragma once

namespace gannet {

struct CpuFeatures {
  bool avx2 = false, fma = false, f16c = false;
  bool avx512f = false, avx512bw = false, avx512vl = false, avx512dq = false;
  bool avx512bf16 = false, avx512vnni = false;
};

// Instruction-set level a kernel variant is written for.
enum class Isa { kScalar = 0, kAvx2 = 1, kAvx512 = 2 };

const CpuFeatures& cpu_features();

// Highest level this CPU supports (AVX-512 requires F/BW/VL/DQ and BF16, since our
// AVX-512 kernels use vdpbf16ps).
Isa best_supported_isa();
bool isa_supported(Isa isa);

// Level used by the dispatching kernels: best_supported_isa(), lowered by the
// GANNET_ISA environment variable (scalar|avx2|avx512) or set_active_isa(). Asking for
// an unsupported level throws gannet::Error.
Isa active_isa();
void set_active_isa(Isa isa);

const char* isa_name(Isa isa);
// Human-readable path for `gannet info`, e.g. "avx512 (bf16, vnni)".
const char* kernel_path_name();

}  // namespace gannet
