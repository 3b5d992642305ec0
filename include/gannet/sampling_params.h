// How a request's tokens are chosen. Validated by validate(); defaults are greedy-free
// sampling at temperature 1 like vLLM's SamplingParams.
#pragma once

#include <cstdint>
#include <optional>
#include <string>

namespace gannet {

struct SamplingParams {
  int64_t max_tokens = 16;
  double temperature = 1.0;  // 0 = greedy
  double top_p = 1.0;        // (0, 1]
  int64_t top_k = 0;         // 0 or -1 = off
  std::optional<uint64_t> seed;
  bool ignore_eos = false;

  // Throws gannet::Error naming the field and the bad value.
  void validate() const;
};

}  // namespace gannet
