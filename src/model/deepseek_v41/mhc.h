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
MhcParams mhc_params(const io::DeepseekV41Config& c);

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
// out [n, d] = sum_k pre[k] * X_k, k in order.
void mhc_collapse(const float* X, int64_t n, int64_t hc, int64_t d, const float* pre, float* out);
// X_k <- post_k * y + sum_j comb[j][k] * X_j (old streams), j in order.
void mhc_expand(float* X, int64_t n, int64_t hc, int64_t d, const float* y, const float* post, const float* comb);

}  // namespace gannet::model::deepseek_v41
