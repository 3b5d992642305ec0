// OpenAI request bodies -> what the engine runs: /v1/completions and
// /v1/chat/completions. Server fields (model, stream, echo, messages, ...) are taken here;
// the sampling fields go through the same strict parser as `gannet generate` lines, so an
// unknown or ill-typed field is an error naming it, never ignored.
#pragma once

#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "gannet/sampling_params.h"
#include "chat/chat_template.h"

namespace gannet::server {

// An OpenAI-shaped error: HTTP status, message, type, the offending field, a code.
struct ApiError {
  int status;
  std::string message, type, param, code;
};

ApiError bad_request(std::string message, std::string param = "");
// Throws bad_request(message, param).
[[noreturn]] void refuse(const std::string& message, const std::string& param);
nlohmann::json error_body(const ApiError& e);
// The field a gannet::Error message names: quoted ("'stop' must be ...") or leading
// ("max_tokens must be >= 1, ..."), after the engine's leading "request 'ID': "; empty if
// none.
std::string field_of(const std::string& message);

// One prompt of a completion request: text, or token ids.
struct Prompt {
  std::string text;
  std::vector<int32_t> ids;
};

struct CompletionRequest {
  std::vector<Prompt> prompts;
  SamplingParams params;
  bool stream = false, include_usage = false, echo = false;
};

struct ChatRequest {
  // The conversation as the template gets it: roles checked, text content parts joined
  // by "\n" into one string.
  nlohmann::ordered_json messages = nlohmann::ordered_json::array();
  // The same messages as sent (checked, content parts not joined): what DeepSeek's
  // encoders take (they join text parts with a blank line).
  nlohmann::ordered_json raw_messages = nlohmann::ordered_json::array();
  chat::ChatOptions chat;  // chat.tools: the request's tools (null for none)
  // tool_choice: "auto", "none", "required", or "function" with tool_name set.
  std::string tool_choice = "auto";
  std::string tool_name;
  bool parallel_tool_calls = true;
  bool reasoning_effort_given = false;  // put in chat.kwargs["reasoning_effort"]
  SamplingParams params;
  bool max_tokens_given = false;  // else: up to the context
  bool stream = false, include_usage = false;
  bool logprobs = false;  // chat shape: logprobs: true, top_logprobs: N
  // image_url content parts of user messages, in order: the field ("messages[i].content[j]")
  // and its URL (a data: URL; others are refused when decoded).
  std::vector<std::pair<std::string, std::string>> images;
};

// Throw ApiError (400, or 404 for another model's name).
CompletionRequest parse_completion(const nlohmann::ordered_json& body, const std::string& served_name);
ChatRequest parse_chat(const nlohmann::ordered_json& body, const std::string& served_name);

}  // namespace gannet::server
