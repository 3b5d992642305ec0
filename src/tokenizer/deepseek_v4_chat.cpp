// The built-in DeepSeek-V4 chat format (chat_template.h has the layout).
#include "core/error.h"
#include "tokenizer/chat_template.h"

namespace gannet::tokenizer {

namespace {

constexpr const char* kBos = "<｜begin▁of▁sentence｜>";
constexpr const char* kEos = "<｜end▁of▁sentence｜>";
constexpr const char* kUser = "<｜User｜>";
constexpr const char* kAssistant = "<｜Assistant｜>";

std::string text_of(const nlohmann::ordered_json& m, size_t index) {
  if (!m.contains("content") || m["content"].is_null()) return "";
  if (!m["content"].is_string()) fail("messages[", index, "].content must be a string for the DeepSeek-V4 format");
  return m["content"].get<std::string>();
}

bool thinking_of(const nlohmann::ordered_json& kwargs) {
  for (const char* k : {"thinking", "enable_thinking"}) {
    if (!kwargs.is_object() || !kwargs.contains(k)) continue;
    if (!kwargs[k].is_boolean()) fail("chat_template_kwargs.", k, " must be true or false");
    return kwargs[k].get<bool>();
  }
  return false;
}

}  // namespace

std::string render_deepseek_v4_chat(const nlohmann::ordered_json& messages, const ChatOptions& options) {
  if (!messages.is_array()) fail("messages must be a list");
  if (!options.tools.is_null()) fail("tools are not supported with the DeepSeek-V4 chat format");
  const bool thinking = thinking_of(options.kwargs);
  std::string out = kBos, system;
  for (size_t k = 0; k < messages.size(); ++k)
    if (messages[k].value("role", "") == "system") system += (system.empty() ? "" : "\n\n") + text_of(messages[k], k);
  out += system;
  bool in_tool_outputs = false;
  for (size_t k = 0; k < messages.size(); ++k) {
    const nlohmann::ordered_json& m = messages[k];
    const std::string role = m.value("role", "");
    if (role != "tool" && in_tool_outputs) out += "<｜tool▁outputs▁end｜>", in_tool_outputs = false;
    if (role == "system") continue;
    if (role == "user") {
      out += kUser + text_of(m, k);
    } else if (role == "assistant") {
      out += std::string(kAssistant) + "</think>" + text_of(m, k);
      if (m.contains("tool_calls") && !m["tool_calls"].is_null()) {
        if (!m["tool_calls"].is_array()) fail("messages[", k, "].tool_calls must be a list");
        out += "<｜tool▁calls▁begin｜>";
        for (const auto& c : m["tool_calls"]) {
          if (!c.is_object() || !c.contains("function") || !c["function"].is_object())
            fail("messages[", k, "].tool_calls entries need a function");
          const auto& f = c["function"];
          const std::string name = f.value("name", "");
          std::string args = "{}";
          if (f.contains("arguments")) args = f["arguments"].is_string() ? f["arguments"].get<std::string>() : f["arguments"].dump();
          out += "<｜tool▁call▁begin｜>" + name + "<｜tool▁sep｜>" + args + "<｜tool▁call▁end｜>";
        }
        out += "<｜tool▁calls▁end｜>";
      }
      out += kEos;
    } else if (role == "tool") {
      if (!in_tool_outputs) out += "<｜tool▁outputs▁begin｜>", in_tool_outputs = true;
      out += "<｜tool▁output▁begin｜>" + text_of(m, k) + "<｜tool▁output▁end｜>";
    } else {
      fail("messages[", k, "].role '", role, "' is not one of system, user, assistant, tool");
    }
  }
  if (in_tool_outputs) out += "<｜tool▁outputs▁end｜>";
  if (options.add_generation_prompt) out += std::string(kAssistant) + (thinking ? "<think>" : "</think>");
  return out;
}

}  // namespace gannet::tokenizer
