#include "chat/chat_template.h"

#include <fstream>
#include <sstream>

#include "core/error.h"
#include "chat/jinja_template.h"
#include "tokenizer/json_file.h"

namespace gannet::chat {

namespace {

// A special token of tokenizer_config.json as the string transformers passes: the text,
// or an AddedToken object's "content".
std::optional<std::string> token_text(const nlohmann::json& cfg, const char* key) {
  if (!cfg.contains(key)) return std::nullopt;
  const nlohmann::json& v = cfg[key];
  if (v.is_string()) return v.get<std::string>();
  if (v.is_object() && v.contains("content") && v["content"].is_string()) return v["content"].get<std::string>();
  return std::nullopt;
}

// The messages as transformers (5.x) hands them to the template: keys whose value is null
// are dropped (so `content: null` is undefined, not none), and a message with reasoning
// (reasoning_content, thinking or reasoning) becomes {"thinking": r, **message,
// "reasoning_content": r}.
nlohmann::ordered_json transformers_messages(const nlohmann::ordered_json& messages) {
  if (!messages.is_array()) return messages;
  nlohmann::ordered_json out = nlohmann::ordered_json::array();
  for (const auto& m : messages) {
    if (!m.is_object()) {
      out.push_back(m);
      continue;
    }
    nlohmann::ordered_json kept = nlohmann::ordered_json::object();
    for (auto it = m.begin(); it != m.end(); ++it)
      if (!it.value().is_null()) kept[it.key()] = it.value();
    const nlohmann::ordered_json* reasoning = nullptr;
    for (const char* k : {"reasoning_content", "thinking", "reasoning"})
      if (!reasoning && kept.contains(k)) reasoning = &kept[k];
    if (reasoning) {
      const nlohmann::ordered_json r = *reasoning;
      nlohmann::ordered_json aliased = nlohmann::ordered_json::object();
      aliased["thinking"] = r;
      for (auto it = kept.begin(); it != kept.end(); ++it) aliased[it.key()] = it.value();
      aliased["reasoning_content"] = r;
      kept = std::move(aliased);
    }
    out.push_back(std::move(kept));
  }
  return out;
}

nlohmann::ordered_json special_of(const nlohmann::json& cfg) {
  nlohmann::ordered_json special = nlohmann::ordered_json::object();
  for (const char* k : {"bos_token", "eos_token", "unk_token", "pad_token"})
    if (auto t = token_text(cfg, k)) special[k] = *t;
  return special;
}

}  // namespace

nlohmann::ordered_json chat_special_tokens(const std::string& dir) {
  const std::string cfg_path = tokenizer::join_path(dir, "tokenizer_config.json");
  if (!tokenizer::file_exists(cfg_path)) return nlohmann::ordered_json::object();
  const nlohmann::json cfg = tokenizer::read_json_file(cfg_path);
  if (!cfg.is_object()) fail(cfg_path, ": expected a JSON object");
  return special_of(cfg);
}

std::optional<ChatTemplate> ChatTemplate::from_dir(const std::string& dir) {
  const std::string cfg_path = tokenizer::join_path(dir, "tokenizer_config.json");
  nlohmann::json cfg = nlohmann::json::object();
  if (tokenizer::file_exists(cfg_path)) cfg = tokenizer::read_json_file(cfg_path);
  if (!cfg.is_object()) fail(cfg_path, ": expected a JSON object");
  const nlohmann::ordered_json special = special_of(cfg);

  std::string source, origin;
  const std::string jinja_path = tokenizer::join_path(dir, "chat_template.jinja");
  if (tokenizer::file_exists(jinja_path)) {
    std::ifstream f(jinja_path, std::ios::binary);
    std::stringstream ss;
    ss << f.rdbuf();
    if (!f) fail(jinja_path, ": cannot read");
    source = ss.str();
    origin = jinja_path;
  } else if (cfg.contains("chat_template") && !cfg["chat_template"].is_null()) {
    const nlohmann::json& t = cfg["chat_template"];
    origin = cfg_path + " \"chat_template\"";
    if (t.is_string()) {
      source = t.get<std::string>();
    } else if (t.is_array()) {
      bool found = false;
      for (const nlohmann::json& e : t) {
        if (!e.is_object() || !e.contains("name") || !e.contains("template") || !e["name"].is_string() ||
            !e["template"].is_string())
          fail(origin, ": each entry must be {\"name\": ..., \"template\": ...}");
        if (e["name"] == "default") source = e["template"].get<std::string>(), found = true;
      }
      if (!found) fail(origin, ": no template named \"default\"");
    } else {
      fail(origin, ": must be a string or a list of named templates");
    }
  } else {
    return std::nullopt;
  }
  try {
    return ChatTemplate(source, special);
  } catch (const Error& e) {
    fail(origin, ": ", e.what());
  }
}

ChatTemplate::ChatTemplate(const std::string& source, nlohmann::ordered_json special_tokens)
    : template_(std::make_shared<jinja::Template>(source)), special_(std::move(special_tokens)), source_(source) {}

void ChatTemplate::set_clock(std::function<std::string(const std::string&)> strftime_now) {
  template_->set_clock(std::move(strftime_now));
}

std::string ChatTemplate::render(const nlohmann::ordered_json& messages, const ChatOptions& options) const {
  // transformers: render(messages=..., tools=..., documents=None, add_generation_prompt=...,
  // **special_tokens, **kwargs), later keys winning.
  nlohmann::ordered_json ctx = nlohmann::ordered_json::object();
  ctx["messages"] = transformers_messages(messages);
  ctx["tools"] = options.tools;
  ctx["documents"] = nullptr;
  ctx["add_generation_prompt"] = options.add_generation_prompt;
  for (auto it = special_.begin(); it != special_.end(); ++it) ctx[it.key()] = it.value();
  if (options.kwargs.is_object())
    for (auto it = options.kwargs.begin(); it != options.kwargs.end(); ++it) ctx[it.key()] = it.value();
  try {
    return template_->render(jinja::Value::from_json(ctx));
  } catch (const jinja::TemplateRaised& e) {
    fail("the chat template refused the conversation: ", e.what());
  }
}

}  // namespace gannet::chat
