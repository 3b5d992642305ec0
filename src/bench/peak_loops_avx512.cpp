// g++ 12 reports its own AVX-512 reduce intrinsics as using uninitialized values.
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#endif
#include <immintrin.h>

#include "bench/peak_loops.h"

namespace gannet::bench::avx512 {

// 12 independent accumulators hide the 4-cycle latency on 2 FMA pipes.
#define GANNET_CHAINS(X) X(0) X(1) X(2) X(3) X(4) X(5) X(6) X(7) X(8) X(9) X(10) X(11)

double f32_fma(int64_t iters) {
  const __m512 a = _mm512_set1_ps(1.0000001f), b = _mm512_set1_ps(0.9999999f);
#define DECL(i) __m512 c##i = _mm512_set1_ps(float(i));
  GANNET_CHAINS(DECL)
#undef DECL
  for (int64_t it = 0; it < iters; ++it) {
#define STEP(i) c##i = _mm512_fmadd_ps(a, c##i, b);
    GANNET_CHAINS(STEP)
#undef STEP
    __asm__ volatile("" ::: "memory");
  }
  __m512 s = _mm512_add_ps(_mm512_add_ps(_mm512_add_ps(c0, c1), _mm512_add_ps(c2, c3)),
                           _mm512_add_ps(_mm512_add_ps(c4, c5), _mm512_add_ps(c6, c7)));
  s = _mm512_add_ps(s, _mm512_add_ps(_mm512_add_ps(c8, c9), _mm512_add_ps(c10, c11)));
  return double(_mm512_reduce_add_ps(s));
}

double bf16_dot(int64_t iters) {
  const __m512bh a = (__m512bh)_mm512_set1_epi16(0x3f80), b = (__m512bh)_mm512_set1_epi16(0x3f81);
#define DECL(i) __m512 c##i = _mm512_set1_ps(float(i));
  GANNET_CHAINS(DECL)
#undef DECL
  for (int64_t it = 0; it < iters; ++it) {
#define STEP(i) c##i = _mm512_dpbf16_ps(c##i, a, b);
    GANNET_CHAINS(STEP)
#undef STEP
    __asm__ volatile("" ::: "memory");
  }
  __m512 s = _mm512_add_ps(_mm512_add_ps(_mm512_add_ps(c0, c1), _mm512_add_ps(c2, c3)),
                           _mm512_add_ps(_mm512_add_ps(c4, c5), _mm512_add_ps(c6, c7)));
  s = _mm512_add_ps(s, _mm512_add_ps(_mm512_add_ps(c8, c9), _mm512_add_ps(c10, c11)));
  return double(_mm512_reduce_add_ps(s));
}

double int8_dot(int64_t iters) {
  const __m512i a = _mm512_set1_epi8(3), b = _mm512_set1_epi8(-2);
#define DECL(i) __m512i c##i = _mm512_set1_epi32(i);
  GANNET_CHAINS(DECL)
#undef DECL
  for (int64_t it = 0; it < iters; ++it) {
#define STEP(i) c##i = _mm512_dpbusd_epi32(c##i, a, b);
    GANNET_CHAINS(STEP)
#undef STEP
    __asm__ volatile("" ::: "memory");
  }
  __m512i s = _mm512_add_epi32(_mm512_add_epi32(_mm512_add_epi32(c0, c1), _mm512_add_epi32(c2, c3)),
                               _mm512_add_epi32(_mm512_add_epi32(c4, c5), _mm512_add_epi32(c6, c7)));
  s = _mm512_add_epi32(s, _mm512_add_epi32(_mm512_add_epi32(c8, c9), _mm512_add_epi32(c10, c11)));
  return double(_mm512_reduce_add_epi32(s));
}

uint64_t read_bytes(const uint8_t* p, size_t begin, size_t end) {
  __m512i a = _mm512_setzero_si512(), b = a, c = a, d = a;
  for (size_t i = begin; i < end; i += 256) {
    // Prefetch ahead like the GEMV kernels do, so this measures the memory system's
    // streaming rate rather than the hardware prefetcher's reach.
    _mm_prefetch(reinterpret_cast<const char*>(p + i + 4096), _MM_HINT_T0);
    _mm_prefetch(reinterpret_cast<const char*>(p + i + 4096 + 64), _MM_HINT_T0);
    _mm_prefetch(reinterpret_cast<const char*>(p + i + 4096 + 128), _MM_HINT_T0);
    _mm_prefetch(reinterpret_cast<const char*>(p + i + 4096 + 192), _MM_HINT_T0);
    a = _mm512_xor_si512(a, _mm512_load_si512(p + i));
    b = _mm512_xor_si512(b, _mm512_load_si512(p + i + 64));
    c = _mm512_xor_si512(c, _mm512_load_si512(p + i + 128));
    d = _mm512_xor_si512(d, _mm512_load_si512(p + i + 192));
  }
  alignas(64) uint64_t out[8];
  _mm512_store_si512(out, _mm512_xor_si512(_mm512_xor_si512(a, b), _mm512_xor_si512(c, d)));
  return out[0] ^ out[7];
}

}  // namespace gannet::bench::avx512
