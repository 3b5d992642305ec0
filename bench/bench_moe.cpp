// Grouped MoE layer (src/model/moe.h): tokens/s of one layer at 1, 16 and 256 tokens on 2
// threads, next to the bytes of the experts the batch touches and the rate they are read at.
//
// Layer: 64 routed experts, top-6, hidden 2048, expert inter 1024; routed experts MXFP4
// (E8M0 scale per 32), one shared expert FP8 E4M3 with 32x32 E8M0 scales (V4.1 layout);
// bf16 router, sqrt-softplus scoring with a selection bias, routed scale 1.5, SwiGLU limit
// 10. "touched" = router + shared expert + the distinct routed experts the batch selects,
// weights plus scales (compare BM_ReadBandwidth). Several copies of the weights (over 1 GiB
// in all, beyond the last-level cache) rotate, so every call reads its experts from memory.
// Run with --benchmark_repetitions for medians.
#include <benchmark/benchmark.h>

#include <algorithm>
#include <cstring>
#include <deque>
#include <memory>
#include <random>
#include <vector>

#include "core/dtype.h"
#include "core/thread_pool.h"
#include "model/moe.h"

namespace {

using gannet::kernels::PackedWeight;
using gannet::kernels::WeightFormat;
using gannet::model::MoeConfig;
using gannet::model::MoeExpert;
using gannet::model::MoeLayer;
using gannet::model::MoeWeights;
using gannet::model::MoeWorkspace;

constexpr int64_t kHidden = 2048, kInter = 1024, kExperts = 64, kTopK = 6, kMaxTokens = 256;
constexpr uint64_t kRotateBytes = uint64_t(1) << 30;

// Bytes from a splitmix64 stream, each ANDed with mask (cheap: a GiB is filled at start-up).
void fill(std::vector<uint8_t>& v, uint64_t seed, uint8_t mask) {
  uint64_t s = seed;
  for (size_t i = 0; i < v.size(); i += 8) {
    uint64_t z = (s += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    z = (z ^ (z >> 31)) & (uint64_t(mask) * 0x0101010101010101ull);
    std::memcpy(&v[i], &z, std::min<size_t>(8, v.size() - i));
  }
}

struct Copy {
  std::deque<std::vector<uint8_t>> buffers;
  std::unique_ptr<MoeLayer> layer;
  std::vector<uint64_t> touched;  // per batch size index: bytes a call reads
  std::vector<int64_t> experts;   // distinct routed experts of that call
};

struct Setup {
  std::vector<Copy> copies;
  std::vector<float> x;  // [kMaxTokens, kHidden]
};

const void* buffer(Copy& c, size_t bytes, uint64_t seed, uint8_t mask) {
  c.buffers.emplace_back(bytes);
  fill(c.buffers.back(), seed, mask);
  return c.buffers.back().data();
}

PackedWeight quantized(Copy& c, WeightFormat f, int64_t n, int64_t k, uint64_t seed) {
  PackedWeight w;
  w.format = f;
  w.n = n;
  w.k = k;
  w.scale_dtype = gannet::DType::F8_E8M0;
  w.block_n = f == WeightFormat::kMxfp4 ? 1 : 32;
  w.block_k = 32;
  // FP8 codes with exponent <= 7 (|v| < 2, never NaN); any FP4 code.
  w.data = buffer(c, w.data_bytes(), seed, f == WeightFormat::kMxfp4 ? 0xff : 0xbf);
  std::vector<uint8_t>& s = c.buffers.emplace_back(size_t(w.scale_rows() * w.scale_cols()));
  for (size_t i = 0; i < s.size(); ++i) s[i] = uint8_t(120 + (i * 7 + seed) % 4);  // 2^-7 .. 2^-4
  w.scales = s.data();
  return w;
}

const Setup& setup() {
  static const Setup s = [] {
    Setup st;
    MoeConfig cfg;
    cfg.hidden = kHidden;
    cfg.n_experts = kExperts;
    cfg.top_k = kTopK;
    cfg.n_shared = 1;
    cfg.routed_scaling_factor = 1.5f;
    cfg.swiglu_limit = 10.0f;
    std::mt19937 g(1);
    std::normal_distribution<float> nd(0.0f, 1.0f);
    st.x.resize(size_t(kMaxTokens * kHidden));
    for (float& v : st.x) v = nd(g);
    uint64_t layer_bytes = 0;
    for (size_t c = 0; c == 0 || uint64_t(c) * layer_bytes < kRotateBytes; ++c) {
      Copy& cp = st.copies.emplace_back();
      MoeWeights w;
      uint64_t seed = 1000 * c;
      std::uniform_real_distribution<float> u(-0.05f, 0.05f);
      std::vector<uint8_t>& r = cp.buffers.emplace_back(size_t(kExperts * kHidden * 2));
      for (size_t i = 0; i < r.size(); i += 2) {
        const uint16_t h = gannet::f32_to_bf16(u(g));
        std::memcpy(&r[i], &h, 2);
      }
      w.router.format = WeightFormat::kBF16;
      w.router.n = kExperts;
      w.router.k = kHidden;
      w.router.data = r.data();
      for (int64_t e = 0; e < kExperts; ++e) w.selection_bias.push_back(0.1f * nd(g));
      auto expert = [&](WeightFormat f) {
        MoeExpert x;
        x.w1 = quantized(cp, f, kInter, kHidden, ++seed);
        x.w3 = quantized(cp, f, kInter, kHidden, ++seed);
        x.w2 = quantized(cp, f, kHidden, kInter, ++seed);
        return x;
      };
      for (int64_t e = 0; e < kExperts; ++e) w.experts.push_back(expert(WeightFormat::kMxfp4));
      w.shared.push_back(expert(WeightFormat::kFp8Block));
      cp.layer = std::make_unique<MoeLayer>(cfg, std::move(w));
      layer_bytes = 0;
      for (const auto& b : cp.buffers) layer_bytes += b.size();
    }
    // What each batch size touches, from the routing itself.
    gannet::ThreadPool pool(2);
    MoeWorkspace ws;
    std::vector<float> y(st.x.size());
    for (Copy& cp : st.copies) {
      const MoeWeights& w = cp.layer->weights();
      const uint64_t per_expert = w.experts[0].w1.bytes() + w.experts[0].w3.bytes() + w.experts[0].w2.bytes();
      const uint64_t fixed = w.router.bytes() + w.shared[0].w1.bytes() + w.shared[0].w3.bytes() + w.shared[0].w2.bytes();
      for (int64_t n : {1, 16, 256}) {
        cp.layer->route_isa(gannet::active_isa(), st.x.data(), n, ws, &pool);
        std::vector<int32_t> ids(ws.expert_ids(), ws.expert_ids() + n * kTopK);
        std::sort(ids.begin(), ids.end());
        const int64_t distinct = std::unique(ids.begin(), ids.end()) - ids.begin();
        cp.experts.push_back(distinct);
        cp.touched.push_back(fixed + uint64_t(distinct) * per_expert);
      }
    }
    return st;
  }();
  return s;
}

// Arg: tokens (1, 16 or 256).
void BM_MoeLayer(benchmark::State& state) {
  const Setup& s = setup();
  const int64_t n = state.range(0);
  const size_t which = n == 1 ? 0 : n == 16 ? 1 : 2;
  gannet::ThreadPool pool(2);
  MoeWorkspace ws;
  ws.reserve(*s.copies[0].layer, n);
  std::vector<float> y(size_t(n * kHidden));
  uint64_t bytes = 0, experts = 0;
  size_t c = 0;
  for (auto _ : state) {
    const Copy& cp = s.copies[c++ % s.copies.size()];
    cp.layer->forward(s.x.data(), n, y.data(), ws, &pool);
    benchmark::DoNotOptimize(y.data());
    bytes += cp.touched[which];
    experts += uint64_t(cp.experts[which]);
  }
  const double iters = double(state.iterations());
  state.SetBytesProcessed(int64_t(bytes));
  state.counters["tok/s"] = benchmark::Counter(double(n) * iters, benchmark::Counter::kIsRate);
  state.counters["experts"] = double(experts) / iters;
  state.counters["touched_MB"] = double(bytes) / iters / 1e6;
}

}  // namespace

BENCHMARK(BM_MoeLayer)->Arg(1)->Arg(16)->Arg(256)->ArgName("tokens")->UseRealTime()->Unit(benchmark::kMillisecond);
