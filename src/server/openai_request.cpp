#include "server/openai_request.h"

#include <cctype>

#include "core/error.h"
#include "server/request_json.h"

namespace gannet::server {

using json = nlohmann::json;
using ojson = nlohmann::ordered_json;

json error_body(const ApiError& e) {
  json err = {{"message", e.message}, {"type", e.type}, {"param", nullptr}, {"code", nullptr}};
  if (!e.param.empty()) err["param"] = e.param;
  if (!e.code.empty()) err["code"] = e.code;
  return json{{"error", err}};
}

ApiError bad_request(std::string message, std::string param) {
  return {400, std::move(message), "invalid_request_error", std::move(param), ""};
}

void refuse(const std::string& message, const std::string& param) { throw bad_request(message, param); }

std::string field_of(const std::string& full) {
  // The engine's messages start "request 'ID': "; the field is named after that.
  std::string message = full;
  if (message.starts_with("request '")) {
    const size_t end = message.find("': ", 9);
    if (end != std::string::npos) message = message.substr(end + 3);
  }
  const size_t a = message.find('\'');
  if (a != std::string::npos) {
    const size_t b = message.find('\'', a + 1);
    if (b != std::string::npos) return message.substr(a + 1, b - a - 1);
  }
  size_t n = 0;
  while (n < message.size() && (std::islower((unsigned char)message[n]) || message[n] == '_')) ++n;
  return n > 0 && message.compare(n, 6, " must ") == 0 ? message.substr(0, n) : "";
}

// The request body -> prompts and SamplingParams. Server fields are taken here; every
// other field goes through the same parser as `generate` lines (unknown fields refused).
namespace {
void check_model(const ojson& v, const std::string& served_name);

// "stream" and "stream_options" ({"include_usage": bool}), alike in both APIs.
void stream_field(const std::string& k, const ojson& v, bool& stream, bool& include_usage) {
  if (k == "stream") {
    if (!v.is_boolean()) throw bad_request("'stream' must be true or false", "stream");
    stream = v.get<bool>();
    return;
  }
  if (v.is_null()) return;
  if (!v.is_object()) throw bad_request("'stream_options' must be an object", "stream_options");
  for (auto f = v.begin(); f != v.end(); ++f) {
    if (f.key() != "include_usage" || !f.value().is_boolean())
      throw bad_request("'stream_options' takes only 'include_usage' (true or false)", "stream_options");
    include_usage = f.value().get<bool>();
  }
}

void check_stream_options(const ojson& body, bool stream) {
  if (!stream && body.contains("stream_options") && !body["stream_options"].is_null())
    throw bad_request("'stream_options' is only allowed with 'stream': true", "stream_options");
}
}  // namespace

CompletionRequest parse_completion(const ojson& body, const std::string& served_name) {
  if (!body.is_object()) throw bad_request("the request body must be a JSON object");
  CompletionRequest r;
  ojson rest = ojson::object();
  bool have_prompt = false;
  for (auto it = body.begin(); it != body.end(); ++it) {
    const std::string& k = it.key();
    const ojson& v = it.value();
    if (k == "model") {
      check_model(v, served_name);
    } else if (k == "prompt") {
      have_prompt = true;
      auto ids_of = [&](const ojson& a) {
        std::vector<int32_t> ids;
        for (const ojson& t : a) {
          if (!t.is_number_integer() || t.get<int64_t>() < 0 || t.get<int64_t>() > INT32_MAX)
            throw bad_request("'prompt' token ids must be non-negative integers", "prompt");
          ids.push_back(int32_t(t.get<int64_t>()));
        }
        return ids;
      };
      if (v.is_string()) {
        r.prompts.push_back({v.get<std::string>(), {}});
      } else if (v.is_array() && !v.empty() && v[0].is_number()) {
        r.prompts.push_back({"", ids_of(v)});
      } else if (v.is_array() && !v.empty()) {
        for (const ojson& p : v) {
          if (p.is_string()) r.prompts.push_back({p.get<std::string>(), {}});
          else if (p.is_array() && !p.empty()) r.prompts.push_back({"", ids_of(p)});
          else throw bad_request("'prompt' must be a string, a list of strings, a list of token ids or a list of such lists", "prompt");
        }
      } else {
        throw bad_request("'prompt' must be a string, a list of strings, a list of token ids or a list of such lists", "prompt");
      }
    } else if (k == "stream" || k == "stream_options") {
      stream_field(k, v, r.stream, r.include_usage);
    } else if (k == "echo") {
      if (!v.is_boolean()) throw bad_request("'echo' must be true or false", "echo");
      r.echo = v.get<bool>();
    } else if (k == "user") {
      if (!v.is_string() && !v.is_null()) throw bad_request("'user' must be a string", "user");
    } else if (k == "suffix") {
      if (!v.is_null()) throw bad_request("'suffix' is not supported", "suffix");
    } else if (k == "logit_bias") {
      if (!v.is_null() && !(v.is_object() && v.empty())) throw bad_request("'logit_bias' is not supported", "logit_bias");
    } else if (k == "best_of") {
      if (!v.is_null() && !(v.is_number_integer() && v.get<int64_t>() == 1))
        throw bad_request("'best_of' other than 1 is not supported", "best_of");
 } else if (k == "prompt_token_ids" || k == "prompt_logprobs") {
      throw bad_request("unknown field '" + k + "'", k);
    } else if (!v.is_null()) {
      rest[k] = v;
    }
  }
  if (!have_prompt) throw bad_request("missing 'prompt'", "prompt");
  check_stream_options(body, r.stream);
  for (const Prompt& p : r.prompts)
    if (p.ids.empty() && p.text.empty()) throw bad_request("the prompt is empty", "prompt");
  SamplingParams defaults;
  defaults.max_tokens = 16;  // OpenAI's default for completions
  rest["prompt"] = "-";
  try {
    r.params = parse_prompt_line(rest.dump(), defaults).params;
  } catch (const Error& e) {
    throw bad_request(e.what(), field_of(e.what()));
  }
  return r;
}

namespace {

void check_model(const ojson& v, const std::string& served_name) {
  if (!v.is_string()) throw bad_request("'model' must be a string", "model");
  if (v.get<std::string>() != served_name)
    throw ApiError{404, "the model '" + v.get<std::string>() + "' does not exist (this server serves '" + served_name + "')",
                   "invalid_request_error", "model", "model_not_found"};
}

// One message -> {role, content (a string, or absent), name, tool_calls, tool_call_id,
// reasoning_content}: what the chat templates read.
ojson normalize_message(const ojson& m, size_t index, std::vector<std::pair<std::string, std::string>>* images) {
  const std::string at = "messages[" + std::to_string(index) + "]";
  if (!m.is_object()) throw bad_request(at + " must be an object", "messages");
  if (!m.contains("role") || !m["role"].is_string()) throw bad_request(at + ".role must be a string", "messages");
  const std::string role = m["role"].get<std::string>();
  if (role != "system" && role != "developer" && role != "user" && role != "assistant" && role != "tool")
    throw bad_request(at + ".role '" + role + "' is not one of system, developer, user, assistant, tool", "messages");
  ojson out = ojson::object();
  out["role"] = role;
  for (auto it = m.begin(); it != m.end(); ++it) {
    const std::string& k = it.key();
    const ojson& v = it.value();
    if (k == "role") continue;
    if (k == "content") {
      if (v.is_null()) {
        if (role != "assistant") throw bad_request(at + ".content may be null only for an assistant", "messages");
        out["content"] = nullptr;
      } else if (v.is_string()) {
        out["content"] = v;
      } else if (v.is_array()) {
        std::string text;
        for (size_t p = 0; p < v.size(); ++p) {
          const ojson& part = v[p];
          if (!part.is_object() || !part.contains("type") || !part["type"].is_string())
            throw bad_request(at + ".content[" + std::to_string(p) + "] must be a content part with a 'type'", "messages");
          const std::string field = at + ".content[" + std::to_string(p) + "]";
          if (part["type"] == "image_url") {
            // {"type": "image_url", "image_url": {"url": URL, "detail"?: "auto"}} (or the URL
            // as a string); read by vision models only, and only in user turns.
            if (role != "user") throw bad_request(field + ": images are taken in user messages only", "messages");
            const ojson* iu = part.contains("image_url") ? &part["image_url"] : nullptr;
            std::string url;
            if (iu && iu->is_string()) url = iu->get<std::string>();
            else if (iu && iu->is_object() && iu->contains("url") && (*iu)["url"].is_string()) {
              for (auto f = iu->begin(); f != iu->end(); ++f)
                if (f.key() == "detail") {
                  if (!f.value().is_string() || f.value() != "auto")
                    throw bad_request(field + ".image_url.detail: only \"auto\" (the model's own resolution)", "messages");
                } else if (f.key() != "url") {
                  throw bad_request(field + ".image_url has an unknown field '" + f.key() + "'", "messages");
                }
              url = (*iu)["url"].get<std::string>();
            } else {
              throw bad_request(field + ".image_url must be {\"url\": \"data:image/...;base64,...\"}", "messages");
            }
            for (auto f = part.begin(); f != part.end(); ++f)
              if (f.key() != "type" && f.key() != "image_url")
                throw bad_request(field + " has an unknown field '" + f.key() + "'", "messages");
            if (images) images->push_back({field + ".image_url", url});
            continue;
          }
          if (part["type"] != "text")
            throw bad_request(field + ": content parts of type '" + part["type"].get<std::string>() +
                                  "' are not supported (text and image_url)",
                              "messages");
          if (!part.contains("text") || !part["text"].is_string())
            throw bad_request(at + ".content[" + std::to_string(p) + "].text must be a string", "messages");
          text += (p ? "\n" : "") + part["text"].get<std::string>();
        }
        out["content"] = text;
      } else {
        throw bad_request(at + ".content must be a string or a list of text parts", "messages");
      }
    } else if (k == "name" || k == "tool_call_id" || k == "reasoning_content") {
      if (!v.is_string() && !v.is_null()) throw bad_request(at + "." + k + " must be a string", "messages");
      out[k] = v;
    } else if (k == "tool_calls") {
      if (role != "assistant") throw bad_request(at + ".tool_calls is only for assistant messages", "messages");
      if (!v.is_array() && !v.is_null()) throw bad_request(at + ".tool_calls must be a list", "messages");
      out[k] = v;
    } else {
      throw bad_request(at + " has an unknown field '" + k + "'", "messages");
    }
  }
  if (!out.contains("content") && !out.contains("tool_calls"))
    throw bad_request(at + " needs 'content'", "messages");
  return out;
}

// One entry of 'tools': {"type": "function", "function": {"name", "description"?,
// "parameters"? (a JSON Schema object), "strict"?}}.
void check_tool(const ojson& t, size_t index) {
  const std::string at = "tools[" + std::to_string(index) + "]";
  if (!t.is_object() || t.value("type", "") != "function" || !t.contains("function") || !t["function"].is_object())
    throw bad_request(at + " must be {\"type\": \"function\", \"function\": {...}} (function tools only)", "tools");
  const ojson& f = t["function"];
  if (!f.contains("name") || !f["name"].is_string() || f["name"].get<std::string>().empty())
    throw bad_request(at + ".function.name must be a non-empty string", "tools");
  for (auto it = f.begin(); it != f.end(); ++it) {
    const std::string& k = it.key();
    if (k == "name") continue;
    if (k == "description" && !it.value().is_string() && !it.value().is_null())
      throw bad_request(at + ".function.description must be a string", "tools");
    if (k == "parameters" && !it.value().is_object() && !it.value().is_null())
      throw bad_request(at + ".function.parameters must be a JSON Schema object", "tools");
    if (k == "strict" && !it.value().is_boolean() && !it.value().is_null())
      throw bad_request(at + ".function.strict must be true or false", "tools");
    if (k != "description" && k != "parameters" && k != "strict")
      throw bad_request(at + ".function has an unknown field '" + k + "'", "tools");
  }
}

}  // namespace

ChatRequest parse_chat(const ojson& body, const std::string& served_name) {
  if (!body.is_object()) throw bad_request("the request body must be a JSON object");
  ChatRequest r;
  ojson rest = ojson::object();
  bool have_messages = false;
  int64_t top_logprobs = -1;
  for (auto it = body.begin(); it != body.end(); ++it) {
    const std::string& k = it.key();
    const ojson& v = it.value();
    if (k == "model") {
      check_model(v, served_name);
    } else if (k == "messages") {
      have_messages = true;
      if (!v.is_array() || v.empty()) throw bad_request("'messages' must be a non-empty list of messages", "messages");
      for (size_t i = 0; i < v.size(); ++i) r.messages.push_back(normalize_message(v[i], i, &r.images));
      r.raw_messages = v;
    } else if (k == "stream" || k == "stream_options") {
      stream_field(k, v, r.stream, r.include_usage);
    } else if (k == "max_tokens" || k == "max_completion_tokens") {
      if (v.is_null()) continue;
      if (rest.contains("max_tokens") && rest["max_tokens"] != v)
        throw bad_request("'max_tokens' and 'max_completion_tokens' differ; give one", k);
      rest["max_tokens"] = v;
      r.max_tokens_given = true;
    } else if (k == "logprobs") {
      if (v.is_null()) continue;
      if (!v.is_boolean()) throw bad_request("'logprobs' must be true or false", "logprobs");
      r.logprobs = v.get<bool>();
    } else if (k == "top_logprobs") {
      if (v.is_null()) continue;
      if (!v.is_number_integer() || v.get<int64_t>() < 0 || v.get<int64_t>() > SamplingParams::kMaxLogprobs)
        throw bad_request("'top_logprobs' must be an integer in [0, " + std::to_string(SamplingParams::kMaxLogprobs) + "]",
                          "top_logprobs");
      top_logprobs = v.get<int64_t>();
    } else if (k == "chat_template_kwargs") {
      if (v.is_null()) continue;
      if (!v.is_object()) throw bad_request("'chat_template_kwargs' must be an object", "chat_template_kwargs");
      for (auto kv = v.begin(); kv != v.end(); ++kv) {
        if (kv.key() == "reasoning_effort" && r.chat.kwargs.contains("reasoning_effort") && r.chat.kwargs["reasoning_effort"] != kv.value())
          throw bad_request("'reasoning_effort' and chat_template_kwargs.reasoning_effort differ; give one", "reasoning_effort");
        r.chat.kwargs[kv.key()] = kv.value();
      }
    } else if (k == "add_generation_prompt") {
      if (!v.is_boolean()) throw bad_request("'add_generation_prompt' must be true or false", "add_generation_prompt");
      r.chat.add_generation_prompt = v.get<bool>();
    } else if (k == "user") {
      if (!v.is_string() && !v.is_null()) throw bad_request("'user' must be a string", "user");
    } else if (k == "logit_bias") {
      if (!v.is_null() && !(v.is_object() && v.empty())) throw bad_request("'logit_bias' is not supported", "logit_bias");
    } else if (k == "tools") {
      if (v.is_null()) continue;
      if (!v.is_array()) throw bad_request("'tools' must be a list of tools", "tools");
      for (size_t t = 0; t < v.size(); ++t) check_tool(v[t], t);
      if (!v.empty()) r.chat.tools = v;
    } else if (k == "tool_choice") {
      if (v.is_null()) continue;
      if (v.is_string()) {
        const std::string c = v.get<std::string>();
        if (c != "none" && c != "auto" && c != "required")
          throw bad_request("'tool_choice' must be \"none\", \"auto\", \"required\" or {\"type\": \"function\", "
                            "\"function\": {\"name\": ...}}", "tool_choice");
        r.tool_choice = c;
      } else if (v.is_object() && v.value("type", "") == "function" && v.contains("function") &&
                 v["function"].is_object() && v["function"].contains("name") && v["function"]["name"].is_string()) {
        r.tool_choice = "function";
        r.tool_name = v["function"]["name"].get<std::string>();
      } else {
        throw bad_request("'tool_choice' must be \"none\", \"auto\", \"required\" or {\"type\": \"function\", "
                          "\"function\": {\"name\": ...}}", "tool_choice");
      }
    } else if (k == "parallel_tool_calls") {
      if (v.is_null()) continue;
      if (!v.is_boolean()) throw bad_request("'parallel_tool_calls' must be true or false", k);
      r.parallel_tool_calls = v.get<bool>();
    } else if (k == "reasoning_effort") {
      if (v.is_null()) continue;
      if (!v.is_string() && !v.is_number_integer())
        throw bad_request("'reasoning_effort' must be a name (\"low\", \"high\", \"max\", ...) or an integer", k);
      r.chat.kwargs["reasoning_effort"] = v;
      r.reasoning_effort_given = true;
    } else if (k == "functions" || k == "function_call") {
      if (!v.is_null()) throw bad_request("'" + k + "' is the deprecated form of tools / tool_choice; use those", k);
    } else if (k == "prompt" || k == "prompt_token_ids" || k == "prompt_logprobs" || k == "echo" || k == "suffix") {
      throw bad_request("unknown field '" + k + "' for chat completions", k);
    } else if (!v.is_null()) {
      rest[k] = v;
    }
  }
  if (!have_messages) throw bad_request("missing 'messages'", "messages");
  if (r.tool_choice != "auto" && r.tool_choice != "none" && r.chat.tools.is_null())
    throw bad_request("'tool_choice' " + std::string(r.tool_choice == "required" ? "\"required\"" : "names a function") +
                          " but the request has no 'tools'", "tool_choice");
  if (r.tool_choice == "function") {
    bool found = false;
    for (const ojson& t : r.chat.tools) found = found || t["function"]["name"] == r.tool_name;
    if (!found) throw bad_request("'tool_choice' names '" + r.tool_name + "', which is not one of the tools", "tool_choice");
  }
  // tool_choice "none": the tools stay in the prompt (an agent's next turn keeps its cached
  // prefix), but no call is read back or constrained.
  check_stream_options(body, r.stream);
  if (top_logprobs >= 0 && !r.logprobs)
    throw bad_request("'top_logprobs' needs 'logprobs': true", "top_logprobs");
  if (r.logprobs) rest["logprobs"] = top_logprobs < 0 ? 0 : top_logprobs;
  SamplingParams defaults;
  rest["prompt"] = "-";
  try {
    r.params = parse_prompt_line(rest.dump(), defaults).params;
  } catch (const Error& e) {
    throw bad_request(e.what(), field_of(e.what()));
  }
  return r;
}

}  // namespace gannet::server
