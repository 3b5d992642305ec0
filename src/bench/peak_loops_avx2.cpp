#include <immintrin.h>

#include "bench/peak_loops.h"

namespace gannet::bench::avx2 {

#define GANNET_CHAINS(X) X(0) X(1) X(2) X(3) X(4) X(5) X(6) X(7) X(8) X(9) X(10) X(11)

double f32_fma(int64_t iters) {
  const __m256 a = _mm256_set1_ps(1.0000001f), b = _mm256_set1_ps(0.9999999f);
#define DECL(i) __m256 c##i = _mm256_set1_ps(float(i));
  GANNET_CHAINS(DECL)
#undef DECL
  for (int64_t it = 0; it < iters; ++it) {
#define STEP(i) c##i = _mm256_fmadd_ps(a, c##i, b);
    GANNET_CHAINS(STEP)
#undef STEP
    __asm__ volatile("" ::: "memory");
  }
  alignas(32) float out[8];
  __m256 s = _mm256_add_ps(_mm256_add_ps(_mm256_add_ps(c0, c1), _mm256_add_ps(c2, c3)),
                           _mm256_add_ps(_mm256_add_ps(c4, c5), _mm256_add_ps(c6, c7)));
  s = _mm256_add_ps(s, _mm256_add_ps(_mm256_add_ps(c8, c9), _mm256_add_ps(c10, c11)));
  _mm256_store_ps(out, s);
  return double(out[0] + out[7]);
}

uint64_t read_bytes(const uint8_t* p, size_t begin, size_t end) {
  __m256i a = _mm256_setzero_si256(), b = a, c = a, d = a;
  for (size_t i = begin; i < end; i += 128) {
    a = _mm256_xor_si256(a, _mm256_load_si256(reinterpret_cast<const __m256i*>(p + i)));
    b = _mm256_xor_si256(b, _mm256_load_si256(reinterpret_cast<const __m256i*>(p + i + 32)));
    c = _mm256_xor_si256(c, _mm256_load_si256(reinterpret_cast<const __m256i*>(p + i + 64)));
    d = _mm256_xor_si256(d, _mm256_load_si256(reinterpret_cast<const __m256i*>(p + i + 96)));
  }
  alignas(32) uint64_t out[4];
  _mm256_store_si256(reinterpret_cast<__m256i*>(out), _mm256_xor_si256(_mm256_xor_si256(a, b), _mm256_xor_si256(c, d)));
  return out[0] ^ out[3];
}

}  // namespace gannet::bench::avx2
