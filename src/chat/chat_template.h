// Chat formats: a conversation (OpenAI-style messages) -> the prompt text a model was
// trained on. Either the checkpoint's own Jinja `chat_template` (jinja_template.h),
// rendered the way transformers' apply_chat_template renders it (DeepSeek-V4 / V4.1
// checkpoints ship none: deepseek_v4_encoding.h).
#pragma once

#include <functional>
#include <memory>
#include <optional>
#include <string>

#include <nlohmann/json.hpp>

namespace gannet::chat {

namespace jinja {
class Template;
}

struct ChatOptions {
  bool add_generation_prompt = true;
  // Extra template variables (chat_template_kwargs, e.g. enable_thinking); they override
  // the special tokens of the same name, as in transformers.
  nlohmann::ordered_json kwargs = nlohmann::ordered_json::object();
  // Tool definitions (OpenAI "tools"), passed to the template as `tools`; null for none.
  nlohmann::ordered_json tools;
};

class ChatTemplate {
 public:
  // The template of a model directory: chat_template.jinja, else tokenizer_config.json's
  // "chat_template" (a string, or a list of {"name", "template"} whose "default" is
  // taken). nullopt when the directory has neither. Throws gannet::Error naming the file
  // for a template that does not parse.
  static std::optional<ChatTemplate> from_dir(const std::string& dir);

  // `special_tokens`: the variables transformers passes beside the messages (bos_token,
  // eos_token, pad_token, unk_token), as strings.
  ChatTemplate(const std::string& source, nlohmann::ordered_json special_tokens);

  // The prompt text. Throws gannet::Error for an evaluation error or when the template
  // calls raise_exception (the message says which).
  std::string render(const nlohmann::ordered_json& messages, const ChatOptions& options) const;

  const std::string& source() const { return source_; }

  // Pins strftime_now (tests).
  void set_clock(std::function<std::string(const std::string&)> strftime_now);

 private:
  std::shared_ptr<jinja::Template> template_;
  nlohmann::ordered_json special_;
  std::string source_;
};

// The special-token variables a template sees (bos_token, eos_token, unk_token, pad_token),
// from `dir`/tokenizer_config.json; empty without one.
nlohmann::ordered_json chat_special_tokens(const std::string& dir);

}  // namespace gannet::chat
