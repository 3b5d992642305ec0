#include "model/deepseek_v41/mhc.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <vector>

#include "kernels/cpu/packed_matmul.h"
#include "kernels/cpu/rmsnorm.h"

namespace gannet::model::deepseek_v41 {

namespace {
float sigmoid(float x) { return 1.0f / (1.0f + std::exp(-x)); }
}  // namespace


void mhc_mixes(const io::DeepseekV41Config& c, const MhcSite& site, const float* X, int64_t n, float* pre,
               float* post, float* comb, MhcWorkspace& ws, ThreadPool* pool) {
  mhc_mixes(mhc_params(c), site, X, n, pre, post, comb, ws, pool);
}

void mhc_head(const MhcParams& p, const MhcSite& site, const float* X, int64_t n, float* pre, MhcWorkspace& ws,
              ThreadPool* pool) {
  const int64_t hc = p.hc, d = p.d;
  ws.flat.resize(size_t(n * hc * d));
  ws.mixes.resize(size_t(n * hc));
  kernels::rmsnorm(X, nullptr, ws.flat.data(), n, hc * d, p.norm_eps);
  kernels::matmul_packed(ws.flat.data(), n, site.fn, ws.mixes.data(), pool);
  for (int64_t t = 0; t < n; ++t)
    for (int64_t k = 0; k < hc; ++k)
      pre[t * hc + k] = sigmoid(ws.mixes[size_t(t * hc + k)] * site.scale[0] + site.base[size_t(k)]) + p.hc_eps;
}

void mhc_mixes(const MhcParams& c, const MhcSite& site, const float* X, int64_t n, float* pre, float* post,
               float* comb, MhcWorkspace& ws, ThreadPool* pool) {
  const int64_t hc = c.hc, d = c.d, m = (2 + hc) * hc;
  const float eps = c.hc_eps;
  ws.flat.resize(size_t(n * hc * d));
  ws.mixes.resize(size_t(n * m));
  // One RMS statistic over all hc * d values of a token, then the projection.
  kernels::rmsnorm(X, nullptr, ws.flat.data(), n, hc * d, c.norm_eps);
  kernels::matmul_packed(ws.flat.data(), n, site.fn, ws.mixes.data(), pool);
  const float* b = site.base.data();
  const float* s = site.scale.data();
  for (int64_t t = 0; t < n; ++t) {
    const float* mx = ws.mixes.data() + t * m;
    for (int64_t k = 0; k < hc; ++k) {
      pre[t * hc + k] = sigmoid(mx[k] * s[0] + b[k]) + eps;
      post[t * hc + k] = 2.0f * sigmoid(mx[hc + k] * s[1] + b[hc + k]);
    }
    float* C = comb + t * hc * hc;
    for (int64_t j = 0; j < hc; ++j) {  // row softmax, then + eps
      float* row = C + j * hc;
      float rmax = -INFINITY;
      for (int64_t k = 0; k < hc; ++k) {
        row[k] = mx[2 * hc + j * hc + k] * s[2] + b[2 * hc + j * hc + k];
        rmax = std::max(rmax, row[k]);
      }
      float sum = 0.0f;
      for (int64_t k = 0; k < hc; ++k) {
        row[k] = std::exp(row[k] - rmax);
        sum += row[k];
      }
      for (int64_t k = 0; k < hc; ++k) row[k] = row[k] / sum + eps;
    }
    auto cols = [&] {
      for (int64_t k = 0; k < hc; ++k) {
        float sum = 0.0f;
        for (int64_t j = 0; j < hc; ++j) sum += C[j * hc + k];
        for (int64_t j = 0; j < hc; ++j) C[j * hc + k] /= (sum + eps);
      }
    };
    auto rows = [&] {
      for (int64_t j = 0; j < hc; ++j) {
        float sum = 0.0f;
        for (int64_t k = 0; k < hc; ++k) sum += C[j * hc + k];
        for (int64_t k = 0; k < hc; ++k) C[j * hc + k] /= (sum + eps);
      }
    };
    cols();
    for (int64_t it = 1; it < c.sinkhorn_iters; ++it) {
      rows();
      cols();
    }
  }
}

void grouped_wo_a(const kernels::PackedWeight& wo_a, const float* o, int64_t n, int64_t groups, int64_t rank,
                  float* z, ThreadPool* pool) {
  const int64_t gin = wo_a.k;
  std::vector<float> og(size_t(n * gin)), zg(size_t(n * rank));
  for (int64_t g = 0; g < groups; ++g) {
    const kernels::PackedWeight wg = wo_a.rows(g * rank, rank);
    for (int64_t i = 0; i < n; ++i) std::memcpy(og.data() + i * gin, o + (i * groups + g) * gin, size_t(gin) * 4);
    kernels::matmul_packed(og.data(), n, wg, zg.data(), pool);
    for (int64_t i = 0; i < n; ++i) std::memcpy(z + (i * groups + g) * rank, zg.data() + i * rank, size_t(rank) * 4);
  }
}

// Both below run 4 channels at a time in vectors of the baseline target's width (GCC/Clang
// vector extension; -O2 does not vectorize these loops by itself); each channel's value
// takes the same operations in the same order as one channel at a time (a product, then a
// sum: contraction is off), so the bits are the spec's.
namespace {
using f4 = float __attribute__((vector_size(16)));
inline f4 load4(const float* p) {
  f4 v;
  std::memcpy(&v, p, sizeof v);
  return v;
}
inline void store4(float* p, f4 v) { std::memcpy(p, &v, sizeof v); }
}  // namespace

void mhc_collapse(const float* X, int64_t n, int64_t hc, int64_t d, const float* pre, float* out) {
  const int64_t d4 = d - d % 4;
  for (int64_t t = 0; t < n; ++t) {
    float* o = out + t * d;
    const float* x = X + t * hc * d;
    const float* p = pre + t * hc;
    for (int64_t i = 0; i < d4; i += 4) {
      f4 acc = p[0] * load4(x + i);
      for (int64_t k = 1; k < hc; ++k) acc = acc + p[k] * load4(x + k * d + i);
      store4(o + i, acc);
    }
    for (int64_t i = d4; i < d; ++i) {
      float acc = p[0] * x[i];
      for (int64_t k = 1; k < hc; ++k) acc = acc + p[k] * x[k * d + i];
      o[i] = acc;
    }
  }
}

void mhc_expand(float* X, int64_t n, int64_t hc, int64_t d, const float* y, const float* post, const float* comb) {
  const int64_t d4 = d - d % 4;
  std::vector<f4> old(static_cast<size_t>(hc));      // the streams' old values of 4 channels
  std::vector<float> olds(static_cast<size_t>(hc));  // ... of one channel (the tail)
  for (int64_t t = 0; t < n; ++t) {
    float* x = X + t * hc * d;
    const float* C = comb + t * hc * hc;
    const float* yt = y + t * d;
    const float* pt = post + t * hc;
    for (int64_t i = 0; i < d4; i += 4) {
      for (int64_t j = 0; j < hc; ++j) old[size_t(j)] = load4(x + j * d + i);
      const f4 yi = load4(yt + i);
      for (int64_t k = 0; k < hc; ++k) {
        f4 mixed = C[k] * old[0];
        for (int64_t j = 1; j < hc; ++j) mixed = mixed + C[j * hc + k] * old[size_t(j)];
        store4(x + k * d + i, pt[k] * yi + mixed);
      }
    }
    for (int64_t i = d4; i < d; ++i) {
      for (int64_t j = 0; j < hc; ++j) olds[size_t(j)] = x[j * d + i];
      for (int64_t k = 0; k < hc; ++k) {
        float mixed = C[k] * olds[0];
        for (int64_t j = 1; j < hc; ++j) mixed = mixed + C[j * hc + k] * olds[size_t(j)];
        x[k * d + i] = pt[k] * yt[i] + mixed;
      }
    }
  }
}

}  // namespace gannet::model::deepseek_v41
