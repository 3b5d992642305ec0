#include "chat/chat_format.h"

#include <fstream>
#include <sstream>

#include "core/error.h"
#include "tokenizer/json_file.h"

namespace gannet::chat {

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
    const nlohmann::ordered_json special = chat_special_tokens(model_dir);
    try {
      f.jinja_.emplace(ss.str(), special);
    } catch (const Error& e) {
      fail("--chat-template ", template_file, ": ", e.what());
    }
    f.origin_ = template_file;
    return f;
  }
  f.jinja_ = ChatTemplate::from_dir(model_dir);
  if (f.jinja_) {
    f.origin_ = "the checkpoint's chat template";
    return f;
  }
  const std::string config = tokenizer::join_path(model_dir, "config.json");
  if (tokenizer::file_exists(config)) {
    const nlohmann::json c = tokenizer::read_json_file(config);
    if (c.contains("architectures") && c["architectures"].is_array() && !c["architectures"].empty() &&
        c["architectures"][0].is_string()) {
      f.deepseek_ = deepseek_version_of_architecture(c["architectures"][0].get<std::string>());
      if (f.deepseek_) f.origin_ = std::string("DeepSeek's ") + deepseek_version_name(*f.deepseek_) + " encoder";
    }
  }
  return f;
}

namespace {
ChatOutputParser::Options::Json json_syntax_of(const std::string& source) {
  if (source.find("<tool_call>") != std::string::npos) return ChatOutputParser::Options::Json::kQwen;
  if (source.find("<｜tool▁calls▁begin｜>") != std::string::npos) return ChatOutputParser::Options::Json::kDeepseekV3;
  if (source.find("\"parameters\"") != std::string::npos && source.find("<|eot_id|>") != std::string::npos)
    return ChatOutputParser::Options::Json::kLlama;
  return ChatOutputParser::Options::Json::kNone;
}
}  // namespace

ChatOutputParser::Options ChatFormat::output_options(const std::string& prompt, bool tools) const {
  ChatOutputParser::Options o;
  if (deepseek_) {
    o.starts_in_reasoning = prompt.ends_with("<think>");
    if (tools) o.dsml = deepseek_;
  } else if (jinja_) {
    o.think_tag = jinja_->source().find("<think>") != std::string::npos;
    if (tools) o.json = json_syntax_of(jinja_->source());
  }
  return o;
}

bool ChatFormat::reads_tool_calls() const {
  return deepseek_.has_value() || (jinja_ && json_syntax_of(jinja_->source()) != ChatOutputParser::Options::Json::kNone);
}

std::optional<ChatFormat::ToolGrammar> ChatFormat::tool_grammar(const nlohmann::ordered_json& tools, bool parallel,
                                                                 bool forced, const std::string& prompt) const {
  nlohmann::ordered_json list = nlohmann::ordered_json::array();
  for (const auto& t : tools)
    list.push_back({{"name", t["function"]["name"]}, {"parameters", t["function"].value("parameters", nlohmann::ordered_json::object())}});
  if (deepseek_) {
    const DsmlTags t = dsml_tags(*deepseek_);
    const nlohmann::ordered_json spec = {
        {"calls_open", "\n\n" + t.calls_open}, {"calls_close", t.calls_close}, {"invoke_open", t.invoke_open},
        {"invoke_close", t.invoke_close}, {"param_open", t.param_open}, {"param_close", t.param_close},
        {"tools", list}, {"parallel", parallel}, {"after_trigger", !forced}};
    return ToolGrammar{spec.dump(), forced ? (prompt.ends_with("<think>") ? "</think>" : "") : t.calls_start};
  }
  if (!jinja_) return std::nullopt;
  nlohmann::ordered_json spec = {{"layout", "json"}, {"tools", list}, {"parallel", parallel}};
  std::string marker;  // what opens a block under "auto"
  switch (json_syntax_of(jinja_->source())) {
    case ChatOutputParser::Options::Json::kQwen:
      spec.update({{"block_open", ""}, {"block_close", ""}, {"call_open", "<tool_call>\n{\"name\": \""},
                   {"call_mid", "\", \"arguments\": "}, {"call_close", "}\n</tool_call>"}, {"separator", "\n"}});
      marker = "<tool_call>";
      break;
    case ChatOutputParser::Options::Json::kDeepseekV3:
      spec.update({{"block_open", "<｜tool▁calls▁begin｜>"}, {"block_close", "<｜tool▁calls▁end｜>"},
                   {"call_open", "<｜tool▁call▁begin｜>function<｜tool▁sep｜>"}, {"call_mid", "\n```json\n"},
                   {"call_close", "\n```<｜tool▁call▁end｜>"}, {"separator", "\n"}});
      marker = "<｜tool▁calls▁begin｜>";
      break;
    case ChatOutputParser::Options::Json::kLlama:
      if (!forced) return std::nullopt;  // an unmarked JSON answer: nothing opens a block
      spec.update({{"block_open", ""}, {"block_close", ""}, {"call_open", "{\"name\": \""},
                   {"call_mid", "\", \"parameters\": "}, {"call_close", "}"}, {"separator", ""}, {"parallel", false}});
      break;
    case ChatOutputParser::Options::Json::kNone:
      return std::nullopt;
  }
  spec["trigger"] = forced ? "" : marker;
  return ToolGrammar{spec.dump(), forced ? "" : marker};
}

std::optional<DeepseekVersion> deepseek_version_of_architecture(const std::string& arch) {
  if (arch == "DeepseekV4ForCausalLM") return DeepseekVersion::kV4;
  if (arch == "DeepseekV41ForCausalLM" || arch == "DeepseekV41ForConditionalGeneration") return DeepseekVersion::kV41;
  return std::nullopt;
}

std::string ChatFormat::render(const nlohmann::ordered_json& messages, const ChatOptions& options,
                               bool* reasoning) const {
  if (reasoning) *reasoning = false;
  if (jinja_) return jinja_->render(messages, options);
  if (!deepseek_) fail("this model has no chat template (give one with --chat-template FILE)");
  if (!messages.is_array()) fail("messages must be a list");
  nlohmann::ordered_json kwargs = nlohmann::ordered_json::object();
  std::optional<bool> thinking;
  if (!options.kwargs.is_null() && !options.kwargs.is_object()) fail("chat_template_kwargs must be an object");
  for (auto it = options.kwargs.begin(); options.kwargs.is_object() && it != options.kwargs.end(); ++it) {
    if (it.key() == "thinking" || it.key() == "enable_thinking") {
      if (!it.value().is_boolean()) fail("chat_template_kwargs.", it.key(), " must be true or false");
      if (thinking && *thinking != it.value().get<bool>())
        fail("chat_template_kwargs.thinking and enable_thinking differ; give one");
      thinking = it.value().get<bool>();
    } else {
      kwargs[it.key()] = it.value();
    }
  }
  if (thinking) {
    const std::string mode = *thinking ? "thinking" : "chat";
    if (kwargs.contains("thinking_mode") && kwargs["thinking_mode"] != mode)
      fail("chat_template_kwargs.thinking and thinking_mode disagree; give one");
    kwargs["thinking_mode"] = mode;
  }
  DeepseekEncodeOptions o;
  try {
    o = deepseek_options_from_kwargs(kwargs);
  } catch (const Error& e) {
    std::string m = e.what();
    if (m.starts_with("kwargs")) m = "chat_template_kwargs" + m.substr(6);
    throw Error(m);
  }
  nlohmann::ordered_json msgs = messages;
  if (!options.tools.is_null() && !(options.tools.is_array() && options.tools.empty())) {
    if (!msgs.empty() && msgs[0].is_object() && msgs[0].value("role", "") == "system") {
      if (msgs[0].contains("tools") && !msgs[0]["tools"].is_null())
        fail("tools are given twice: in the request and on messages[0]");
      msgs[0]["tools"] = options.tools;
    } else {
      msgs.insert(msgs.begin(), nlohmann::ordered_json{{"role", "system"}, {"content", ""}, {"tools", options.tools}});
    }
  }
  if (!options.add_generation_prompt && !(msgs.size() && msgs.back().is_object() &&
                                          msgs.back().value("role", "") == "assistant"))
    fail("add_generation_prompt: false is not possible with ", deepseek_version_name(*deepseek_),
         "'s encoder (it ends every user turn with the assistant header)");
  const std::string prompt = encode_deepseek_messages(*deepseek_, msgs, o);
  if (reasoning) *reasoning = prompt.ends_with("<think>");
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

}  // namespace gannet::chat
