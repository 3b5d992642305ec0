#include "sampling/sampler.h"

#include <algorithm>
#include <limits>

#include "core/error.h"
#include "sampling/counter_rng.h"

namespace gannet::sampling {

Sampler::Sampler(int64_t vocab_size)
    : vocab_(vocab_size), penalties_(vocab_size), draw_(vocab_size), adjusted_(size_t(vocab_size)) {}

int32_t Sampler::argmax(const float* logits, int64_t n) {
  int64_t best = 0;
  for (int64_t i = 1; i < n; ++i)
    if (logits[i] > logits[best]) best = i;
  return int32_t(best);
}

const float* Sampler::processed(const SampleInput& in) {
  GANNET_CHECK(in.logits && in.params);
  const SamplingParams& p = *in.params;
  const TokenHistory history{in.prompt_ids, in.output_ids, in.eos_ids};
  const float* row = in.logits;
  if (Penalties::active(p, history)) {  // otherwise the raw row is used as is, no copy
    penalties_.apply(in.logits, adjusted_.data(), p, history);
    row = adjusted_.data();
  }
  if (!in.allowed) return row;
  constexpr float kNeg = -std::numeric_limits<float>::infinity();
  auto mask = [&](float* dst, const float* src) {  // dst may be src
    bool any = false;
    for (int64_t w = 0; w * 32 < vocab_; ++w) {
      const uint32_t bits = in.allowed[w];
      const int64_t t0 = w * 32, hi = std::min<int64_t>(32, vocab_ - t0);
      if (bits == 0) {  // most words of a tight grammar
        std::fill(dst + t0, dst + t0 + hi, kNeg);
        continue;
      }
      for (int64_t b = 0; b < hi; ++b) {
        const float x = (bits >> b) & 1u ? src[t0 + b] : kNeg;
        dst[t0 + b] = x;
        any |= x != kNeg;
      }
    }
    return any;
  };
  if (mask(adjusted_.data(), row)) return adjusted_.data();
  // Nothing the grammar allows survived min_tokens (the document is complete: only EOS may
  // follow). The grammar wins: penalties without the min_tokens mask.
  SamplingParams q = p;
  q.min_tokens = 0;
  row = in.logits;
  if (Penalties::active(q, history)) {
    penalties_.apply(in.logits, adjusted_.data(), q, history);
    row = adjusted_.data();
  }
  GANNET_CHECK(mask(adjusted_.data(), row), "grammar mask allows no token with a finite logit");
  return adjusted_.data();
}

int32_t Sampler::choose(const SampleInput& in) {
  const float* row = processed(in);
  const SamplingParams& p = *in.params;
  if (p.temperature == 0) return checked_argmax(row, vocab_);
  const DrawFilters f{p.temperature, p.top_k, p.top_p, p.min_p};
  return draw_.draw(row, f, counter_random(in.seed, in.stream, in.position));
}

uint64_t Sampler::weights(const SampleInput& in, uint64_t* w) {
  const float* row = processed(in);
  const SamplingParams& p = *in.params;
  if (p.temperature == 0) {
    std::fill(w, w + vocab_, uint64_t(0));
    w[checked_argmax(row, vocab_)] = 1;
    return 1;
  }
  return draw_.kept_weights(row, DrawFilters{p.temperature, p.top_k, p.top_p, p.min_p}, w);
}

void Sampler::sample(const SampleInput& in, SampleOutput* out) { fill(in, choose(in), out); }

void Sampler::fill(const SampleInput& in, int32_t token, SampleOutput* out) const {
  out->token = token;
  const SamplingParams& p = *in.params;
  if (p.logprobs) {
    const double norm = log_normalizer(in.logits, vocab_);
    out->logprob = token_logprob(in.logits, out->token, norm);
    top_logprobs(in.logits, vocab_, *p.logprobs, norm, &out->top);
  } else {
    out->logprob = std::numeric_limits<float>::quiet_NaN();
    out->top.clear();
  }
}

SampleOutput Sampler::sample(const SampleInput& in) {
  SampleOutput out;
  sample(in, &out);
  return out;
}

int32_t Sampler::sample(const float* logits, const SamplingParams& p, uint64_t seed, uint64_t stream,
                        uint64_t position) {
  SampleInput in;
  in.logits = logits;
  in.params = &p;
  in.seed = seed;
  in.stream = stream;
  in.position = position;
  return choose(in);
}

void Sampler::prompt_logprobs(const float* logits, int32_t next_token, int top_n, SampleOutput* out) const {
  GANNET_CHECK(next_token >= 0 && next_token < vocab_, "prompt token ", next_token, " outside vocabulary of ",
               vocab_);
  const double norm = log_normalizer(logits, vocab_);
  out->token = next_token;
  out->logprob = token_logprob(logits, next_token, norm);
  top_logprobs(logits, vocab_, top_n, norm, &out->top);
}

}  // namespace gannet::sampling
