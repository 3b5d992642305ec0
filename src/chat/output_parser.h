// A completion's text -> what a chat response carries: reasoning, content and tool calls,
// as deltas while the text streams in. The server feeds it every piece of a choice's text
// (and the whole text for a non-streamed response, so both return the same message):
//
//   - reasoning (when the prompt opened it) ends at the first "</think>" (dropped), or
//     where a tool-call block starts (the model skipped "</think>");
//   - content ends where a tool-call block starts; a tail that may be the start of
//     "</think>" or of the block is held back until the next piece decides it, so no
//     delta ever carries DSML bytes, however the pieces fall;
//   - each call of the block comes out as OpenAI's tool-call deltas: the id and name once
//     the invoke's header is complete, then one argument fragment per parameter as it
//     closes, then the closing brace; the fragments join to the arguments text of
//     ParsedToolCall (deepseek_v4_encoding.h);
//   - a block cut short (the text ends inside it, e.g. at max_tokens) keeps its complete
//     calls, closes an open one with the parameters it had and drops the unfinished tail;
//   - a block that breaks the DSML grammar stops there and malformed() says so: calls
//     already complete stay; a call whose name went out is closed with the parameters it
//     had and the rest of the text is dropped; otherwise the rest becomes content.
#pragma once

#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "chat/deepseek_v4_encoding.h"

namespace gannet::chat {

struct ToolCallDelta {
  size_t index = 0;
  std::string id, name;  // on the first delta of a call only
  std::string arguments;  // a fragment
};

struct ChatDelta {
  std::string reasoning, content;
  std::vector<ToolCallDelta> tool_calls;
  bool empty() const { return reasoning.empty() && content.empty() && tool_calls.empty(); }
};

class ChatOutputParser {
 public:
  struct Options {
    bool starts_in_reasoning = false;
    // A "<think>" at the very start opens reasoning (Qwen3), which ends at "</think>"; the
    // blank line after it is not content.
    bool think_tag = false;
    std::optional<DeepseekVersion> dsml;  // DSML tool calls (DeepSeek-V4 / V4.1)
    // JSON tool calls of the dense families: kQwen, "<tool_call>\n{"name", "arguments"}\n
    // </tool_call>" blocks after the content (the whitespace between is not content);
    // kLlama, an answer that is one {"name", "parameters"} object (after an optional
    // <|python_tag|>), read when the text ends; kDeepseekV3, "<｜tool▁calls▁begin｜>" then
    // calls "<｜tool▁call▁begin｜>" BODY "<｜tool▁call▁end｜>" (newlines between) and an
    // optional "<｜tool▁calls▁end｜>", BODY being V3's "function<｜tool▁sep｜>NAME\n```json\n
    // ARGS\n```" or V3.1's "NAME<｜tool▁sep｜>ARGS".
    enum class Json { kNone, kQwen, kLlama, kDeepseekV3 };
    Json json = Json::kNone;
    std::string id_prefix = "call_";      // call k gets id_prefix + k
  };
  explicit ChatOutputParser(Options o);

  ChatDelta feed(std::string_view piece);
  ChatDelta finish();  // flushes what is held back; the text has ended

  size_t tool_calls() const { return calls_.size(); }
  bool malformed() const { return malformed_; }
  bool in_reasoning() const { return phase_ == Phase::kReasoning; }

 private:
  // kRaw: after a broken block, text is content; kDrop: a call broke after its name went
  // out, and the rest of the text is dropped (the call stands for it).
  enum class Phase { kReasoning, kContent, kTools, kAfterTools, kRaw, kDrop, kQwenCalls, kLlamaCall, kV3Calls };
  struct Call {
    std::string name;
    size_t params = 0;  // fragments sent
    bool closed = false;
  };
  void step(ChatDelta& d, bool final);
  void scan_tools(ChatDelta& d, bool final);
  void scan_qwen(ChatDelta& d, bool final);
  void scan_v3(ChatDelta& d, bool final);
  bool add_json_call(ChatDelta& d, std::string_view body, const char* args_key);
  bool started_ = false;     // some text has been seen (think_tag, kLlama: what it starts with)
  bool after_think_ = false;  // a "<think>" opened reasoning: its newlines and the blank line after are skipped
  bool think_lead_done_ = false;

  Options o_;
  DsmlTags tags_;
  Phase phase_;
  std::string held_;   // reasoning / content not yet sent
  std::string block_;  // the tool-call block so far (from its "\n\n<｜DSML｜ calls")
  std::vector<Call> calls_;
  bool malformed_ = false;
};

}  // namespace gannet::chat
