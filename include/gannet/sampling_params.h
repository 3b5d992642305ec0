// How a request's tokens are chosen. Field names, meanings and defaults follow vLLM's
// SamplingParams so OpenAI-style requests map one to one. validate() rejects bad values
// with a message naming the field; nothing is silently clamped (DESIGN principle 5).
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace gannet {

// Grammar-constrained output: every token is sampled from those the grammar allows next,
// and EOS only where the grammar's document may end (so a finished output parses).
struct StructuredOutput {
  enum class Kind { kNone, kJsonSchema, kRegex, kGrammar, kJsonObject, kToolCalls };
  Kind kind = Kind::kNone;
  // kJsonSchema: the schema as JSON text; kRegex: an ECMAScript-style pattern (anchored at
  // both ends); kGrammar: GBNF with a `root` rule; kJsonObject: empty (any JSON object);
  // kToolCalls: a tool-call block (structured/tool_grammar.h; the server builds it from a
  // request's tools, its spec is JSON); its JSON values are laid out as Python's
  // json.dumps writes them (", " and ": ", nothing else), the text chat templates write
  // back when the call returns in the next turn's history.
  std::string spec;
  // Optional: the output is free until this text has appeared in it; the constraint
  // applies to what follows (e.g. "</think>" after a reasoning block).
  std::string trigger;
  // kJsonSchema and kJsonObject: 0 = compact (no whitespace); n > 0 = up to n
  // whitespace characters wherever JSON allows them.
  int max_whitespace = 0;

  bool active() const { return kind != Kind::kNone; }
  static const char* kind_name(Kind k);
};

struct SamplingParams {
  // Largest `logprobs` / `prompt_logprobs` accepted (vLLM's default max_logprobs).
  static constexpr int kMaxLogprobs = 20;

  int64_t n = 1;            // completions per request (sample index = RNG stream)
  int64_t max_tokens = 16;  // >= 1
  int64_t min_tokens = 0;   // EOS and stop_token_ids are masked until this many outputs
  double temperature = 1.0;  // 0 = greedy (argmax after penalties)
  double top_p = 1.0;        // (0, 1]
  int64_t top_k = 0;         // 0 or -1 = off
  double min_p = 0.0;        // [0, 1], relative to the most likely token
  double repetition_penalty = 1.0;  // > 0; over prompt + output tokens
  double presence_penalty = 0.0;    // [-2, 2]; over output tokens
  double frequency_penalty = 0.0;   // [-2, 2]; over output tokens
  std::vector<std::string> stop;    // stop strings (matched by the engine, not the sampler)
  std::vector<int32_t> stop_token_ids;
  bool ignore_eos = false;
  std::optional<uint64_t> seed;     // unset: the engine draws one
  std::optional<int> logprobs;         // top-N logprobs per generated token (0 = chosen only)
  std::optional<int> prompt_logprobs;  // top-N logprobs per prompt token
  // Speculative decoding: the most drafts this request's decode steps verify (0: none);
  // the engine's --num-speculative-tokens bounds it (0 when speculation is off); unset: the
  // engine's. Outputs are the same whatever it is: only the speed changes.
  std::optional<int> num_speculative_tokens;
  StructuredOutput structured;  // none by default
  bool skip_special_tokens = true;
  bool include_stop_str_in_output = false;

  // Throws gannet::Error naming the field and the bad value.
  void validate() const;
};

}  // namespace gannet
