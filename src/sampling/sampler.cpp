#include "sampling/sampler.h"

#include <algorithm>
#include <cmath>
#include <numeric>

#include "core/error.h"
#include "sampling/counter_rng.h"

namespace gannet::sampling {

Sampler::Sampler(int64_t vocab_size) : vocab_(vocab_size) {
  order_.resize(size_t(vocab_size));
  probs_.resize(size_t(vocab_size));
  weights_.resize(size_t(vocab_size));
}

int32_t Sampler::argmax(const float* logits, int64_t n) {
  int64_t best = 0;
  for (int64_t i = 1; i < n; ++i)
    if (logits[i] > logits[best]) best = i;
  return int32_t(best);
}

int32_t Sampler::sample(const float* logits, const SamplingParams& p, uint64_t seed, uint64_t stream,
                        uint64_t position) {
  if (p.temperature == 0) return argmax(logits, vocab_);
  // Candidates in a canonical order: by logit descending, id ascending.
  std::iota(order_.begin(), order_.end(), 0);
  auto better = [&](int32_t a, int32_t b) { return logits[a] != logits[b] ? logits[a] > logits[b] : a < b; };
  int64_t n = vocab_;
  if (p.top_k > 0 && p.top_k < n) {
    std::partial_sort(order_.begin(), order_.begin() + p.top_k, order_.end(), better);
    n = p.top_k;
  } else {
    std::sort(order_.begin(), order_.end(), better);
  }
  // Softmax at temperature in double, summed in the canonical order.
  const double inv_t = 1.0 / p.temperature, top = double(logits[order_[0]]);
  double sum = 0;
  for (int64_t i = 0; i < n; ++i) {
    probs_[size_t(i)] = std::exp((double(logits[order_[size_t(i)]]) - top) * inv_t);
    sum += probs_[size_t(i)];
  }
  if (p.top_p < 1.0) {
    double cum = 0;
    int64_t keep = 0;
    while (keep < n) {
      cum += probs_[size_t(keep)] / sum;
      ++keep;
      if (cum >= p.top_p) break;
    }
    n = keep;
  }
  // Integer weights (2^40 scale) and an integer threshold: exact, order-fixed selection.
  uint64_t total = 0;
  for (int64_t i = 0; i < n; ++i) {
    weights_[size_t(i)] = uint64_t(std::llround(probs_[size_t(i)] / sum * 1099511627776.0));
    total += weights_[size_t(i)];
  }
  if (total == 0) return order_[0];
  const uint64_t r = counter_random(seed, stream, position);
  const uint64_t threshold = uint64_t((unsigned __int128)r * total >> 64);  // uniform in [0, total)
  uint64_t acc = 0;
  for (int64_t i = 0; i < n; ++i) {
    acc += weights_[size_t(i)];
    if (threshold < acc) return order_[size_t(i)];
  }
  return order_[size_t(n - 1)];
}

}  // namespace gannet::sampling
