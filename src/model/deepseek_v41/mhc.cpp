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
    kernels::PackedWeight wg = wo_a;
    wg.n = rank;
    wg.data = static_cast<const uint8_t*>(wo_a.data) + g * rank * wo_a.row_bytes();
    if (wg.scales)
      wg.scales = static_cast<const uint8_t*>(wo_a.scales) +
                  (g * rank / wo_a.block_n) * wo_a.scale_cols() * int64_t(dtype_size(wo_a.scale_dtype));
    for (int64_t i = 0; i < n; ++i) std::memcpy(og.data() + i * gin, o + (i * groups + g) * gin, size_t(gin) * 4);
    kernels::matmul_packed(og.data(), n, wg, zg.data(), pool);
    for (int64_t i = 0; i < n; ++i) std::memcpy(z + (i * groups + g) * rank, zg.data() + i * rank, size_t(rank) * 4);
  }
}

// Both below run over a block of channels per loop so the compiler vectorizes them; each
// channel's value takes the same operations in the same order as one channel at a time
// (a product, then a sum: contraction is off), so the bits are the spec's.
void mhc_collapse(const float* X, int64_t n, int64_t hc, int64_t d, const float* pre, float* out) {
  for (int64_t t = 0; t < n; ++t) {
    float* o = out + t * d;
    const float* x = X + t * hc * d;
    const float* p = pre + t * hc;
    for (int64_t i = 0; i < d; ++i) o[i] = p[0] * x[i];
    for (int64_t k = 1; k < hc; ++k) {
      const float pk = p[k];
      const float* xk = x + k * d;
      for (int64_t i = 0; i < d; ++i) o[i] = o[i] + pk * xk[i];
    }
  }
}

void mhc_expand(float* X, int64_t n, int64_t hc, int64_t d, const float* y, const float* post, const float* comb) {
  constexpr int64_t kBlock = 64;  // channels per pass; the streams' old values kept aside
  std::vector<float> old(static_cast<size_t>(hc * kBlock));
  float acc[kBlock];
  for (int64_t t = 0; t < n; ++t) {
    float* x = X + t * hc * d;
    const float* C = comb + t * hc * hc;
    const float* yt = y + t * d;
    for (int64_t i0 = 0; i0 < d; i0 += kBlock) {
      const int64_t nb = std::min(kBlock, d - i0);
      for (int64_t j = 0; j < hc; ++j) std::memcpy(old.data() + j * kBlock, x + j * d + i0, size_t(nb) * 4);
      for (int64_t k = 0; k < hc; ++k) {
        const float* o0 = old.data();
        const float c0 = C[k];
        for (int64_t i = 0; i < nb; ++i) acc[i] = c0 * o0[i];
        for (int64_t j = 1; j < hc; ++j) {
          const float cj = C[j * hc + k];
          const float* oj = old.data() + j * kBlock;
          for (int64_t i = 0; i < nb; ++i) acc[i] = acc[i] + cj * oj[i];
        }
        const float pk = post[t * hc + k];
        float* xk = x + k * d + i0;
        for (int64_t i = 0; i < nb; ++i) xk[i] = pk * yt[i0 + i] + acc[i];
      }
    }
  }
}

}  // namespace gannet::model::deepseek_v41
