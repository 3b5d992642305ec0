#include "sampling/speculative.h"

#include <algorithm>

namespace gannet::sampling {

void ngram_draft(std::span<const int32_t> h, int k, const NgramConfig& cfg, std::vector<int32_t>* out) {
  out->clear();
  const int64_t len = int64_t(h.size());
  if (k <= 0) return;
  for (int64_t n = std::min<int64_t>(cfg.ngram_max, len - 1); n >= std::max(1, cfg.ngram_min); --n) {
    const int32_t* suffix = h.data() + len - n;
    // Latest earlier occurrence h[i, i + n) with at least one token after it (i + n < len).
    for (int64_t i = len - n - 1; i >= 0; --i) {
      if (h[size_t(i)] != suffix[0] || !std::equal(suffix, suffix + n, h.data() + i)) continue;
      // The tokens that followed it; a copy running into the suffix continues from its own
      // drafts, so a repeating pattern (period len - n - i) drafts all k.
      for (int64_t t = 0; t < k; ++t) {
        const int64_t src = i + n + t;
        out->push_back(src < len ? h[size_t(src)] : (*out)[size_t(src - len)]);
      }
      return;
    }
  }
}

}  // namespace gannet::sampling
