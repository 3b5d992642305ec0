// DeepSeek-V4 / V4.1 completions -> content, reasoning and tool calls, read the way
// DeepSeek's parse_message_from_completion_text reads them (deepseek_v4_encoding.h).
#include <string_view>

#include "chat/deepseek_v4_encoding.h"
#include "chat/python_json.h"
#include "core/error.h"

namespace gannet::chat {

namespace {

constexpr std::string_view kOutBos = "<｜begin▁of▁sentence｜>";
constexpr std::string_view kOutEos = "<｜end▁of▁sentence｜>";
constexpr std::string_view kOutThinkStart = "<think>";
constexpr std::string_view kOutThinkEnd = "</think>";
constexpr std::string_view kOutDsml = "｜DSML｜";

struct Stop {
  size_t next;             // index after the stop string (or text size)
  std::string_view text;   // what came before it
  int which;               // index into the stop list, -1 for none
};

// The earliest of `stops` at or after `from` (the first listed wins a tie).
Stop read_until(std::string_view text, size_t from, std::initializer_list<std::string_view> stops) {
  size_t best = std::string_view::npos;
  int which = -1, k = 0;
  for (std::string_view s : stops) {
    const size_t p = text.find(s, from);
    if (p != std::string_view::npos && (best == std::string_view::npos || p < best)) best = p, which = k;
    ++k;
  }
  if (which < 0) return {text.size(), text.substr(from), -1};
  return {best + std::data(stops)[which].size(), text.substr(from, best - from), which};
}

bool is_space(char c) { return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\f' || c == '\v'; }

// `^\s*name="(.*?)">\n$` (DOTALL): the name up to the first '">\n' that ends the text
// (or is followed by one final newline, where '$' also matches).
bool invoke_name(std::string_view s, std::string& name) {
  size_t i = 0;
  while (i < s.size() && is_space(s[i])) ++i;
  // \s* is greedy but may give back: the pattern needs 'name="' right after it.
  for (size_t start = i;; --start) {
    if (s.substr(start).starts_with("name=\"")) {
      const size_t from = start + 6;
      for (size_t p = from; p + 3 <= s.size(); ++p) {
        if (s.compare(p, 3, "\">\n") != 0) continue;
        if (p + 3 == s.size() || (p + 4 == s.size() && s[p + 3] == '\n')) {
          name = std::string(s.substr(from, p - from));
          return true;
        }
      }
    }
    if (start == 0 || !is_space(s[start - 1])) break;
  }
  return false;
}

// `^ name="(.*?)" string="(true|false)">(.*?)<$` (DOTALL).
bool parameter(std::string_view s, std::string& key, bool& is_string, std::string& value) {
  if (!s.starts_with(" name=\"")) return false;
  size_t end = std::string_view::npos;  // where the final '<' is
  if (s.ends_with("<")) end = s.size() - 1;
  else if (s.ends_with("<\n")) end = s.size() - 2;
  if (end == std::string_view::npos) return false;
  for (size_t p = 7; p < s.size(); ++p) {
    for (const bool str : {true, false}) {
      const std::string_view flag = str ? "\" string=\"true\">" : "\" string=\"false\">";
      if (s.compare(p, flag.size(), flag) != 0) continue;
      const size_t vstart = p + flag.size();
      if (vstart > end) continue;
      key = std::string(s.substr(7, p - 7));
      is_string = str;
      value = std::string(s.substr(vstart, end - vstart));
      return true;
    }
  }
  return false;
}

std::string clip(std::string_view s) {
  return s.size() <= 80 ? std::string(s) : std::string(s.substr(0, 77)) + "...";
}

}  // namespace

DsmlTags dsml_tags(DeepseekVersion v) {
  const std::string d(kOutDsml);
  const std::string block = v == DeepseekVersion::kV41 ? " calls" : "tool_calls";
  const std::string invoke = v == DeepseekVersion::kV41 ? " invoke" : "invoke";
  const std::string param = v == DeepseekVersion::kV41 ? " parameter" : "parameter";
  return {"\n\n<" + d + block, "<" + d + block + ">", "</" + d + block + ">", "<" + d + invoke,
          "</" + d + invoke + ">", "<" + d + param, "</" + d + param + ">"};
}

ParsedCompletion parse_deepseek_completion(DeepseekVersion v, const std::string& text_in, bool thinking) {
  const std::string_view text = text_in;
  const DsmlTags t = dsml_tags(v);
  const std::string calls_end = t.calls_close;
  const std::string invoke_start = t.invoke_open;
  const std::string invoke_end = t.invoke_close.substr(0, t.invoke_close.size() - 1);  // no '>'
  const std::string param_start = t.param_open;
  const std::string param_end = t.param_close.substr(1, t.param_close.size() - 2);     // "/…parameter"

  ParsedCompletion out;
  size_t index = 0;
  if (thinking) {
    const Stop s = read_until(text, index, {kOutThinkEnd, t.calls_start});
    if (s.which != 0) fail("the completion has no </think> before its answer (reasoning must end first)");
    out.reasoning_content = std::string(s.text);
    index = s.next;
  }
  Stop s = read_until(text, index, {kOutEos, t.calls_start});
  out.content = std::string(s.text);
  index = s.next;
  int last_stop = s.which == 0 ? 0 : -1;  // 0: EOS, -1: none
  if (s.which == 1) {
    // The tool-call block.
    while (index < text.size()) {
      const Stop a = read_until(text, index, {invoke_start, calls_end});
      if (a.text != ">\n") fail("tool call format error: expected '>\\n' but got '", clip(a.text), "'");
      index = a.next;
      if (a.which == 1) break;
      if (a.which < 0) fail("tool call format error: the block ends without ", calls_end);
      Stop n = read_until(text, index, {param_start, invoke_end});
      index = n.next;
      ParsedToolCall call;
      if (!invoke_name(n.text, call.name)) fail("tool name format error: '", clip(n.text), "'");
      std::string args = "{";
      std::vector<std::string> keys;
      while (n.which == 0) {
        const Stop p = read_until(text, index, {param_end});
        index = p.next;
        std::string key, value;
        bool is_string = false;
        if (!parameter(p.text, key, is_string, value)) fail("parameter format error: '", clip(p.text), "'");
        for (const std::string& k : keys)
          if (k == key) fail("duplicate parameter name '", key, "' in the call of '", call.name, "'");
        keys.push_back(key);
        if (keys.size() > 1) args += ", ";
        args += python_json_string(key) + ": ";
        if (is_string) {
          args += python_json_string(value);
        } else if (!nlohmann::json::accept(value)) {
          args += python_json_string(value);  // not JSON: kept as the text the model wrote
          call.value_was_invalid_json = true;
        } else {
          args += value;
        }
        n = read_until(text, index, {param_start, invoke_end});
        if (n.text != ">\n") fail("parameter format error: expected '>\\n' but got '", clip(n.text), "'");
        index = n.next;
      }
      call.arguments = args + "}";
      out.tool_calls.push_back(std::move(call));
    }
    const Stop e = read_until(text, index, {kOutEos});
    if (!e.text.empty()) fail("unexpected text after the tool calls: '", clip(e.text), "'");
    index = e.next;
    last_stop = e.which;
  } else if (s.which != 0) {
    fail("the completion does not end with ", kOutEos);
  }
  if (index != text.size() || (last_stop != 0 && last_stop != -1)) fail("unexpected text after the end of the answer");
  for (std::string_view sp : {kOutBos, kOutEos, kOutThinkStart, kOutThinkEnd, kOutDsml}) {
    if (out.content.find(sp) != std::string::npos || out.reasoning_content.find(sp) != std::string::npos)
      fail("unexpected special token '", sp, "' in the ", out.content.find(sp) != std::string::npos ? "content" : "reasoning");
  }
  return out;
}

}  // namespace gannet::chat
