// Instruction-throughput loops for the roofline: each runs `iters` iterations of
// independent chains of one instruction kind and returns a value the compiler cannot
// drop. Per-ISA variants live in peak_loops_avx512.cpp / peak_loops_avx2.cpp.
#pragma once

#include <cstddef>
#include <cstdint>

namespace gannet::bench {

// FLOPs (or integer ops) one iteration performs, per variant.
struct PeakLoop {
  double (*run)(int64_t iters);
  double ops_per_iter;
};

namespace avx512 {
double f32_fma(int64_t iters);    // 12 chains x 16 lanes x 2 FLOPs
double bf16_dot(int64_t iters);   // 12 chains x 32 bf16 pairs... x 2
double int8_dot(int64_t iters);   // 12 chains x 64 u8*s8 x 2
uint64_t read_bytes(const uint8_t* p, size_t begin, size_t end);
}  // namespace avx512

namespace avx2 {
double f32_fma(int64_t iters);    // 12 chains x 8 lanes x 2 FLOPs
uint64_t read_bytes(const uint8_t* p, size_t begin, size_t end);
}  // namespace avx2

uint64_t read_bytes_sse2(const uint8_t* p, size_t begin, size_t end);

constexpr int kPeakChains = 12;

}  // namespace gannet::bench
