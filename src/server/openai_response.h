// Pieces of OpenAI response bodies: usage, and logprobs in the completions shape
// ({tokens, token_logprobs, top_logprobs, text_offset}) and the chat shape
// ({content: [{token, logprob, bytes, top_logprobs}]}). A token's text is its bytes
// (possibly part of a UTF-8 sequence; JSON output replaces what is not UTF-8, `bytes`
// keeps them exactly). A logprob of -inf (a token a grammar masked) is given as -9999.
#pragma once

#include <nlohmann/json.hpp>
#include <span>
#include <string>

#include "gannet/request_output.h"
#include "tokenizer/tokenizer.h"

namespace gannet::server {

struct Usage {
  int64_t prompt = 0, completion = 0;
  int64_t cached = 0;  // prompt tokens taken from the prefix cache
  nlohmann::json to_json() const {
    return {{"prompt_tokens", prompt},
            {"completion_tokens", completion},
            {"total_tokens", prompt + completion},
            {"prompt_tokens_details", {{"cached_tokens", cached}}}};
  }
};

// `text_offset`: where the first token starts in the choice's text, in characters (Unicode
// code points, as a Python string counts them); `end_offset` gets where the next would.
nlohmann::json completion_logprobs(std::span<const PositionLogprobs> lps, const tokenizer::Tokenizer* tok,
                                   size_t text_offset, size_t* end_offset = nullptr);
nlohmann::json chat_logprobs(std::span<const PositionLogprobs> lps, const tokenizer::Tokenizer* tok);

}  // namespace gannet::server
