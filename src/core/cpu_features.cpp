#include "core/cpu_features.h"

#include <cpuid.h>

#include <atomic>
#include <cstdlib>
#include <string>

#include "core/error.h"

namespace gannet {

namespace {

uint64_t xgetbv0() {
  uint32_t lo, hi;
  __asm__ volatile("xgetbv" : "=a"(lo), "=d"(hi) : "c"(0));
  return (uint64_t(hi) << 32) | lo;
}

CpuFeatures detect() {
  CpuFeatures f;
  unsigned a, b, c, d;
  if (!__get_cpuid(1, &a, &b, &c, &d)) return f;
  bool osxsave = c & (1u << 27);
  bool fma = c & (1u << 12), f16c = c & (1u << 29), avx = c & (1u << 28);
  if (!osxsave || !avx) return f;
  uint64_t xcr0 = xgetbv0();
  bool ymm_ok = (xcr0 & 0x6) == 0x6;
  bool zmm_ok = (xcr0 & 0xe6) == 0xe6;
  if (!ymm_ok) return f;
  f.fma = fma;
  f.f16c = f16c;
  if (__get_cpuid_max(0, nullptr) < 7) return f;
  __cpuid_count(7, 0, a, b, c, d);
  f.avx2 = b & (1u << 5);
  if (zmm_ok) {
    f.avx512f = b & (1u << 16);
    f.avx512dq = b & (1u << 17);
    f.avx512bw = b & (1u << 30);
    f.avx512vl = b & (1u << 31);
    f.avx512vnni = c & (1u << 11);
    unsigned a1, b1, c1, d1;
    __cpuid_count(7, 1, a1, b1, c1, d1);
    f.avx512bf16 = a1 & (1u << 5);
  }
  return f;
}

Isa initial_isa() {
  Isa best = best_supported_isa();
  const char* env = std::getenv("GANNET_ISA");
  if (!env || !*env) return best;
  std::string s(env);
  Isa want;
  if (s == "scalar") want = Isa::kScalar;
  else if (s == "avx2") want = Isa::kAvx2;
  else if (s == "avx512") want = Isa::kAvx512;
  else fail("GANNET_ISA='", s, "' is not one of scalar, avx2, avx512");
  if (!isa_supported(want))
    fail("GANNET_ISA=", s, " is not supported by this CPU (best is ", isa_name(best), ")");
  return want;
}

std::atomic<int> g_active{-1};

}  // namespace

const CpuFeatures& cpu_features() {
  static const CpuFeatures f = detect();
  return f;
}

bool isa_supported(Isa isa) {
  const CpuFeatures& f = cpu_features();
  switch (isa) {
    case Isa::kScalar: return true;
    case Isa::kAvx2: return f.avx2 && f.fma && f.f16c;
    case Isa::kAvx512:
      return isa_supported(Isa::kAvx2) && f.avx512f && f.avx512bw && f.avx512vl && f.avx512dq &&
             f.avx512bf16;
  }
  return false;
}

Isa best_supported_isa() {
  if (isa_supported(Isa::kAvx512)) return Isa::kAvx512;
  if (isa_supported(Isa::kAvx2)) return Isa::kAvx2;
  return Isa::kScalar;
}

Isa active_isa() {
  int v = g_active.load(std::memory_order_relaxed);
  if (v < 0) {
    v = int(initial_isa());
    g_active.store(v, std::memory_order_relaxed);
  }
  return Isa(v);
}

void set_active_isa(Isa isa) {
  if (!isa_supported(isa)) fail("kernel path ", isa_name(isa), " is not supported by this CPU");
  g_active.store(int(isa), std::memory_order_relaxed);
}

const char* isa_name(Isa isa) {
  switch (isa) {
    case Isa::kScalar: return "scalar";
    case Isa::kAvx2: return "avx2";
    case Isa::kAvx512: return "avx512";
  }
  return "?";
}

const char* kernel_path_name() {
  switch (active_isa()) {
    case Isa::kAvx512:
      return cpu_features().avx512vnni ? "avx512 (bf16, vnni)" : "avx512 (bf16)";
    case Isa::kAvx2: return "avx2 (fma)";
    case Isa::kScalar: return "scalar";
  }
  return "?";
}

}  // namespace gannet
