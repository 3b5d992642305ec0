// Fuzz target: OpenAI request bodies (/v1/completions when the first byte is even,
// /v1/chat/completions when odd) are parsed or refused with an ApiError naming the
// problem, never a crash; a chat request that parses is rendered with the DeepSeek V3 chat
// template and DeepSeek's V4 and V4.1 encoders, which render it or refuse it with
// gannet::Error.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string>

#include "core/error.h"
#include "server/openai_request.h"
#include "chat/chat_template.h"
#include "chat/deepseek_v4_encoding.h"

namespace {

const gannet::chat::ChatTemplate* deepseek_v3() {
  static const auto* t = [] {
    const char* src = std::getenv("GANNET_SOURCE_DIR");
    const std::string dir = std::string(src ? src : GANNET_FUZZ_SOURCE_DIR) + "/assets/tokenizers/deepseek-v3";
    auto found = gannet::chat::ChatTemplate::from_dir(dir);
    if (!found) __builtin_trap();
    return new gannet::chat::ChatTemplate(*found);
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
    for (const auto v : {gannet::chat::DeepseekVersion::kV4, gannet::chat::DeepseekVersion::kV41}) {
      try {
        (void)gannet::chat::encode_deepseek_messages(v, r.messages, gannet::chat::DeepseekEncodeOptions{});
      } catch (const gannet::Error&) {
      }
    }
  } catch (const gannet::server::ApiError& e) {
    if (e.status < 400 || e.status >= 500 || e.message.empty()) __builtin_trap();
  }
  return 0;
}
