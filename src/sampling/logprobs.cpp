#include "sampling/logprobs.h"

#include <algorithm>
#include <cmath>

#include "core/error.h"
#include "sampling/fixed_point_draw.h"

namespace gannet::sampling {

double log_normalizer(const float* logits, int64_t n) {
  const double md = logits[checked_argmax(logits, n)];
  double sum = 0;
  for (int64_t i = 0; i < n; ++i) sum += std::exp(double(logits[i]) - md);
  return md + std::log(sum);
}

float token_logprob(const float* logits, int32_t id, double log_norm) {
  return float(double(logits[id]) - log_norm);
}

void top_logprobs(const float* logits, int64_t n, int count, double log_norm, std::vector<TokenLogprob>* out) {
  const size_t want = size_t(std::min<int64_t>(count, n));
  out->clear();
  if (want == 0) return;
  // Insertion into a short sorted list; the raw logit rides in `logprob` until the end.
  // Ids arrive ascending, so an equal logit never displaces an earlier id.
  for (int64_t i = 0; i < n; ++i) {
    const float x = logits[i];
    if (out->size() == want && !(x > out->back().logprob)) continue;
    if (out->size() < want) out->push_back({});
    size_t j = out->size() - 1;
    while (j > 0 && x > (*out)[j - 1].logprob) {
      (*out)[j] = (*out)[j - 1];
      --j;
    }
    (*out)[j] = {int32_t(i), x};
  }
  for (TokenLogprob& t : *out) t.logprob = float(double(t.logprob) - log_norm);
}

}  // namespace gannet::sampling
