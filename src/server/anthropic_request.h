// Anthropic Messages API request bodies (POST /v1/messages and /v1/messages/count_tokens)
// -> the chat request the OpenAI chat path runs. A body is checked field by field with
// Anthropic's names in the errors, then rewritten as an OpenAI chat body and given to
// parse_chat, so both endpoints share one renderer, tool grammar and sampling parser:
//   system (string or text blocks)        -> a leading system message
//   user text / image (base64) blocks     -> text / image_url parts
//   user tool_result blocks               -> tool messages (before the user's own text),
//                                            content prefixed "Error: " when is_error
//   assistant text / tool_use / thinking  -> content / tool_calls / reasoning_content
//   tools[{name, description, input_schema}] -> function tools
//   tool_choice auto / any / tool / none  -> auto / required / a named function / none;
//                                            disable_parallel_tool_use -> one call
//   stop_sequences -> stop; thinking enabled / disabled -> chat_template_kwargs.enable_thinking
// thinking.budget_tokens is checked as Anthropic defines it (>= 1024, < max_tokens) but
// not enforced separately: DeepSeek's models have no thinking budget, and the whole
// answer, thinking included, stops at max_tokens. Anything else is refused by name.
#pragma once

#include <nlohmann/json.hpp>
#include <string>

#include "server/openai_request.h"

namespace gannet::server {

struct MessagesRequest {
  ChatRequest chat;
  bool thinking = false;  // thinking.type "enabled"
};

// count_tokens: max_tokens is optional and stream refused. Throws ApiError.
MessagesRequest parse_messages(const nlohmann::ordered_json& body, const std::string& served_name, bool count_tokens);

// {"type": "error", "error": {"type", "message"}}: Anthropic's error shape, with the error
// type its HTTP status implies.
nlohmann::json anthropic_error_body(const ApiError& e);

}  // namespace gannet::server
