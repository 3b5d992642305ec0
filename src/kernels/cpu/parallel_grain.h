// How the matrix products split work over the thread pool (matmul, packed_matmul,
// lane_gemm; kMinParallelMacs also for DeepSeek's attention and indexer). Which thread computes an output never changes its bits: these are speed
// decisions only.
#pragma once

#include <cstdint>

namespace gannet::kernels {

// Column ranges handed to threads are multiples of this, so they start on tile edges of
// most variants (register tiles are 1, 2, 4 or, AVX-512 bf16 prefill, 6 columns wide; a
// range there may end in a narrower edge tile, which is only a speed matter: each output
// keeps its own accumulator wherever tiles fall).
inline constexpr int64_t kColumnGrain = 16;

// Below this many multiply-adds a call runs on the calling thread: waking the pool costs
// more than the work (tiny models, test shapes).
inline constexpr int64_t kMinParallelMacs = int64_t(1) << 17;
// ... unless the weights it streams take at least this many bytes: a one-row product of
// f32 or bf16 weights is bound by reading them (DeepSeek's mHC and router projections,
// 256-384 KiB each, ran on one thread at about 60 % of a 2-thread read).
inline constexpr int64_t kMinParallelBytes = int64_t(1) << 17;

}  // namespace gannet::kernels
