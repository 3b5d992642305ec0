#include "sampling/penalties.h"

#include <algorithm>
#include <limits>

#include "core/error.h"

namespace gannet::sampling {

Penalties::Penalties(int64_t vocab_size)
    : vocab_(vocab_size), counts_(size_t(vocab_size), 0), seen_(size_t(vocab_size), 0) {
  touched_.reserve(size_t(vocab_size));  // distinct ids never exceed the vocabulary
}

bool Penalties::active(const SamplingParams& p, const TokenHistory& h) {
  const bool any_ids = !h.prompt_ids.empty() || !h.output_ids.empty();
  if (p.repetition_penalty != 1.0 && any_ids) return true;
  if ((p.frequency_penalty != 0.0 || p.presence_penalty != 0.0) && !h.output_ids.empty()) return true;
  return int64_t(h.output_ids.size()) < p.min_tokens && (!h.eos_ids.empty() || !p.stop_token_ids.empty());
}

void Penalties::apply(const float* raw, float* out, const SamplingParams& p, const TokenHistory& h) {
  std::copy(raw, raw + vocab_, out);
  auto touch = [&](int32_t id) {
    GANNET_CHECK(id >= 0 && id < vocab_, "token id ", id, " outside vocabulary of ", vocab_);
    if (!seen_[size_t(id)]) {
      seen_[size_t(id)] = 1;
      touched_.push_back(id);
    }
  };
  for (int32_t id : h.prompt_ids) touch(id);
  for (int32_t id : h.output_ids) {
    touch(id);
    ++counts_[size_t(id)];
  }
  const float rp = float(p.repetition_penalty);
  const float fp = float(p.frequency_penalty), pp = float(p.presence_penalty);
  for (int32_t id : touched_) {
    float x = out[id];
    if (rp != 1.0f) x = x > 0 ? x / rp : x * rp;
    if (const int32_t c = counts_[size_t(id)]; c > 0) {
      x -= fp * float(c);  // two separate subtractions, as vLLM's two tensor ops
      x -= pp;
    }
    out[id] = x;
    counts_[size_t(id)] = 0;
    seen_[size_t(id)] = 0;
  }
  touched_.clear();

  if (int64_t(h.output_ids.size()) < p.min_tokens) {
    constexpr float kMasked = -std::numeric_limits<float>::infinity();
    for (int32_t id : h.eos_ids) {
      GANNET_CHECK(id >= 0 && id < vocab_, "eos id ", id, " outside vocabulary of ", vocab_);
      out[id] = kMasked;
    }
    for (int32_t id : p.stop_token_ids)
      if (id >= 0 && id < vocab_) out[id] = kMasked;
  }
}

}  // namespace gannet::sampling
