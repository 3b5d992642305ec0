// Top-k selection as DeepSeek's indexers and routers need it, with every tie broken by the
// lower index (the spec leaves ties open; this makes the choice a function of the values).
#pragma once

#include <algorithm>
#include <cstdint>
#include <vector>

namespace gannet::model::deepseek_v41 {

// The k best of scores[0, n) (fewer if n < k), in increasing index order.
inline std::vector<int32_t> top_k_lower_index(const float* scores, int64_t n, int64_t k) {
  std::vector<int32_t> idx(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) idx[size_t(i)] = int32_t(i);
  k = std::min(k, n);
  std::partial_sort(idx.begin(), idx.begin() + k, idx.end(), [&](int32_t a, int32_t b) {
    return scores[a] > scores[b] || (scores[a] == scores[b] && a < b);
  });
  idx.resize(size_t(k));
  std::sort(idx.begin(), idx.end());
  return idx;
}

}  // namespace gannet::model::deepseek_v41
