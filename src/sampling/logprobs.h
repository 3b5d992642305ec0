// Log-probabilities as vLLM reports them by default: log-softmax of the RAW logits, before
// penalties, temperature and filtering. Computed in double (the normaliser summed in id
// order from the row max, so it depends only on the row) and stored as float.
#pragma once

#include <cstdint>
#include <vector>

namespace gannet::sampling {

struct TokenLogprob {
  int32_t id;
  float logprob;
};

// log(sum_i exp(l_i)) over logits[0, n), as m + log(sum_i exp(l_i - m)) with m the max.
double log_normalizer(const float* logits, int64_t n);

// logprob of one id: float(double(logits[id]) - log_norm).
float token_logprob(const float* logits, int32_t id, double log_norm);

// The `count` highest logits of logits[0, n) in the order (logit desc, id asc), as
// logprobs. `out` is resized to min(count, n); its capacity is reused (no allocation once
// it has held `count` entries).
void top_logprobs(const float* logits, int64_t n, int count, double log_norm, std::vector<TokenLogprob>* out);

}  // namespace gannet::sampling
