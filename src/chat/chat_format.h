// Which chat format a model uses (the server's chat endpoint, the Python package's
// LLM.chat, `gannet chat-format`): a template given with --chat-template, else the
// checkpoint's Jinja chat template (chat_template.jinja or tokenizer_config.json), else
// DeepSeek's own encoder for DeepseekV4 / DeepseekV41 checkpoints, which ship none
// (deepseek_v4_encoding.h). With thinking on, the DeepSeek prompt ends in "<think>" and
// the answer opens with reasoning up to "</think>".
#pragma once

#include <optional>
#include <string>

#include "chat/chat_template.h"
#include "chat/deepseek_v4_encoding.h"
#include "chat/output_parser.h"

namespace gannet::chat {

class ChatFormat {
 public:
  // Throws gannet::Error naming the file for a template that cannot be read or parsed.
  static ChatFormat load(const std::string& model_dir, const std::string& template_file);

  bool available() const { return jinja_.has_value() || deepseek_.has_value(); }
  // Where the format comes from, for the start-up line.
  const std::string& origin() const { return origin_; }
  // The DeepSeek encoder in use, if that is the format.
  std::optional<DeepseekVersion> deepseek() const { return deepseek_; }

  // How a completion of `prompt` is read back (output_parser.h): reasoning opened by the
  // prompt (DeepSeek's "<think>") or by a leading "<think>" (templates that write one:
  // Qwen3), and with `tools` the family's tool-call syntax, chosen by the format: DSML for
  // DeepSeek-V4 / V4.1, "<tool_call>" JSON for templates that write it (Qwen 2.5 / 3), a
  // JSON {"name", "parameters"} answer for Llama 3.1 / 3.2's, "<｜tool▁calls▁begin｜>" for
  // DeepSeek V3 / V3.1's.
  ChatOutputParser::Options output_options(const std::string& prompt, bool tools) const;
  // Whether tool calls in this format's output can be read back.
  bool reads_tool_calls() const;

  // The grammar constrained tool calls decode under (structured/tool_grammar.h) for
  // `tools` (OpenAI function tools): with `forced` (tool_choice "required" or a named
  // function) the answer is a call block (after "</think>" when the prompt opened
  // reasoning); otherwise the grammar starts where the model opens a block (its trigger).
  // nullopt where the format has no such block to constrain (Llama's unmarked JSON under
  // "auto") or reads no calls.
  struct ToolGrammar {
    std::string spec, trigger;
  };
  std::optional<ToolGrammar> tool_grammar(const nlohmann::ordered_json& tools, bool parallel, bool forced,
                                          const std::string& prompt) const;

  // The prompt text. `reasoning` says whether the output starts inside reasoning text.
  // Throws gannet::Error for a conversation the format refuses.
  //
  // For the DeepSeek encoders, options.kwargs takes encode_messages' keyword names
  // (thinking_mode, drop_thinking, add_default_bos_token, reasoning_effort, context) and
  // the switches "thinking" / "enable_thinking" (true = thinking_mode "thinking"); any
  // other key is refused by name. options.tools go on the first message when it is a
  // system message, else on an empty system message put first, where the encoders read
  // them.
  std::string render(const nlohmann::ordered_json& messages, const ChatOptions& options, bool* reasoning) const;

 private:
  std::optional<ChatTemplate> jinja_;
  std::optional<DeepseekVersion> deepseek_;
  std::string origin_ = "none";
};

// The DeepSeek encoder an architecture name uses (nullopt for other families).
std::optional<DeepseekVersion> deepseek_version_of_architecture(const std::string& arch);

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

}  // namespace gannet::chat
