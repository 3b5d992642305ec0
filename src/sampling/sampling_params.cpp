#include "gannet/sampling_params.h"

#include <cmath>

#include "core/error.h"

namespace gannet {

namespace {

void check_logprobs(const char* field, const std::optional<int>& v) {
  if (v && (*v < 0 || *v > SamplingParams::kMaxLogprobs))
    fail(field, " must be in [0, ", SamplingParams::kMaxLogprobs, "], got ", *v);
}

void check_penalty(const char* field, double v) {
  if (!(v >= -2.0 && v <= 2.0)) fail(field, " must be in [-2, 2], got ", v);
}

}  // namespace

// Written as "!(ok)" so that NaN fails every range check.
void SamplingParams::validate() const {
  if (n < 1) fail("n must be >= 1, got ", n);
  if (max_tokens < 1) fail("max_tokens must be >= 1, got ", max_tokens);
  if (min_tokens < 0) fail("min_tokens must be >= 0, got ", min_tokens);
  if (num_speculative_tokens && (*num_speculative_tokens < 0 || *num_speculative_tokens > 16))
    fail("num_speculative_tokens must be in [0, 16], got ", *num_speculative_tokens);
  if (min_tokens > max_tokens)
    fail("min_tokens must be <= max_tokens (", max_tokens, "), got ", min_tokens);
  if (!(temperature >= 0) || !std::isfinite(temperature))
    fail("temperature must be finite and >= 0, got ", temperature);
  if (!(top_p > 0 && top_p <= 1)) fail("top_p must be in (0, 1], got ", top_p);
  if (top_k < -1) fail("top_k must be -1, 0 (off) or positive, got ", top_k);
  if (!(min_p >= 0 && min_p <= 1)) fail("min_p must be in [0, 1], got ", min_p);
  if (!(repetition_penalty > 0) || !std::isfinite(repetition_penalty))
    fail("repetition_penalty must be finite and > 0, got ", repetition_penalty);
  check_penalty("presence_penalty", presence_penalty);
  check_penalty("frequency_penalty", frequency_penalty);
  for (size_t i = 0; i < stop.size(); ++i)
    if (stop[i].empty()) fail("stop[", i, "] must not be an empty string");
  for (size_t i = 0; i < stop_token_ids.size(); ++i)
    if (stop_token_ids[i] < 0) fail("stop_token_ids[", i, "] must be >= 0, got ", stop_token_ids[i]);
  check_logprobs("logprobs", logprobs);
  check_logprobs("prompt_logprobs", prompt_logprobs);
  if (structured.active()) {
    using K = StructuredOutput::Kind;
    const char* kind = StructuredOutput::kind_name(structured.kind);
    if (structured.kind != K::kJsonObject && structured.spec.empty())
      fail("structured output (", kind, "): the ", structured.kind == K::kJsonSchema ? "schema" : structured.kind == K::kRegex ? "pattern" : structured.kind == K::kToolCalls ? "tool list" : "grammar", " is empty");
    if (structured.kind == K::kJsonObject && !structured.spec.empty())
      fail("structured output (json_object) takes no specification, got '", structured.spec.substr(0, 40), "'");
    if (structured.max_whitespace < 0 || structured.max_whitespace > 64)
      fail("structured output: max_whitespace must be in [0, 64], got ", structured.max_whitespace);
    if (structured.max_whitespace != 0 && structured.kind != K::kJsonSchema && structured.kind != K::kJsonObject)
      fail("structured output: max_whitespace applies to json_schema and json_object only, not ", kind,
           structured.kind == K::kToolCalls ? " (tool-call values take json.dumps's layout)" : "");
    if (ignore_eos)
      fail("ignore_eos cannot be combined with structured output: the grammar decides where the output ends");
  } else if (!structured.spec.empty() || !structured.trigger.empty() || structured.max_whitespace != 0) {
    fail("structured output: spec, trigger or max_whitespace given without a kind");
  }
}

const char* StructuredOutput::kind_name(Kind k) {
  switch (k) {
    case Kind::kNone: return "none";
    case Kind::kJsonSchema: return "json_schema";
    case Kind::kRegex: return "regex";
    case Kind::kGrammar: return "grammar";
    case Kind::kJsonObject: return "json_object";
    case Kind::kToolCalls: return "tool_calls";
  }
  return "?";
}

}  // namespace gannet
