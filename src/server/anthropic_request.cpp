#include "server/anthropic_request.h"

#include "chat/python_json.h"

namespace gannet::server {

namespace {

using ojson = nlohmann::ordered_json;

// cache_control: a prompt-caching hint. gannet's prefix cache is automatic and exact, so
// the hint changes nothing; its shape is still checked.
void check_cache_control(const ojson& v, const std::string& at) {
  if (v.is_null()) return;
  if (!v.is_object() || v.value("type", "") != "ephemeral")
    refuse(at + ".cache_control must be {\"type\": \"ephemeral\"}", "cache_control");
  for (auto it = v.begin(); it != v.end(); ++it)
    if (it.key() != "type" && it.key() != "ttl") refuse(at + ".cache_control has an unknown field '" + it.key() + "'", "cache_control");
}

// The keys a block may have besides "type" (cache_control is allowed on every block).
void check_keys(const ojson& block, const std::string& at, std::initializer_list<const char*> allowed) {
  for (auto it = block.begin(); it != block.end(); ++it) {
    const std::string& k = it.key();
    if (k == "type") continue;
    if (k == "cache_control") {
      check_cache_control(it.value(), at);
      continue;
    }
    bool ok = false;
    for (const char* a : allowed) ok = ok || k == a;
    if (!ok) refuse(at + " has an unknown field '" + k + "'", "messages");
  }
}

std::string block_type(const ojson& block, const std::string& at) {
  if (!block.is_object() || !block.contains("type") || !block["type"].is_string())
    refuse(at + " must be a content block with a 'type'", "messages");
  return block["type"].get<std::string>();
}

std::string text_of(const ojson& block, const std::string& at) {
  check_keys(block, at, {"text", "citations"});
  if (!block.contains("text") || !block["text"].is_string()) refuse(at + ".text must be a string", "messages");
  if (block.contains("citations") && !block["citations"].is_null() && !(block["citations"].is_array() && block["citations"].empty()))
    refuse(at + ".citations are not supported", "messages");
  return block["text"].get<std::string>();
}

// {"type": "image", "source": {"type": "base64", "media_type", "data"}} -> a data: URL part.
ojson image_part(const ojson& block, const std::string& at) {
  check_keys(block, at, {"source"});
  const ojson* src = block.contains("source") ? &block["source"] : nullptr;
  if (!src || !src->is_object()) refuse(at + ".source must be {\"type\": \"base64\", \"media_type\", \"data\"}", "messages");
  const std::string type = src->value("type", "");
  if (type != "base64")
    refuse(at + ".source.type '" + type + "': only base64 images are taken (the server fetches no URLs or files)", "messages");
  for (auto it = src->begin(); it != src->end(); ++it)
    if (it.key() != "type" && it.key() != "media_type" && it.key() != "data")
      refuse(at + ".source has an unknown field '" + it.key() + "'", "messages");
  if (!src->contains("media_type") || !(*src)["media_type"].is_string())
    refuse(at + ".source.media_type must be a string (image/png, image/jpeg, ...)", "messages");
  if (!src->contains("data") || !(*src)["data"].is_string()) refuse(at + ".source.data must be base64 text", "messages");
  return {{"type", "image_url"},
          {"image_url", {{"url", "data:" + (*src)["media_type"].get<std::string>() + ";base64," + (*src)["data"].get<std::string>()}}}};
}

// A tool_result's content: a string or text blocks, joined by newlines.
std::string tool_result_text(const ojson& block, const std::string& at) {
  check_keys(block, at, {"tool_use_id", "content", "is_error"});
  if (!block.contains("tool_use_id") || !block["tool_use_id"].is_string())
    refuse(at + ".tool_use_id must be a string", "messages");
  std::string text;
  if (block.contains("content")) {
    const ojson& c = block["content"];
    if (c.is_string()) {
      text = c.get<std::string>();
    } else if (c.is_array()) {
      for (size_t i = 0; i < c.size(); ++i) {
        const std::string f = at + ".content[" + std::to_string(i) + "]";
        const std::string t = block_type(c[i], f);
        if (t != "text") refuse(f + ": tool results of type '" + t + "' are not supported (text)", "messages");
        text += (i ? "\n" : "") + text_of(c[i], f);
      }
    } else if (!c.is_null()) {
      refuse(at + ".content must be a string or a list of text blocks", "messages");
    }
  }
  if (block.contains("is_error") && !block["is_error"].is_null()) {
    if (!block["is_error"].is_boolean()) refuse(at + ".is_error must be true or false", "messages");
    if (block["is_error"].get<bool>()) text = "Error: " + text;
  }
  return text;
}

// One Anthropic message -> OpenAI messages appended to `out`.
void convert_message(const ojson& m, size_t index, ojson& out) {
  const std::string at = "messages[" + std::to_string(index) + "]";
  if (!m.is_object()) refuse(at + " must be an object", "messages");
  for (auto it = m.begin(); it != m.end(); ++it)
    if (it.key() != "role" && it.key() != "content") refuse(at + " has an unknown field '" + it.key() + "'", "messages");
  if (!m.contains("role") || !m["role"].is_string()) refuse(at + ".role must be \"user\" or \"assistant\"", "messages");
  const std::string role = m["role"].get<std::string>();
  if (role != "user" && role != "assistant")
    refuse(at + ".role '" + role + "' is not \"user\" or \"assistant\" (the system prompt is the top-level 'system')", "messages");
  if (!m.contains("content")) refuse(at + " needs 'content'", "messages");
  const ojson& content = m["content"];
  if (content.is_string()) {
    out.push_back({{"role", role}, {"content", content}});
    return;
  }
  if (!content.is_array()) refuse(at + ".content must be a string or a list of content blocks", "messages");
  ojson parts = ojson::array();
  ojson calls = ojson::array();
  std::string reasoning;
  bool any_reasoning = false;
  for (size_t b = 0; b < content.size(); ++b) {
    const std::string f = at + ".content[" + std::to_string(b) + "]";
    const ojson& block = content[b];
    const std::string type = block_type(block, f);
    if (type == "text") {
      parts.push_back({{"type", "text"}, {"text", text_of(block, f)}});
    } else if (type == "image") {
      if (role != "user") refuse(f + ": images are taken in user messages only", "messages");
      parts.push_back(image_part(block, f));
    } else if (type == "tool_result") {
      if (role != "user") refuse(f + ": tool_result blocks belong in user messages", "messages");
      if (!parts.empty()) refuse(f + ": tool_result blocks must come before the message's other blocks", "messages");
      out.push_back({{"role", "tool"}, {"tool_call_id", block["tool_use_id"]}, {"content", tool_result_text(block, f)}});
    } else if (type == "tool_use") {
      if (role != "assistant") refuse(f + ": tool_use blocks belong in assistant messages", "messages");
      check_keys(block, f, {"id", "name", "input"});
      if (!block.contains("id") || !block["id"].is_string()) refuse(f + ".id must be a string", "messages");
      if (!block.contains("name") || !block["name"].is_string()) refuse(f + ".name must be a string", "messages");
      if (!block.contains("input") || !block["input"].is_object()) refuse(f + ".input must be an object", "messages");
      calls.push_back({{"id", block["id"]},
                       {"type", "function"},
                       {"function", {{"name", block["name"]}, {"arguments", chat::python_json_dumps(block["input"])}}}});
    } else if (type == "thinking") {
      if (role != "assistant") refuse(f + ": thinking blocks belong in assistant messages", "messages");
      check_keys(block, f, {"thinking", "signature"});
      if (!block.contains("thinking") || !block["thinking"].is_string()) refuse(f + ".thinking must be a string", "messages");
      reasoning += block["thinking"].get<std::string>();
      any_reasoning = true;
    } else {
      refuse(f + ": content blocks of type '" + type + "' are not supported (text, image, tool_use, tool_result, thinking)",
             "messages");
    }
  }
  if (role == "user") {
    if (!parts.empty()) out.push_back({{"role", "user"}, {"content", parts}});
    else if (content.empty()) refuse(at + ".content is empty", "messages");
    return;
  }
  ojson msg = {{"role", "assistant"}};
  if (!parts.empty()) msg["content"] = parts;
  else msg["content"] = nullptr;
  if (!calls.empty()) msg["tool_calls"] = calls;
  if (any_reasoning) msg["reasoning_content"] = reasoning;
  if (parts.empty() && calls.empty() && !any_reasoning) refuse(at + ".content is empty", "messages");
  out.push_back(msg);
}

ojson convert_tool(const ojson& t, size_t index) {
  const std::string at = "tools[" + std::to_string(index) + "]";
  if (!t.is_object()) refuse(at + " must be an object", "tools");
  if (t.contains("type") && !t["type"].is_null() && t["type"] != "custom")
    refuse(at + ".type '" + (t["type"].is_string() ? t["type"].get<std::string>() : t["type"].dump()) +
               "': server tools are not supported (client tools with name, description, input_schema)",
           "tools");
  ojson fn = ojson::object();
  for (auto it = t.begin(); it != t.end(); ++it) {
    const std::string& k = it.key();
    const ojson& v = it.value();
    if (k == "type") continue;
    if (k == "name") {
      if (!v.is_string() || v.get<std::string>().empty()) refuse(at + ".name must be a non-empty string", "tools");
      fn["name"] = v;
    } else if (k == "description") {
      if (!v.is_string() && !v.is_null()) refuse(at + ".description must be a string", "tools");
      if (v.is_string()) fn["description"] = v;
    } else if (k == "input_schema") {
      if (!v.is_object()) refuse(at + ".input_schema must be a JSON Schema object", "tools");
      fn["parameters"] = v;
    } else if (k == "cache_control") {
      check_cache_control(v, at);
    } else {
      refuse(at + " has an unknown field '" + k + "'", "tools");
    }
  }
  if (!fn.contains("name")) refuse(at + ".name must be a non-empty string", "tools");
  if (!fn.contains("parameters")) refuse(at + " needs 'input_schema'", "tools");
  return {{"type", "function"}, {"function", fn}};
}

}  // namespace

nlohmann::json anthropic_error_body(const ApiError& e) {
  std::string type = "invalid_request_error";
  if (e.status == 401) type = "authentication_error";
  else if (e.status == 403) type = "permission_error";
  else if (e.status == 404) type = "not_found_error";
  else if (e.status == 413) type = "request_too_large";
  else if (e.status == 429) type = "rate_limit_error";
  else if (e.status >= 500) type = "api_error";
  return {{"type", "error"}, {"error", {{"type", type}, {"message", e.message}}}};
}

MessagesRequest parse_messages(const ojson& body, const std::string& served_name, bool count_tokens) {
  if (!body.is_object()) refuse("the request body must be a JSON object", "");
  ojson oa = ojson::object();  // the OpenAI chat body
  ojson msgs = ojson::array();
  ojson system;
  MessagesRequest r;
  bool have_max = false, have_messages = false;
  int64_t budget = -1;
  ojson kwargs = ojson::object();
  for (auto it = body.begin(); it != body.end(); ++it) {
    const std::string& k = it.key();
    const ojson& v = it.value();
    if (k == "model") {
      oa["model"] = v;
    } else if (k == "system") {
      if (v.is_string()) {
        system = v;
      } else if (v.is_array()) {
        ojson parts = ojson::array();
        for (size_t i = 0; i < v.size(); ++i) {
          const std::string f = "system[" + std::to_string(i) + "]";
          const std::string t = block_type(v[i], f);
          if (t != "text") refuse(f + ": the system prompt takes text blocks only", "system");
          parts.push_back({{"type", "text"}, {"text", text_of(v[i], f)}});
        }
        system = parts;
      } else if (!v.is_null()) {
        refuse("'system' must be a string or a list of text blocks", "system");
      }
    } else if (k == "messages") {
      have_messages = true;
      if (!v.is_array() || v.empty()) refuse("'messages' must be a non-empty list of messages", "messages");
      for (size_t i = 0; i < v.size(); ++i) convert_message(v[i], i, msgs);
    } else if (k == "max_tokens") {
      if (!v.is_number_integer() || v.get<int64_t>() < 1) refuse("'max_tokens' must be an integer >= 1", "max_tokens");
      oa["max_tokens"] = v;
      have_max = true;
    } else if (k == "temperature" || k == "top_p" || k == "top_k") {
      if (!v.is_null()) oa[k] = v;
    } else if (k == "stop_sequences") {
      if (v.is_null()) continue;
      if (!v.is_array()) refuse("'stop_sequences' must be a list of strings", "stop_sequences");
      for (const ojson& s : v)
        if (!s.is_string() || s.get<std::string>().empty()) refuse("'stop_sequences' must be a list of non-empty strings", "stop_sequences");
      if (!v.empty()) oa["stop"] = v;
    } else if (k == "stream") {
      if (v.is_null()) continue;
      if (!v.is_boolean()) refuse("'stream' must be true or false", "stream");
      if (count_tokens && v.get<bool>()) refuse("'stream' is not taken by count_tokens", "stream");
      oa["stream"] = v;
    } else if (k == "metadata") {
      if (v.is_null()) continue;
      if (!v.is_object()) refuse("'metadata' must be an object", "metadata");
      for (auto m = v.begin(); m != v.end(); ++m)
        if (m.key() != "user_id") refuse("metadata has an unknown field '" + m.key() + "' (user_id)", "metadata");
        else if (!m.value().is_string() && !m.value().is_null()) refuse("metadata.user_id must be a string", "metadata");
    } else if (k == "tools") {
      if (v.is_null()) continue;
      if (!v.is_array()) refuse("'tools' must be a list of tools", "tools");
      ojson tools = ojson::array();
      for (size_t t = 0; t < v.size(); ++t) tools.push_back(convert_tool(v[t], t));
      if (!tools.empty()) oa["tools"] = tools;
    } else if (k == "tool_choice") {
      if (v.is_null()) continue;
      const std::string type = v.is_object() ? v.value("type", "") : "";
      if (type != "auto" && type != "any" && type != "tool" && type != "none")
        refuse("'tool_choice' must be {\"type\": \"auto\" | \"any\" | \"tool\" | \"none\"}", "tool_choice");
      for (auto f = v.begin(); f != v.end(); ++f) {
        if (f.key() == "type") continue;
        if (f.key() == "name" && type == "tool") {
          if (!f.value().is_string()) refuse("tool_choice.name must be a string", "tool_choice");
        } else if (f.key() == "disable_parallel_tool_use" && type != "none") {
          if (!f.value().is_boolean()) refuse("tool_choice.disable_parallel_tool_use must be true or false", "tool_choice");
          oa["parallel_tool_calls"] = !f.value().get<bool>();
        } else {
          refuse("tool_choice has an unknown field '" + f.key() + "' for type '" + type + "'", "tool_choice");
        }
      }
      if (type == "auto" || type == "none") oa["tool_choice"] = type;
      else if (type == "any") oa["tool_choice"] = "required";
      else if (!v.contains("name")) refuse("tool_choice of type 'tool' needs 'name'", "tool_choice");
      else oa["tool_choice"] = {{"type", "function"}, {"function", {{"name", v["name"]}}}};
    } else if (k == "thinking") {
      if (v.is_null()) continue;
      const std::string type = v.is_object() ? v.value("type", "") : "";
      if (type != "enabled" && type != "disabled")
        refuse("'thinking' must be {\"type\": \"enabled\", \"budget_tokens\": N} or {\"type\": \"disabled\"}", "thinking");
      for (auto f = v.begin(); f != v.end(); ++f)
        if (f.key() != "type" && !(f.key() == "budget_tokens" && type == "enabled"))
          refuse("thinking has an unknown field '" + f.key() + "'", "thinking");
      r.thinking = type == "enabled";
      if (r.thinking) {
        if (!v.contains("budget_tokens") || !v["budget_tokens"].is_number_integer() || v["budget_tokens"].get<int64_t>() < 1024)
          refuse("thinking.budget_tokens must be an integer >= 1024", "thinking");
        budget = v["budget_tokens"].get<int64_t>();
      }
      kwargs["enable_thinking"] = r.thinking;
    } else if (k == "structured" || k == "seed" || k == "min_p") {
      // gannet's own sampling extensions, as on the OpenAI endpoints.
      if (!v.is_null()) oa[k] = v;
    } else if (!v.is_null()) {
      refuse("unknown field '" + k + "'", k);
    }
  }
  if (!have_messages) refuse("missing 'messages'", "messages");
  if (!have_max && !count_tokens) refuse("missing 'max_tokens'", "max_tokens");
  if (budget >= 0 && have_max && budget >= oa["max_tokens"].get<int64_t>())
    refuse("thinking.budget_tokens must be less than max_tokens", "thinking");
  if (!system.is_null()) msgs.insert(msgs.begin(), ojson{{"role", "system"}, {"content", system}});
  oa["messages"] = msgs;
  if (!kwargs.empty()) oa["chat_template_kwargs"] = kwargs;
  if (!oa.contains("model")) oa["model"] = served_name;  // count_tokens and curl users may leave it out
  r.chat = parse_chat(oa, served_name);
  return r;
}

}  // namespace gannet::server
