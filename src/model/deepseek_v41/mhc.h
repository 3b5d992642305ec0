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

// X [n, hc, d] -> pre [n, hc], post [n, hc], comb [n, hc, hc] (comb[j][k]: weight of old
// stream j in new stream k).
void mhc_mixes(const io::DeepseekV41Config& c, const MhcSite& site, const float* X, int64_t n, float* pre,
               float* post, float* comb, MhcWorkspace& ws, ThreadPool* pool);
// out [n, d] = sum_k pre[k] * X_k, k in order.
void mhc_collapse(const float* X, int64_t n, int64_t hc, int64_t d, const float* pre, float* out);
// X_k <- post_k * y + sum_j comb[j][k] * X_j (old streams), j in order.
void mhc_expand(float* X, int64_t n, int64_t hc, int64_t d, const float* y, const float* post, const float* comb);

}  // namespace gannet::model::deepseek_v41
