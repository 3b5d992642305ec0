// Which chat format a model uses (the server's chat endpoint, the Python package's
// LLM.chat): the checkpoint's Jinja chat template (chat_template.jinja or
// tokenizer_config.json), one given with --chat-template, or the
// built-in DeepSeek-V4 format for DeepseekV4 / DeepseekV41 checkpoints that ship none. The
// DeepSeek-V4 format with thinking on makes the answer open with reasoning up to </think>.
#pragma once

#include <optional>
#include <string>

#include "tokenizer/chat_template.h"

namespace gannet::tokenizer {

class ChatFormat {
 public:
  // Throws gannet::Error naming the file for a template that cannot be read or parsed.
  static ChatFormat load(const std::string& model_dir, const std::string& template_file);

  bool available() const { return jinja_.has_value() || deepseek_v4_; }
  // Where the format comes from, for the start-up line.
  const std::string& origin() const { return origin_; }

  // The prompt text. `reasoning` says whether the output starts inside reasoning text.
  // Throws gannet::Error for a conversation the format refuses.
  std::string render(const nlohmann::ordered_json& messages, const tokenizer::ChatOptions& options,
                     bool* reasoning) const;

 private:
  std::optional<tokenizer::ChatTemplate> jinja_;
  bool deepseek_v4_ = false;
  std::string origin_ = "none";
};

// Splits streamed text into reasoning and answer at the first "</think>" (dropped). A
// tail that may be the start of "</think>" is held back until the next piece decides it.
class ReasoningSplitter {
 public:
  explicit ReasoningSplitter(bool starts_in_reasoning) : in_reasoning_(starts_in_reasoning) {}
  void feed(const std::string& piece, std::string& reasoning, std::string& content);
  void finish(std::string& reasoning, std::string& content);  // flushes what is held
  bool in_reasoning() const { return in_reasoning_; }

 private:
  bool in_reasoning_;
  std::string held_;
};

}  // namespace gannet::tokenizer
