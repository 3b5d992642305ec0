#include "tokenizer/chat_format.h"

#include <fstream>
#include <sstream>

#include "core/error.h"
#include "tokenizer/json_file.h"

namespace gannet::tokenizer {

namespace {
constexpr std::string_view kEndThink = "</think>";
}

ChatFormat ChatFormat::load(const std::string& model_dir, const std::string& template_file) {
  ChatFormat f;
  if (!template_file.empty()) {
    std::ifstream in(template_file, std::ios::binary);
    if (!in) fail("--chat-template ", template_file, ": cannot read the file");
    std::stringstream ss;
    ss << in.rdbuf();
    // The checkpoint's special tokens still apply to a template given by file.
    const nlohmann::ordered_json special = tokenizer::chat_special_tokens(model_dir);
    try {
      f.jinja_.emplace(ss.str(), special);
    } catch (const Error& e) {
      fail("--chat-template ", template_file, ": ", e.what());
    }
    f.origin_ = template_file;
    return f;
  }
  f.jinja_ = tokenizer::ChatTemplate::from_dir(model_dir);
  if (f.jinja_) {
    f.origin_ = "the checkpoint's chat template";
    return f;
  }
  const std::string config = tokenizer::join_path(model_dir, "config.json");
  if (tokenizer::file_exists(config)) {
    const nlohmann::json c = tokenizer::read_json_file(config);
    if (c.contains("architectures") && c["architectures"].is_array() && !c["architectures"].empty()) {
      const std::string arch = c["architectures"][0].is_string() ? c["architectures"][0].get<std::string>() : "";
      if (arch == "DeepseekV4ForCausalLM" || arch == "DeepseekV41ForCausalLM") {
        f.deepseek_v4_ = true;
        f.origin_ = "the built-in DeepSeek-V4 format";
      }
    }
  }
  return f;
}

std::string ChatFormat::render(const nlohmann::ordered_json& messages, const tokenizer::ChatOptions& options,
                               bool* reasoning) const {
  if (reasoning) *reasoning = false;
  if (jinja_) return jinja_->render(messages, options);
  if (!deepseek_v4_) fail("this model has no chat template (give one with --chat-template FILE)");
  const std::string prompt = tokenizer::render_deepseek_v4_chat(messages, options);
  if (reasoning && options.add_generation_prompt) *reasoning = prompt.ends_with("<think>");
  return prompt;
}

void ReasoningSplitter::feed(const std::string& piece, std::string& reasoning, std::string& content) {
  if (!in_reasoning_) {
    content += piece;
    return;
  }
  held_ += piece;
  const size_t end = held_.find(kEndThink);
  if (end != std::string::npos) {
    reasoning += held_.substr(0, end);
    content += held_.substr(end + kEndThink.size());
    held_.clear();
    in_reasoning_ = false;
    return;
  }
  // Keep the longest tail that is a proper prefix of "</think>".
  size_t keep = 0;
  for (size_t n = std::min(held_.size(), kEndThink.size() - 1); n > 0; --n)
    if (held_.compare(held_.size() - n, n, kEndThink.substr(0, n)) == 0) {
      keep = n;
      break;
    }
  reasoning += held_.substr(0, held_.size() - keep);
  held_.erase(0, held_.size() - keep);
}

void ReasoningSplitter::finish(std::string& reasoning, std::string& content) {
  (void)content;
  reasoning += held_;
  held_.clear();
}

}  // namespace gannet::tokenizer
