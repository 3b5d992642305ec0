#include "sampling/speculative.h"

#include <algorithm>

#include "core/error.h"
#include "sampling/counter_rng.h"

namespace gannet::sampling {

int32_t draw_draft(Sampler& sampler, SampleInput in) {
  in.seed ^= kDraftNamespace;
  return sampler.choose_token(in);
}

bool check_sampled_draft(Sampler& sampler, RejectionScratch& sc, const SampleInput& target, const float* draft_logits,
                         int32_t d, int32_t* token) {
  using u128 = unsigned __int128;
  const int64_t V = sampler.vocab_size();
  GANNET_CHECK(d >= 0 && d < V, "draft ", d);
  sc.wp.resize(size_t(V));
  sc.wq.resize(size_t(V));
  const uint64_t Wp = sampler.weights(target, sc.wp.data());
  SampleInput draft = target;
  draft.logits = draft_logits;
  const uint64_t Wq = sampler.weights(draft, sc.wq.data());
  GANNET_CHECK(Wp > 0 && Wq > 0, "speculative sampling: a distribution without weight");
  // Accept with probability min(1, p(d) / q(d)) (a draft q never draws is rejected).
  const uint64_t u = counter_random(target.seed ^ kAcceptNamespace, target.stream, target.position);
  if (sc.wq[size_t(d)] > 0) {
    const double ratio = (double(sc.wp[size_t(d)]) / double(Wp)) / (double(sc.wq[size_t(d)]) / double(Wq));
    if (double(u >> 11) * 0x1p-53 < ratio) {
      *token = d;
      return true;
    }
  }
  // Residual (p - q)+ over the common denominator Wp * Wq: r_x = max(0, wp_x Wq - wq_x Wp),
  // each below 2^99, their sum below 2^117; the draw t = floor(r * R / 2^64) is exact.
  u128 R = 0;
  for (int64_t x = 0; x < V; ++x) {
    const u128 a = u128(sc.wp[size_t(x)]) * Wq, b = u128(sc.wq[size_t(x)]) * Wp;
    if (a > b) R += a - b;
  }
  if (R == 0) {  // p == q: a rejection cannot happen but for the ratio's rounding; draw from p
    SampleInput plain = target;
    plain.seed ^= kResidualNamespace;
    *token = sampler.choose_token(plain);
    return false;
  }
  const uint64_t r = counter_random(target.seed ^ kResidualNamespace, target.stream, target.position);
  const u128 t = u128(r) * (R >> 64) + ((u128(r) * uint64_t(R)) >> 64);
  u128 acc = 0;
  for (int64_t x = 0; x < V; ++x) {
    const u128 a = u128(sc.wp[size_t(x)]) * Wq, b = u128(sc.wq[size_t(x)]) * Wp;
    if (a <= b) continue;
    acc += a - b;
    if (t < acc) {
      *token = int32_t(x);
      return false;
    }
  }
  GANNET_CHECK(false, "speculative sampling: residual draw past its total");
  return false;
}

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
