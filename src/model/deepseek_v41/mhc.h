// Manifold-constrained hyper-connections, single-pass form (deepseek-v4-architecture.md
// §5.3, §9.3): the residual is hc streams; a site projects the RMS-normalized flattened
// streams to (pre, post, comb), comb made doubly stochastic by Sinkhorn iterations.
// V4.1 collapses each sublayer's input with the PREVIOUS site's pre.
#pragma once

#include <cstdint>
#include <vector>

#include "io/deepseek_v41_config.h"
#include "model/deepseek_v41/weights.h"

namespace gannet {
class ThreadPool;
}

namespace gannet::model::deepseek_v41 {

struct MhcWorkspace {
  std::vector<float> flat, mixes;
};

struct MhcParams {
  int64_t hc = 4, d = 0, sinkhorn_iters = 20;
  float hc_eps = 1e-6f, norm_eps = 1e-6f;
};
// From any DeepSeek config (hc_mult, hidden_size, hc_sinkhorn_iters, hc_eps, rms_norm_eps).
template <typename C>
MhcParams mhc_params(const C& c) {
  return {c.hc_mult, c.hidden_size, c.hc_sinkhorn_iters, float(c.hc_eps), float(c.rms_norm_eps)};
}

// X [n, hc, d] -> pre [n, hc], post [n, hc], comb [n, hc, hc] (comb[j][k]: weight of old
// stream j in new stream k).
void mhc_mixes(const MhcParams& p, const MhcSite& site, const float* X, int64_t n, float* pre, float* post,
               float* comb, MhcWorkspace& ws, ThreadPool* pool);
void mhc_mixes(const io::DeepseekV41Config& c, const MhcSite& site, const float* X, int64_t n, float* pre,
               float* post, float* comb, MhcWorkspace& ws, ThreadPool* pool);
// DeepSeek-V4's final collapse weights (HCHead): pre [n, hc] = sigmoid(scale * (fn . norm(X))
// + base) + hc_eps, fn [hc, hc * d], base [hc], scale [1].
void mhc_head(const MhcParams& p, const MhcSite& site, const float* X, int64_t n, float* pre, MhcWorkspace& ws,
              ThreadPool* pool);
// DeepSeek's grouped output projection, first half: z [n, groups * rank] where group g of
// z is rows [g * rank, (g + 1) * rank) of wo_a times heads [g * in, (g + 1) * in) of
// o [n, groups * in] (no activation quantization: the reference holds wo_a dequantized).
void grouped_wo_a(const kernels::PackedWeight& wo_a, const float* o, int64_t n, int64_t groups, int64_t rank,
                  float* z, ThreadPool* pool);

// out [n, d] = sum_k pre[k] * X_k, k in order.
void mhc_collapse(const float* X, int64_t n, int64_t hc, int64_t d, const float* pre, float* out);
// X_k <- post_k * y + sum_j comb[j][k] * X_j (old streams), j in order.
void mhc_expand(float* X, int64_t n, int64_t hc, int64_t d, const float* y, const float* post, const float* comb);

}  // namespace gannet::model::deepseek_v41
