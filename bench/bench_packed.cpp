// Packed-weight matmul micro-benchmarks: decode GEMV bytes/s (weights plus scales, the
// bytes a decode step really reads; compare BM_ReadBandwidth) and prefill GEMM FLOP/s,
// per format. Weights rotate over copies larger than the last-level cache. The kernel
// path is active_isa(): GANNET_ISA=avx2 (or scalar, avx512) picks one; the label names it.
#include <benchmark/benchmark.h>

#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "core/cpu_features.h"
#include "core/thread_pool.h"
#include "kernels/cpu/packed_matmul.h"

namespace {

using gannet::kernels::PackedWeight;
using gannet::kernels::WeightFormat;

constexpr int64_t kRotateBytes = int64_t(256) << 20;

// Args: format, n, k, m, threads. e8m0_fp8: FP8 with V4.1's E8M0 32 x 32 scale blocks
// (power-of-two scales, which the AVX2 GEMV folds into x) instead of F32 128 x 128;
// fp8_subnormals: FP8 with subnormal codes in every row.
void packed_matmul(benchmark::State& state, bool e8m0_fp8, bool fp8_subnormals = false) {
  const auto f = WeightFormat(state.range(0));
  const int64_t n = state.range(1), k = state.range(2), m = state.range(3);
  const int threads = int(state.range(4));
  PackedWeight w;
  w.format = f;
  w.n = n;
  w.k = k;
  if (f == WeightFormat::kFp8Block) w.block_n = w.block_k = 128, w.scale_dtype = gannet::DType::F32;
  if (f == WeightFormat::kFp8Block && e8m0_fp8) w.block_n = w.block_k = 32, w.scale_dtype = gannet::DType::F8_E8M0;
  if (f == WeightFormat::kMxfp4) w.block_n = 1, w.block_k = 32, w.scale_dtype = gannet::DType::F8_E8M0;
  if (f == WeightFormat::kInt8Row) w.block_n = 1, w.block_k = k, w.scale_dtype = gannet::DType::F32;
  const bool scaled = f == WeightFormat::kFp8Block || f == WeightFormat::kMxfp4 || f == WeightFormat::kInt8Row;
  std::vector<float> scale_f32(size_t(w.scale_rows() * w.scale_cols()), 0.01f);
  std::vector<uint8_t> scale_e8m0(scale_f32.size(), 120);
  if (scaled) w.scales = w.scale_dtype == gannet::DType::F32 ? static_cast<const void*>(scale_f32.data()) : scale_e8m0.data();
  const int64_t bytes = int64_t(w.data_bytes());
  const int64_t copies = m == 1 ? std::max<int64_t>(1, kRotateBytes / bytes) : 1;
  std::vector<uint8_t> data(size_t(copies * bytes));
  std::mt19937 rng(1);
  for (auto& b : data) b = uint8_t(rng() & 0x77);  // finite codes in every small format
  // FP8: 1/8 of these codes are subnormal, far more than in checkpoints (about 1 in 10^4
  // in make-model's), and every row then takes the kernels' f16 route
  // (PackedWeight::fp8_subnormal_rows). Made normal here, but for the *Subnormal case.
  if (f == WeightFormat::kFp8Block && !fp8_subnormals)
    for (auto& b : data)
      if ((b & 0x78) == 0 && (b & 0x07) != 0) b |= 0x08;
  // Plain formats get normal numbers (denormals would time the microcode, not the kernel).
  if (f == WeightFormat::kF32)
    for (size_t i = 0; i + 4 <= data.size(); i += 4) {
      const float v = 0.5f + float(i % 97) / 97.0f;
      std::memcpy(&data[i], &v, 4);
    }
  if (f == WeightFormat::kBF16 || f == WeightFormat::kF16)
    for (size_t i = 0; i + 2 <= data.size(); i += 2) data[i + 1] = f == WeightFormat::kBF16 ? 0x3f : 0x3c;
  std::vector<float> x(size_t(m * k), 0.5f), y(size_t(m * n));
  gannet::ThreadPool pool(threads);
  w.data = data.data();
  w.scan_codes();
  const bool fp8_plain = w.fp8_plain;
  int64_t c = 0;
  for (auto _ : state) {
    w.data = data.data() + (c++ % copies) * bytes;
    w.fp8_plain = fp8_plain;  // as the loader's scan finds (the bench's codes hold no NaN)
    gannet::kernels::matmul_packed(x.data(), m, w, y.data(), &pool);
    benchmark::DoNotOptimize(y.data());
  }
  state.SetBytesProcessed(state.iterations() * int64_t(w.bytes()));
  state.counters["FLOP"] =
      benchmark::Counter(double(2 * m * n * k) * double(state.iterations()), benchmark::Counter::kIsRate);
  state.SetLabel(std::string(gannet::kernels::weight_format_name(f)) + (e8m0_fp8 ? " e8m0-32 " : " ") +
                 (fp8_subnormals ? "subnormal " : "") +
                 gannet::isa_name(gannet::active_isa()));
}

void BM_PackedMatmul(benchmark::State& state) { packed_matmul(state, false); }
void BM_PackedMatmulFp8E8m0(benchmark::State& state) { packed_matmul(state, true); }
// The f16 route of rows with subnormal codes (range 5: 1 for E8M0 32 x 32 scales).
void BM_PackedMatmulFp8Subnormal(benchmark::State& state) { packed_matmul(state, state.range(5) != 0, true); }

void args(benchmark::internal::Benchmark* b) {
  for (int f = 0; f <= int(WeightFormat::kInt8Row); ++f) {
    b->Args({f, 2048, 2048, 1, 1});  // one thread: the kernel alone, no pool on a busy machine
    b->Args({f, 2048, 2048, 2, 1});  // the few-row kernels alone (a MoE expert's rows at batch 32)
    b->Args({f, 2048, 2048, 3, 1});
    b->Args({f, 2048, 2048, 5, 1});
    b->Args({f, 2048, 2048, 32, 1});  // the prefill path alone at a decode batch of 32 (AVX2: 5 1/3 tiles)
    b->Args({f, 2048, 2048, 1, 2});
    b->Args({f, 2048, 2048, 5, 2});  // a speculative verify step of 4 drafts
    b->Args({f, 2048, 2048, 16, 2});  // decode at batch 16
    b->Args({f, 2048, 2048, 32, 2});
    b->Args({f, 2048, 2048, 64, 2});
  }
}

}  // namespace

BENCHMARK(BM_PackedMatmul)->Apply(args)->Unit(benchmark::kMicrosecond)->UseRealTime();
BENCHMARK(BM_PackedMatmulFp8E8m0)
    ->Args({int(WeightFormat::kFp8Block), 2048, 2048, 1, 1})
    ->Args({int(WeightFormat::kFp8Block), 2048, 2048, 1, 2})
    ->Args({int(WeightFormat::kFp8Block), 2048, 2048, 2, 1})  // the few-row kernels alone
    ->Args({int(WeightFormat::kFp8Block), 2048, 2048, 5, 1})
    ->Args({int(WeightFormat::kFp8Block), 2048, 2048, 5, 2})  // a verify step of 4 drafts
    ->Unit(benchmark::kMicrosecond)
    ->UseRealTime();
// V4.1 small's products at a decode batch of 32 (make-model --preset small): the bf16
// head, FP8 (E8M0 32 x 32) projections and the MoE's MXFP4 experts (4-24 rows).
BENCHMARK(BM_PackedMatmul)
    ->Args({int(WeightFormat::kBF16), 32768, 1024, 32, 2})
    ->Args({int(WeightFormat::kMxfp4), 512, 1024, 4, 1})
    ->Args({int(WeightFormat::kMxfp4), 512, 1024, 6, 1})
    ->Args({int(WeightFormat::kMxfp4), 512, 1024, 8, 1})
    ->Args({int(WeightFormat::kMxfp4), 512, 1024, 12, 1})
    ->Args({int(WeightFormat::kMxfp4), 512, 1024, 24, 1})
    ->Args({int(WeightFormat::kMxfp4), 1024, 512, 24, 1})
    ->Unit(benchmark::kMicrosecond)
    ->UseRealTime();
BENCHMARK(BM_PackedMatmulFp8E8m0)
    ->Args({int(WeightFormat::kFp8Block), 1024, 1024, 6, 1})
    ->Args({int(WeightFormat::kFp8Block), 1024, 1024, 32, 1})
    ->Args({int(WeightFormat::kFp8Block), 1024, 1024, 32, 2})
    ->Args({int(WeightFormat::kFp8Block), 2048, 384, 32, 2})
    ->Args({int(WeightFormat::kFp8Block), 512, 1024, 32, 1})  // the shared expert's w1, w3
    ->Unit(benchmark::kMicrosecond)
    ->UseRealTime();
BENCHMARK(BM_PackedMatmulFp8Subnormal)
    ->Args({int(WeightFormat::kFp8Block), 2048, 2048, 1, 1, 0})  // F32 128 x 128 scales
    ->Args({int(WeightFormat::kFp8Block), 2048, 2048, 1, 1, 1})  // E8M0 32 x 32 scales
    ->Args({int(WeightFormat::kFp8Block), 2048, 2048, 5, 1, 0})
    ->Args({int(WeightFormat::kFp8Block), 2048, 2048, 5, 1, 1})
    ->Unit(benchmark::kMicrosecond)
    ->UseRealTime();
