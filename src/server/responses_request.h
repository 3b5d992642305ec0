// OpenAI Responses API request bodies (POST /v1/responses, the stateless subset) -> the
// chat request the chat path runs. Checked with the Responses field names, rewritten as a
// chat body and given to parse_chat, so rendering, tool grammars and sampling are those
// of /v1/chat/completions for the same conversation:
//   instructions                    -> a leading system message
//   input string                    -> one user message
//   input items: messages (input_text / output_text / input_image parts),
//     reasoning (its reasoning_text) -> the next assistant turn's reasoning_content,
//     function_call                 -> an assistant tool call (joined to the assistant
//                                      message before it, as chat writes one turn),
//     function_call_output          -> a tool message
//   tools[{type: function, name, description, parameters, strict}] -> function tools
//   tool_choice, parallel_tool_calls -> the same chat fields
//   reasoning.effort                 -> reasoning_effort (thinking on)
//   max_output_tokens -> max_tokens; text.format -> response_format
// gannet keeps no state: previous_response_id, store: true, background and conversation
// are refused by name, as is anything else it does not read.
#pragma once

#include <nlohmann/json.hpp>
#include <string>

#include "server/openai_request.h"

namespace gannet::server {

struct ResponsesRequest {
  ChatRequest chat;
  nlohmann::ordered_json echo = nlohmann::ordered_json::object();  // request fields the response repeats
};

ResponsesRequest parse_responses(const nlohmann::ordered_json& body, const std::string& served_name);

}  // namespace gannet::server
