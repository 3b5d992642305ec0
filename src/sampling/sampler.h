// Chooses a token from a row of logits. Deterministic: the candidates are ordered by
// (logit desc, id asc), probabilities are turned into integer weights and the draw is an
// integer threshold from counter_random, so the same logits, params and (seed, stream,
// position) give the same token whatever else runs.
#pragma once

#include <cstdint>
#include <vector>

#include "gannet/sampling_params.h"

namespace gannet::sampling {

class Sampler {
 public:
  explicit Sampler(int64_t vocab_size);

  // logits: [vocab_size]. Returns the chosen token id.
  int32_t sample(const float* logits, const SamplingParams& p, uint64_t seed, uint64_t stream,
                 uint64_t position);

  // Highest logit, lowest id on ties.
  static int32_t argmax(const float* logits, int64_t n);

 private:
  int64_t vocab_;
  std::vector<int32_t> order_;  // [vocab] candidate ids, scratch
  std::vector<double> probs_;   // [vocab] scratch
  std::vector<uint64_t> weights_;
};

}  // namespace gannet::sampling
