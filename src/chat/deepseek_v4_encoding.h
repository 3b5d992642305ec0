// DeepSeek-V4 and V4.1 conversations -> prompt text, and completions -> messages, by the
// rules of DeepSeek's own encoders (encoding_dsv4.py for V4, encoding.py for V4.1; the
// rules are written up in docs/deepseek-v4-chat-encoding.md of the team's shared docs and
// tested against renderings of the official code, tests/data/deepseek_v4_chat/).
//
// Differences between the two versions: V4.1 writes <｜System｜> before system text (and
// before the reasoning-effort line), counts a later system message as a user turn, puts a
// space inside every DSML tag (<｜DSML｜ calls>), takes a numeric effort 1-100 and refuses
// the developer role; V4 writes system text bare and takes effort high/max only.
//
// Whatever DeepSeek's encoder refuses is refused here with a gannet::Error naming the
// message (messages[i] or context[i]) and the field.
#pragma once

#include <string>
#include <vector>

#include <nlohmann/json.hpp>

namespace gannet::chat {

enum class DeepseekVersion { kV4, kV41 };

const char* deepseek_version_name(DeepseekVersion v);  // "DeepSeek-V4" / "DeepSeek-V4.1"

// The keyword arguments of DeepSeek's encode_messages.
struct DeepseekEncodeOptions {
  std::string thinking_mode = "chat";  // "chat" or "thinking" (anything else is refused)
  bool drop_thinking = true;
  bool add_default_bos_token = true;
  nlohmann::ordered_json reasoning_effort;  // null, an integer or a name; checked per version
  nlohmann::ordered_json context = nlohmann::ordered_json::array();  // messages already cached
};

// From a JSON object whose keys are encode_messages' keyword names, verbatim. An unknown
// key or a value of the wrong type is an error naming it.
DeepseekEncodeOptions deepseek_options_from_kwargs(const nlohmann::ordered_json& kwargs);

// The prompt for `messages` (OpenAI chat messages; tools on the system message, as the
// encoders read them). Throws gannet::Error for what the official encoder refuses.
std::string encode_deepseek_messages(DeepseekVersion v, const nlohmann::ordered_json& messages,
                                     const DeepseekEncodeOptions& options);

// The effort the V4.1 prompt states (1-100), or the V4 setting ("max", "high" or ""), for
// a request's reasoning_effort; throws gannet::Error naming the value when the version
// has no such setting.
std::string deepseek_effort_text(DeepseekVersion v, const nlohmann::ordered_json& effort);

// One tool call read back from DSML.
struct ParsedToolCall {
  std::string name;
  // The arguments as a JSON object text. Values with string="true" become JSON strings;
  // string="false" values are pasted as written when they are valid JSON (the official
  // parser's text, byte for byte) and become JSON strings when they are not (the official
  // parser would paste invalid JSON; gannet never returns invalid arguments).
  std::string arguments;
  bool value_was_invalid_json = false;  // some string="false" value was not JSON
};

struct ParsedCompletion {
  std::string content, reasoning_content;
  std::vector<ParsedToolCall> tool_calls;
};

// A completion (the text after the prompt's "<｜Assistant｜><think>" in thinking mode or
// "…</think>" in chat mode) read as DeepSeek's parse_message_from_completion_text reads
// it. Throws gannet::Error, saying what is malformed, where the official parser refuses.
ParsedCompletion parse_deepseek_completion(DeepseekVersion v, const std::string& text, bool thinking);

// The DSML strings of a version, for streaming parsers and grammars.
struct DsmlTags {
  std::string calls_start;   // "\n\n<｜DSML｜ calls" (the two newlines belong to the block)
  std::string calls_open;    // "<｜DSML｜ calls>"
  std::string calls_close;   // "</｜DSML｜ calls>"
  std::string invoke_open;   // "<｜DSML｜ invoke"
  std::string invoke_close;  // "</｜DSML｜ invoke>"
  std::string param_open;    // "<｜DSML｜ parameter"
  std::string param_close;   // "</｜DSML｜ parameter>"
};
DsmlTags dsml_tags(DeepseekVersion v);

}  // namespace gannet::chat
