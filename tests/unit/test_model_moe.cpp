// The grouped MoE layer (model/moe.h) against a naive per-token loop written here from the
// specification in moe.h (router by canonical dots of dequantized rows, stable-sort top-k,
// experts one output at a time, combine in expert id order), bit for bit: over scorings,
// biases, weight formats, odd shapes, clamps, every kernel path and 1 or 2 threads. Also:
// a token's output does not depend on the other tokens of its batch, ties go to the lower
// expert id, invalid configurations are refused naming the field, and the workspace stops
// growing once reserved.
// labels: exact
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <deque>
#include <functional>
#include <numeric>
#include <random>
#include <string>
#include <vector>

#include "core/dtype.h"
#include "core/error.h"
#include "core/thread_pool.h"
#include "kernels/cpu/canonical.h"
#include "kernels/cpu/exp.h"
#include "kernels/cpu/log.h"
#include "kernels/cpu/fake_quant.h"
#include "model/moe.h"

using namespace gannet;
using namespace gannet::kernels;
using namespace gannet::model;

namespace {

// ---- test-owned weights -------------------------------------------------------------

struct Owned {
  std::vector<uint8_t> data, scales;
  PackedWeight w;
};

// Random codes of format f, shape [n, k]; fp8 either with 32x32 E8M0 scales (V4.1) or
// 128x128 f32 scales (V3), chosen by f32_scales.
Owned make_weight(WeightFormat f, int64_t n, int64_t k, std::mt19937& g, bool f32_scales = false) {
  Owned o;
  PackedWeight& w = o.w;
  w.format = f;
  w.n = n;
  w.k = k;
  std::uniform_real_distribution<float> u(-0.5f, 0.5f);
  switch (f) {
    case WeightFormat::kF32:
      o.data.resize(size_t(n * k) * 4);
      for (int64_t i = 0; i < n * k; ++i) {
        const float v = u(g);
        std::memcpy(&o.data[size_t(i) * 4], &v, 4);
      }
      break;
    case WeightFormat::kBF16:
    case WeightFormat::kF16:
      o.data.resize(size_t(n * k) * 2);
      for (int64_t i = 0; i < n * k; ++i) {
        const uint16_t h = f == WeightFormat::kBF16 ? f32_to_bf16(u(g)) : f32_to_f16(u(g));
        std::memcpy(&o.data[size_t(i) * 2], &h, 2);
      }
      break;
    case WeightFormat::kFp8Block:
      o.data.resize(size_t(n * k));
      for (auto& b : o.data) b = uint8_t(g()) & 0xbf;  // exponent <= 7: |v| < 2, never NaN
      w.block_n = w.block_k = f32_scales ? 128 : 32;
      w.scale_dtype = f32_scales ? DType::F32 : DType::F8_E8M0;
      break;
    case WeightFormat::kMxfp4:
      o.data.resize(size_t(n * ((k + 1) / 2)));
      for (auto& b : o.data) b = uint8_t(g());
      w.block_n = 1;
      w.block_k = 32;
      w.scale_dtype = DType::F8_E8M0;
      break;
    case WeightFormat::kInt8Row:
      o.data.resize(size_t(n * k));
      for (auto& b : o.data) b = uint8_t(g());
      w.block_n = 1;
      w.block_k = k;
      w.scale_dtype = DType::F32;
      break;
  }
  if (f == WeightFormat::kFp8Block || f == WeightFormat::kMxfp4 || f == WeightFormat::kInt8Row) {
    const int64_t cnt = w.scale_rows() * w.scale_cols();
    o.scales.resize(size_t(cnt) * dtype_size(w.scale_dtype));
    for (int64_t i = 0; i < cnt; ++i) {
      if (w.scale_dtype == DType::F8_E8M0) {
        o.scales[size_t(i)] = uint8_t(121 + g() % 6);  // 2^-6 .. 2^-1
      } else {
        const float s = f == WeightFormat::kInt8Row ? 0.001f + 0.0001f * float(g() % 100) : 0.05f + 0.01f * float(g() % 40);
        std::memcpy(&o.scales[size_t(i) * 4], &s, 4);
      }
    }
    w.scales = o.scales.data();
  }
  w.data = o.data.data();
  return o;
}

struct Spec {
  int64_t hidden = 64, inter = 48, experts = 8, top_k = 2, shared = 0, shared_inter = 48;
  MoeScoring scoring = MoeScoring::kSqrtSoftplus;
  bool bias = false, norm = true, round_bf16 = false;
  int64_t act_quant = 0;
  float scale = 1.0f, limit = 0.0f, temp = 1.0f;
  WeightFormat router = WeightFormat::kBF16, routed = WeightFormat::kMxfp4, shared_fmt = WeightFormat::kFp8Block;
  bool shared_f32_scales = false;
  uint32_t seed = 1;
};

struct Model {
  std::deque<Owned> owned;  // the buffers the weights point into
  MoeConfig cfg;
  MoeWeights w;
};

const PackedWeight& keep(Model& m, Owned o) {
  m.owned.push_back(std::move(o));
  return m.owned.back().w;
}

Model build(const Spec& s) {
  std::mt19937 g(s.seed);
  Model m;
  m.cfg.hidden = s.hidden;
  m.cfg.n_experts = s.experts;
  m.cfg.top_k = s.top_k;
  m.cfg.n_shared = s.shared;
  m.cfg.scoring = s.scoring;
  m.cfg.norm_topk_prob = s.norm;
  m.cfg.routed_scaling_factor = s.scale;
  m.cfg.swiglu_limit = s.limit;
  m.cfg.gate_temp = s.temp;
  m.cfg.round_hidden_bf16 = s.round_bf16;
  m.cfg.act_quant_block = s.act_quant;
  m.w.router = keep(m, make_weight(s.router, s.experts, s.hidden, g));
  if (s.bias) {
    std::uniform_real_distribution<float> b(-0.3f, 0.3f);
    for (int64_t e = 0; e < s.experts; ++e) m.w.selection_bias.push_back(b(g));
  }
  auto expert = [&](WeightFormat f, int64_t inter, bool f32_scales) {
    MoeExpert x;
    x.w1 = keep(m, make_weight(f, inter, s.hidden, g, f32_scales));
    x.w3 = keep(m, make_weight(f, inter, s.hidden, g, f32_scales));
    x.w2 = keep(m, make_weight(f, s.hidden, inter, g, f32_scales));
    return x;
  };
  for (int64_t e = 0; e < s.experts; ++e) m.w.experts.push_back(expert(s.routed, s.inter, false));
  for (int64_t e = 0; e < s.shared; ++e) m.w.shared.push_back(expert(s.shared_fmt, s.shared_inter, s.shared_f32_scales));
  return m;
}

std::vector<float> random_tokens(int64_t n, int64_t hidden, uint32_t seed) {
  std::mt19937 g(seed);
  std::normal_distribution<float> nd(0.0f, 1.0f);
  std::vector<float> x(size_t(n * hidden));
  for (float& v : x) v = nd(g);
  return x;
}

// ---- the naive per-token loop -----------------------------------------------------------

std::vector<float> dequant(const PackedWeight& w, int64_t r) {
  std::vector<float> row(static_cast<size_t>(w.k));
  w.dequant_row(r, row.data());
  return row;
}

float dot_row(const float* x, const PackedWeight& w, int64_t r) { return dot_f32_ref(x, dequant(w, r).data(), w.k); }

// One expert on one token: clamped SwiGLU, weight before the down projection.
std::vector<float> naive_expert(const MoeConfig& c, const MoeExpert& ex, const float* x_in, bool routed, float weight) {
  const int64_t inter = ex.w1.n;
  std::vector<float> xq(x_in, x_in + c.hidden);
  if (c.act_quant_block > 0) fake_quant_fp8(xq.data(), c.hidden, c.act_quant_block, true);
  const float* x = xq.data();
  const bool clamp = c.swiglu_limit > 0.0f && std::isfinite(c.swiglu_limit);
  const float L = c.swiglu_limit;
  std::vector<float> h(static_cast<size_t>(inter));
  for (int64_t i = 0; i < inter; ++i) {
    float g = dot_row(x, ex.w1, i), u = dot_row(x, ex.w3, i);
    if (clamp) {
      if (u > L) u = L;
      if (u < -L) u = -L;
      if (g > L) g = L;
    }
    float v = (g / (1.0f + exp_f32(-g))) * u;
    if (routed) v = v * weight;
    if (c.round_hidden_bf16) v = bf16_to_f32(f32_to_bf16(v));
    h[size_t(i)] = v;
  }
  if (c.act_quant_block > 0) fake_quant_fp8(h.data(), inter, c.act_quant_block, true);
  std::vector<float> out(static_cast<size_t>(c.hidden));
  for (int64_t j = 0; j < c.hidden; ++j) out[size_t(j)] = dot_row(h.data(), ex.w2, j);
  return out;
}

struct NaiveRouting {
  std::vector<int32_t> ids;  // ascending
  std::vector<float> weights;
};

NaiveRouting naive_route(const MoeConfig& c, const MoeWeights& w, const float* x) {
  const int64_t E = c.n_experts;
  std::vector<float> s(static_cast<size_t>(E));
  for (int64_t e = 0; e < E; ++e) s[size_t(e)] = dot_row(x, w.router, e) / c.gate_temp;
  switch (c.scoring) {
    case MoeScoring::kSqrtSoftplus:
      for (float& v : s) v = std::sqrt(v > 20.0f ? v : log1p_f32(exp_f32(v)));
      break;
    case MoeScoring::kSoftmax: {
      const float mx = *std::max_element(s.begin(), s.end());
      for (float& v : s) v = exp_f32(v - mx);
      const float sum = sum_f32_ref(s.data(), E);
      for (float& v : s) v = v / sum;
      break;
    }
    case MoeScoring::kSigmoid:
      for (float& v : s) v = 1.0f / (1.0f + exp_f32(-v));
      break;
  }
  std::vector<float> sel(s);
  if (!w.selection_bias.empty())
    for (int64_t e = 0; e < E; ++e) sel[size_t(e)] = s[size_t(e)] + w.selection_bias[size_t(e)];
  std::vector<int32_t> order(static_cast<size_t>(E));
  std::iota(order.begin(), order.end(), 0);
  std::stable_sort(order.begin(), order.end(), [&](int32_t a, int32_t b) { return sel[size_t(a)] > sel[size_t(b)]; });
  NaiveRouting r;
  r.ids.assign(order.begin(), order.begin() + c.top_k);
  std::sort(r.ids.begin(), r.ids.end());
  for (int32_t e : r.ids) r.weights.push_back(s[size_t(e)]);
  if (c.norm_topk_prob && c.top_k > 1) {
    float sum = r.weights[0];
    for (size_t i = 1; i < r.weights.size(); ++i) sum = sum + r.weights[i];
    for (float& v : r.weights) v = v / (sum + 1e-20f);
  }
  for (float& v : r.weights) v = v * c.routed_scaling_factor;
  return r;
}

std::vector<float> naive_moe(const MoeConfig& c, const MoeWeights& w, const std::vector<float>& x, int64_t T) {
  const int64_t H = c.hidden;
  std::vector<float> y(size_t(T * H));
  for (int64_t t = 0; t < T; ++t) {
    const float* xt = x.data() + t * H;
    const NaiveRouting r = naive_route(c, w, xt);
    std::vector<float> acc;
    for (size_t i = 0; i < r.ids.size(); ++i) {
      const std::vector<float> o = naive_expert(c, w.experts[size_t(r.ids[i])], xt, true, r.weights[i]);
      if (i == 0) acc = o;
      else
        for (int64_t j = 0; j < H; ++j) acc[size_t(j)] = acc[size_t(j)] + o[size_t(j)];
    }
    for (const MoeExpert& sh : w.shared) {
      const std::vector<float> o = naive_expert(c, sh, xt, false, 1.0f);
      for (int64_t j = 0; j < H; ++j) acc[size_t(j)] = acc[size_t(j)] + o[size_t(j)];
    }
    std::copy(acc.begin(), acc.end(), y.begin() + t * H);
  }
  return y;
}

// ---- helpers ------------------------------------------------------------------------

std::vector<float> run(const MoeLayer& layer, const std::vector<float>& x, int64_t T, Isa isa, ThreadPool* pool) {
  MoeWorkspace ws;
  std::vector<float> y(size_t(T * layer.config().hidden), NAN);
  layer.forward_isa(isa, x.data(), T, y.data(), ws, pool);
  return y;
}

// Empty when a and b are equal bit for bit, else where they first differ.
std::string bit_diff(const std::vector<float>& a, const std::vector<float>& b, int64_t hidden) {
  if (a.size() != b.size()) return "sizes differ";
  for (size_t i = 0; i < a.size(); ++i)
    if (std::memcmp(&a[i], &b[i], 4) != 0)
      return detail::concat("token ", int64_t(i) / hidden, " column ", int64_t(i) % hidden, ": ", a[i], " vs ", b[i]);
  return "";
}

const Isa kIsas[] = {Isa::kScalar, Isa::kAvx2, Isa::kAvx512};

bool all_finite(const std::vector<float>& v) {
  return std::all_of(v.begin(), v.end(), [](float f) { return std::isfinite(f); });
}

}  // namespace

TEST(ModelMoe, MatchesNaiveLoop) {
  using WF = WeightFormat;
  using SC = MoeScoring;
  std::vector<Spec> specs;
  auto add = [&](auto fn) {
    Spec s;
    s.seed = uint32_t(specs.size() + 11);
    fn(s);
    specs.push_back(s);
  };
  add([](Spec&) {});  // 64/48, 8 experts, top-2, mxfp4, bf16 router
  add([](Spec& s) {   // V4-like: bias, scale 1.5, limit 10, fp8 shared with its own inter
    s.hidden = 96, s.experts = 16, s.top_k = 6, s.shared = 1, s.shared_inter = 64, s.bias = true, s.scale = 1.5f,
    s.limit = 10.0f;
  });
  add([](Spec& s) {  // odd shapes, softmax, no renormalisation, V3-style fp8 with f32 128x128 scales
    s.hidden = 67, s.inter = 37, s.experts = 12, s.top_k = 3, s.shared = 1, s.scoring = SC::kSoftmax, s.norm = false,
    s.router = WF::kF32, s.routed = WF::kFp8Block, s.shared_fmt = WF::kBF16;
    s.shared_f32_scales = true;
  });
  add([](Spec& s) {  // sigmoid with bias, two shared experts, active clamp, temperature
    s.hidden = 70, s.experts = 10, s.top_k = 4, s.shared = 2, s.shared_inter = 24, s.scoring = SC::kSigmoid,
    s.bias = true, s.scale = 2.5f, s.limit = 1.0f, s.temp = 0.7f, s.routed = WF::kF16, s.shared_fmt = WF::kInt8Row;
  });
  add([](Spec& s) {  // the V4 reference's bf16 hidden
    s.experts = 16, s.top_k = 5, s.shared = 1, s.bias = true, s.scale = 1.5f, s.limit = 0.5f, s.temp = 0.8f,
    s.round_bf16 = true;
  });
  add([](Spec& s) {  // every expert selected; infinite limit = no clamp
    s.hidden = 96, s.inter = 40, s.experts = 9, s.top_k = 9, s.scoring = SC::kSoftmax, s.bias = true,
    s.limit = INFINITY, s.router = WF::kF32, s.routed = WF::kF32;
  });
  add([](Spec& s) {  // top-1: no renormalisation even with norm_topk_prob
    s.hidden = 80, s.experts = 8, s.top_k = 1, s.shared = 1, s.scoring = SC::kSigmoid, s.scale = 2.0f,
    s.limit = 3.0f, s.routed = WF::kInt8Row;
  });
  add([](Spec& s) {
    s.inter = 64, s.experts = 14, s.top_k = 2, s.bias = true, s.norm = false, s.limit = 10.0f, s.temp = 1.3f;
  });
  add([](Spec& s) {  // V4.1 exact mode: FQ8 / 32 of x and h before the expert products
    s.hidden = 96, s.inter = 64, s.experts = 8, s.top_k = 3, s.shared = 1, s.shared_inter = 64, s.bias = true,
    s.scale = 1.5f, s.limit = 10.0f, s.act_quant = 32;
  });

  ThreadPool pool1(1), pool2(2);
  int checked = 0;
  // 9 tokens: every expert below the lane GEMM's 16 rows; 40: the shared experts and the
  // busiest routed ones above it, the rest below.
  for (int64_t T : {9, 40})
  for (size_t i = 0; i < specs.size(); ++i) {
    Model m = build(specs[i]);
    const MoeLayer layer(m.cfg, m.w);
    const std::vector<float> x = random_tokens(T, specs[i].hidden, uint32_t(100 + i));
    const std::vector<float> want = naive_moe(m.cfg, m.w, x, T);
    ASSERT_TRUE(all_finite(want)) << "spec " << i;
    for (Isa isa : kIsas) {
      if (!isa_supported(isa)) continue;
      for (ThreadPool* p : {static_cast<ThreadPool*>(nullptr), &pool1, &pool2}) {
        const std::string d = bit_diff(run(layer, x, T, isa, p), want, specs[i].hidden);
        ASSERT_EQ(d, "") << "T " << T << " spec " << i << " (" << moe_scoring_name(specs[i].scoring) << ", "
                         << weight_format_name(specs[i].routed) << ") " << isa_name(isa) << " "
                         << (p ? p->size() : 0) << " threads";
        ++checked;
      }
    }
  }
  EXPECT_GE(checked, 2 * int(specs.size()) * 3);
}

TEST(ModelMoe, TokenOutputIndependentOfBatch) {
  Spec s;
  s.hidden = 96, s.experts = 16, s.top_k = 4, s.shared = 1, s.bias = true, s.scale = 1.5f, s.limit = 10.0f;
  Model m = build(s);
  const MoeLayer layer(m.cfg, m.w);
  ThreadPool pool(2);
  const int64_t H = s.hidden;
  const std::vector<float> probes = random_tokens(3, H, 7);  // the tokens followed
  for (int64_t p = 0; p < 3; ++p) {
    const std::vector<float> probe(probes.begin() + p * H, probes.begin() + (p + 1) * H);
    const std::vector<float> alone = run(layer, probe, 1, active_isa(), &pool);
    ASSERT_EQ(bit_diff(alone, naive_moe(m.cfg, m.w, probe, 1), H), "") << "probe " << p;
    for (int64_t n : {1, 7, 33}) {
      for (uint32_t variant = 0; variant < 2; ++variant) {  // two different sets of neighbours
        std::vector<float> batch = random_tokens(n, H, uint32_t(1000 * n + 10 * p + variant));
        const int64_t at = (n * (variant + 1)) / 3 % n;
        std::copy(probe.begin(), probe.end(), batch.begin() + at * H);
        const std::vector<float> y = run(layer, batch, n, active_isa(), &pool);
        const std::vector<float> row(y.begin() + at * H, y.begin() + (at + 1) * H);
        ASSERT_EQ(bit_diff(row, alone, H), "") << "probe " << p << " at " << at << " of " << n;
      }
    }
  }
}

TEST(ModelMoe, ThreadCountsAgree) {
  Spec s;  // several column tiles per expert, uneven expert loads
  s.hidden = 128, s.inter = 96, s.experts = 16, s.top_k = 3, s.shared = 1, s.shared_inter = 80, s.bias = true,
  s.limit = 10.0f;
  Model m = build(s);
  const MoeLayer layer(m.cfg, m.w);
  const int64_t T = 33;
  const std::vector<float> x = random_tokens(T, s.hidden, 3);
  const std::vector<float> want = naive_moe(m.cfg, m.w, x, T);
  ThreadPool one(1), two(2);
  for (Isa isa : kIsas) {
    if (!isa_supported(isa)) continue;
    EXPECT_EQ(bit_diff(run(layer, x, T, isa, &one), want, s.hidden), "") << isa_name(isa) << " 1 thread";
    EXPECT_EQ(bit_diff(run(layer, x, T, isa, &two), want, s.hidden), "") << isa_name(isa) << " 2 threads";
  }
}

// Router rows built so that scores tie exactly: the lower expert id must win, in the layer
// and in the naive loop (which sorts stably); the chosen ids are also checked directly.
TEST(ModelMoe, TiesGoToTheLowerExpertId) {
  struct Case {
    float high;         // router row value of experts 1, 4, 6 (the others are 0)
    bool bias;          // instead: all rows 0, bias 0.25 on experts 3, 5, 7
    int64_t top_k;
    std::vector<int32_t> want;
  };
  const Case cases[] = {
      {0.05f, false, 2, {1, 4}},  {0.05f, false, 5, {0, 1, 2, 4, 6}},
      {0.5f, false, 2, {1, 4}},   // logits above softplus's threshold of 20
      {0.0f, true, 2, {3, 5}},    {0.0f, true, 4, {0, 3, 5, 7}},
  };
  ThreadPool pool(2);
  const int64_t T = 3, H = 64, E = 8;
  std::vector<float> x = random_tokens(T, H, 9);
  for (float& v : x) v = 0.5f + std::fabs(v);  // positive: the tied rows score above the zero rows
  for (MoeScoring sc : {MoeScoring::kSqrtSoftplus, MoeScoring::kSoftmax, MoeScoring::kSigmoid})
    for (const Case& c : cases) {
      Spec s;
      s.hidden = H, s.experts = E, s.top_k = c.top_k, s.scoring = sc, s.router = WeightFormat::kF32;
      s.shared = 1;
      Model m = build(s);
      std::vector<float> router(size_t(E * H), 0.0f);
      if (!c.bias)
        for (int64_t e : {1, 4, 6}) std::fill(router.begin() + e * H, router.begin() + (e + 1) * H, c.high);
      std::memcpy(m.owned.front().data.data(), router.data(), router.size() * 4);  // the router's buffer
      if (c.bias) {
        m.w.selection_bias.assign(size_t(E), 0.0f);
        for (int64_t e : {3, 5, 7}) m.w.selection_bias[size_t(e)] = 0.25f;
      }
      const MoeLayer layer(m.cfg, m.w);
      const std::string what = detail::concat(moe_scoring_name(sc), " top_k ", c.top_k, c.bias ? " bias" : "");
      for (int64_t t = 0; t < T; ++t) ASSERT_EQ(naive_route(m.cfg, m.w, x.data() + t * H).ids, c.want) << what;
      MoeWorkspace ws;
      std::vector<float> y(size_t(T * H));
      layer.forward_isa(active_isa(), x.data(), T, y.data(), ws, &pool);
      for (int64_t t = 0; t < T; ++t) {
        const std::vector<int32_t> got(ws.expert_ids() + t * c.top_k, ws.expert_ids() + (t + 1) * c.top_k);
        EXPECT_EQ(got, c.want) << what << " token " << t;
      }
      EXPECT_EQ(bit_diff(y, naive_moe(m.cfg, m.w, x, T), H), "") << what;
    }
}

// Sigmoid scores of very negative logits sum far below 1e-20: the renormalisation's
// epsilon then dominates the denominator (the weights stay tiny instead of summing to 1).
TEST(ModelMoe, EpsilonGuardsTinyScoreSums) {
  Spec s;
  s.hidden = 64, s.experts = 8, s.top_k = 3, s.scoring = MoeScoring::kSigmoid, s.router = WeightFormat::kF32;
  Model m = build(s);
  const int64_t T = 4, H = s.hidden;
  std::vector<float> router(size_t(s.experts * H));
  for (int64_t e = 0; e < s.experts; ++e)
    std::fill(router.begin() + e * H, router.begin() + (e + 1) * H, -0.7f - 0.01f * float(e % 3));
  std::memcpy(m.owned.front().data.data(), router.data(), router.size() * 4);
  std::vector<float> x = random_tokens(T, H, 13);
  for (float& v : x) v = 0.5f + std::fabs(v);  // logits about -60: scores about 1e-26
  const MoeLayer layer(m.cfg, m.w);
  for (int64_t t = 0; t < T; ++t) {
    const NaiveRouting r = naive_route(m.cfg, m.w, x.data() + t * H);
    const float sum = std::accumulate(r.weights.begin(), r.weights.end(), 0.0f);
    ASSERT_GT(sum, 0.0f);
    ASSERT_LT(sum, 0.5f) << "the epsilon did not dominate for token " << t;
  }
  ThreadPool pool(2);
  EXPECT_EQ(bit_diff(run(layer, x, T, active_isa(), &pool), naive_moe(m.cfg, m.w, x, T), H), "");
}

// Each option changes the naive result (so the comparison can catch an implementation
// that ignores it) and the layer follows it.
TEST(ModelMoe, EveryOptionTakesEffect) {
  Spec base;
  base.hidden = 64, base.experts = 12, base.top_k = 3, base.shared = 1, base.seed = 5;
  const std::vector<std::pair<const char*, std::function<void(Spec&)>>> options = {
      {"swiglu_limit", [](Spec& s) { s.limit = 0.25f; }},
      {"round_hidden_bf16", [](Spec& s) { s.round_bf16 = true; }},
      {"act_quant_block", [](Spec& s) { s.act_quant = 32; }},
      {"gate_temp", [](Spec& s) { s.temp = 0.6f; }},
      {"selection_bias", [](Spec& s) { s.bias = true; }},
      {"routed_scaling_factor", [](Spec& s) { s.scale = 1.5f; }},
      {"norm_topk_prob", [](Spec& s) { s.norm = false; }},
      {"scoring softmax", [](Spec& s) { s.scoring = MoeScoring::kSoftmax; }},
      {"scoring sigmoid", [](Spec& s) { s.scoring = MoeScoring::kSigmoid; }},
  };
  const int64_t T = 8;
  const std::vector<float> x = random_tokens(T, base.hidden, 21);
  Model off = build(base);
  const std::vector<float> y_off = naive_moe(off.cfg, off.w, x, T);
  ThreadPool pool(2);
  for (const auto& [name, set] : options) {
    Spec s = base;
    set(s);
    Model m = build(s);  // same seed: same weights, the bias drawn last
    const std::vector<float> want = naive_moe(m.cfg, m.w, x, T);
    EXPECT_NE(bit_diff(want, y_off, base.hidden), "") << name << " changes nothing in this setup";
    EXPECT_EQ(bit_diff(run(MoeLayer(m.cfg, m.w), x, T, active_isa(), &pool), want, base.hidden), "") << name;
  }
}

namespace {
void expect_error_naming(const std::function<void()>& fn, const std::string& field) {
  try {
    fn();
    ADD_FAILURE() << "accepted; expected an error naming " << field;
  } catch (const gannet::Error& e) {
    EXPECT_NE(std::string(e.what()).find(field), std::string::npos) << e.what() << " (expected " << field << ")";
  }
}
}  // namespace

TEST(ModelMoe, InvalidConfigsAreRefused) {
  Spec s;
  s.experts = 4, s.shared = 1;
  const Model m = build(s);
  auto check = [&](const std::string& field, const std::function<void(MoeConfig&, MoeWeights&)>& spoil) {
    MoeConfig c = m.cfg;
    MoeWeights w = m.w;
    spoil(c, w);
    expect_error_naming([&] { MoeLayer layer(c, w); }, field);
  };
  EXPECT_NO_THROW(MoeLayer(m.cfg, m.w));
  check("top_k", [](MoeConfig& c, MoeWeights&) { c.top_k = 5; });
  check("top_k", [](MoeConfig& c, MoeWeights&) { c.top_k = 0; });
  check("hidden", [](MoeConfig& c, MoeWeights&) { c.hidden = 0; });
  check("n_experts", [](MoeConfig& c, MoeWeights&) { c.n_experts = 0; });
  check("gate_temp", [](MoeConfig& c, MoeWeights&) { c.gate_temp = 0.0f; });
  check("swiglu_limit", [](MoeConfig& c, MoeWeights&) { c.swiglu_limit = -1.0f; });
  check("routed_scaling_factor", [](MoeConfig& c, MoeWeights&) { c.routed_scaling_factor = NAN; });
  check("n_shared", [](MoeConfig& c, MoeWeights&) { c.n_shared = 2; });
  check("n_experts", [](MoeConfig&, MoeWeights& w) { w.experts.pop_back(); });
  check("selection_bias", [](MoeConfig&, MoeWeights& w) { w.selection_bias.assign(3, 0.0f); });
  check("router", [](MoeConfig&, MoeWeights& w) { w.router.k = 63; });
  check("router", [](MoeConfig&, MoeWeights& w) { w.router.n = 5; });
  check("experts[2].w1", [](MoeConfig&, MoeWeights& w) { w.experts[2].w1.k = 66; });
  check("experts[3].w3", [](MoeConfig&, MoeWeights& w) { w.experts[3].w3.n = 32; });
  check("experts[1].w2", [](MoeConfig&, MoeWeights& w) { w.experts[1].w2.k = 32; });
  check("shared[0].w2", [](MoeConfig&, MoeWeights& w) { w.shared[0].w2.n = 32; });
}

TEST(ModelMoe, WorkspaceStopsGrowingOnceReserved) {
  Spec s;
  s.experts = 12, s.top_k = 4, s.shared = 1;
  Model m = build(s);
  const MoeLayer layer(m.cfg, m.w);
  ThreadPool pool(2);
  MoeWorkspace ws;
  ws.reserve(layer, 33);
  const uint64_t reserved = ws.capacity_bytes();
  EXPECT_GT(reserved, uint64_t(33 * 4 * 64 * 4));  // at least the gathered token rows
  const std::vector<float> x = random_tokens(33, s.hidden, 4);
  std::vector<float> y(x.size());
  for (int64_t T : {1, 33, 7, 2, 33}) {
    layer.forward(x.data(), T, y.data(), ws, &pool);
    EXPECT_EQ(ws.capacity_bytes(), reserved) << T << " tokens";
  }
}
