// Fuzz target: OpenAI request bodies (/v1/completions when the first byte is even,
// /v1/chat/completions when odd) are parsed or refused with an ApiError naming the
// problem, never a crash; a chat request that parses is rendered with the DeepSeek V3 chat
// template and the built-in DeepSeek-V4 format, which render it or refuse it with
// gannet::Error.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string>

#include "core/error.h"
#include "server/openai_request.h"
#include "tokenizer/chat_template.h"

namespace {

const gannet::tokenizer::ChatTemplate* deepseek_v3() {
  static const auto* t = [] {
    const char* src = std::getenv("GANNET_SOURCE_DIR");
    const std::string dir = std::string(src ? src : GANNET_FUZZ_SOURCE_DIR) + "/assets/tokenizers/deepseek-v3";
    auto found = gannet::tokenizer::ChatTemplate::from_dir(dir);
    if (!found) __builtin_trap();
    return new gannet::tokenizer::ChatTemplate(*found);
  }();
  return t;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size == 0) return 0;
  const bool chat = data[0] & 1;
  nlohmann::ordered_json body;
  try {
    body = nlohmann::ordered_json::parse(std::string(reinterpret_cast<const char*>(data) + 1, size - 1));
  } catch (const nlohmann::ordered_json::exception&) {
    return 0;  // the server answers 400 "malformed JSON" before parsing fields
  }
  try {
    if (!chat) {
      const auto r = gannet::server::parse_completion(body, "m");
      if (r.prompts.empty()) __builtin_trap();
      return 0;
    }
    const auto r = gannet::server::parse_chat(body, "m");
    if (!r.messages.is_array() || r.messages.empty()) __builtin_trap();
    try {
      (void)deepseek_v3()->render(r.messages, r.chat);
    } catch (const gannet::Error&) {
    }
    try {
      (void)gannet::tokenizer::render_deepseek_v4_chat(r.messages, r.chat);
    } catch (const gannet::Error&) {
    }
  } catch (const gannet::server::ApiError& e) {
    if (e.status < 400 || e.status >= 500 || e.message.empty()) __builtin_trap();
  }
  return 0;
}
