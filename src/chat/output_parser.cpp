#include "chat/output_parser.h"

#include <nlohmann/json.hpp>

#include "chat/python_json.h"
#include "core/error.h"

namespace gannet::chat {

namespace {

constexpr std::string_view kEndOfThinking = "</think>";
constexpr std::string_view kThinkOpen = "<think>";
constexpr std::string_view kQwenOpen = "<tool_call>", kQwenClose = "</tool_call>";
constexpr std::string_view kPythonTag = "<|python_tag|>";
constexpr std::string_view kV3Begin = "<｜tool▁calls▁begin｜>", kV3End = "<｜tool▁calls▁end｜>";
constexpr std::string_view kV3CallBegin = "<｜tool▁call▁begin｜>", kV3CallEnd = "<｜tool▁call▁end｜>";
constexpr std::string_view kV3Sep = "<｜tool▁sep｜>";


// The longest tail of `s` that is a proper prefix of one of `stops`.
size_t held_tail(std::string_view s, std::initializer_list<std::string_view> stops) {
  size_t keep = 0;
  for (std::string_view stop : stops)
    for (size_t n = std::min(s.size(), stop.size() - 1); n > keep; --n)
      if (s.compare(s.size() - n, n, stop.substr(0, n)) == 0) {
        keep = n;
        break;
      }
  return keep;
}

// Matching `s` at `pos` of `t`: 1 it is there, 0 the text ends inside it, -1 it is not.
int match_at(std::string_view t, size_t pos, std::string_view s) {
  if (t.size() - pos >= s.size()) return t.compare(pos, s.size(), s) == 0 ? 1 : -1;
  return s.starts_with(t.substr(pos)) ? 0 : -1;
}

}  // namespace

ChatOutputParser::ChatOutputParser(Options o)
    : o_(std::move(o)), tags_(dsml_tags(o_.dsml.value_or(DeepseekVersion::kV41))),
      phase_(o_.starts_in_reasoning ? Phase::kReasoning : Phase::kContent) {}

ChatDelta ChatOutputParser::feed(std::string_view piece) {
  ChatDelta d;
  (phase_ == Phase::kTools || phase_ == Phase::kQwenCalls || phase_ == Phase::kLlamaCall || phase_ == Phase::kV3Calls
       ? block_
       : held_) += piece;
  step(d, false);
  return d;
}

ChatDelta ChatOutputParser::finish() {
  ChatDelta d;
  step(d, true);
  return d;
}

void ChatOutputParser::step(ChatDelta& d, bool final) {
  const std::string_view start = tags_.calls_start;
  for (;;) {
    switch (phase_) {
      case Phase::kReasoning: {
        if (after_think_ && phase_ == Phase::kReasoning && !think_lead_done_) {
          // "<think>\nREASONING\n</think>" (Qwen3): the newlines inside the tags are not reasoning.
          const size_t lead = held_.find_first_not_of("\n");
          if (lead == std::string::npos && !final) return;
          held_.erase(0, lead == std::string::npos ? held_.size() : lead);
          think_lead_done_ = true;
        }
        const size_t end = held_.find(kEndOfThinking);
        const size_t call = o_.dsml ? held_.find(start) : std::string::npos;
        if (end != std::string::npos && (call == std::string::npos || end < call)) {
          size_t cut = end;
          if (after_think_)
            while (cut > 0 && held_[cut - 1] == '\n') --cut;
          d.reasoning += held_.substr(0, cut);
          held_.erase(0, end + kEndOfThinking.size());
          phase_ = Phase::kContent;
          continue;
        }
        if (call != std::string::npos) {  // a call block before "</think>": reasoning ends there
          d.reasoning += held_.substr(0, call);
          block_ = held_.substr(call);
          held_.clear();
          phase_ = Phase::kTools;
          continue;
        }
        size_t keep = final ? 0 : o_.dsml ? held_tail(held_, {kEndOfThinking, start}) : held_tail(held_, {kEndOfThinking});
        if (after_think_ && !final)  // newlines that may end the block
          while (keep < held_.size() && held_[held_.size() - keep - 1] == '\n') ++keep;
        d.reasoning += held_.substr(0, held_.size() - keep);
        held_.erase(0, held_.size() - keep);
        return;
      }
      case Phase::kContent: {
        if (!started_ && (o_.think_tag || o_.json == Options::Json::kLlama)) {
          // What the answer opens with decides: "<think>" (reasoning), a JSON call (Llama).
          const size_t lead = held_.find_first_not_of(" \t\r\n");
          if (lead == std::string::npos && !final) return;
          const std::string_view head = lead == std::string::npos ? std::string_view() : std::string_view(held_).substr(lead);
          const bool may_think = o_.think_tag && kThinkOpen.starts_with(head.substr(0, kThinkOpen.size()));
          const bool may_call = o_.json == Options::Json::kLlama &&
                                (head.starts_with("{") || kPythonTag.starts_with(head.substr(0, kPythonTag.size())));
          if (!final && (may_think && head.size() < kThinkOpen.size())) return;  // not decided yet
          if (!final && (may_call && !head.starts_with("{") && head.size() < kPythonTag.size())) return;
          started_ = true;
          if (o_.think_tag && head.starts_with(kThinkOpen)) {
            held_.erase(0, lead + kThinkOpen.size());
            phase_ = Phase::kReasoning;
            after_think_ = true;
            continue;
          }
          if (may_call && (head.starts_with("{") || head.starts_with(kPythonTag))) {
            block_ = held_;
            held_.clear();
            phase_ = Phase::kLlamaCall;
            continue;
          }
        }
        started_ = true;
        if (after_think_) {  // the blank line after "</think>" is not content
          const size_t lead = held_.find_first_not_of("\n");
          if (lead == std::string::npos && !final) return;
          held_.erase(0, lead == std::string::npos ? held_.size() : lead);
          after_think_ = false;
        }
        if (o_.json == Options::Json::kQwen) {
          const size_t call = held_.find(kQwenOpen);
          if (call != std::string::npos) {
            size_t end = call;
            while (end > 0 && std::string_view(" \t\r\n").find(held_[end - 1]) != std::string_view::npos) --end;
            d.content += held_.substr(0, end);
            block_ = held_.substr(call);
            held_.clear();
            phase_ = Phase::kQwenCalls;
            continue;
          }
          // Hold back what may start a call, with the whitespace before it.
          size_t keep = final ? 0 : held_tail(held_, {kQwenOpen});
          if (!final)
            while (keep < held_.size() &&
                   std::string_view(" \t\r\n").find(held_[held_.size() - keep - 1]) != std::string_view::npos)
              ++keep;
          d.content += held_.substr(0, held_.size() - keep);
          held_.erase(0, held_.size() - keep);
          return;
        }
        if (o_.json == Options::Json::kDeepseekV3) {
          const size_t call = held_.find(kV3Begin);
          if (call != std::string::npos) {
            d.content += held_.substr(0, call);
            block_ = held_.substr(call + kV3Begin.size());
            held_.clear();
            phase_ = Phase::kV3Calls;
            continue;
          }
          const size_t keep = final ? 0 : held_tail(held_, {kV3Begin});
          d.content += held_.substr(0, held_.size() - keep);
          held_.erase(0, held_.size() - keep);
          return;
        }
        const size_t call = o_.dsml ? held_.find(start) : std::string::npos;
        if (call != std::string::npos) {
          d.content += held_.substr(0, call);
          block_ = held_.substr(call);
          held_.clear();
          phase_ = Phase::kTools;
          continue;
        }
        const size_t keep = final || !o_.dsml ? 0 : held_tail(held_, {start});
        d.content += held_.substr(0, held_.size() - keep);
        held_.erase(0, held_.size() - keep);
        return;
      }
      case Phase::kTools:
        scan_tools(d, final);
        if (phase_ == Phase::kTools) return;
        continue;
      case Phase::kAfterTools:
        if (!held_.empty()) {  // text after the block: not DSML any more
          malformed_ = true;
          phase_ = Phase::kRaw;
          continue;
        }
        return;
      case Phase::kRaw:
        d.content += held_;
        held_.clear();
        return;
      case Phase::kDrop:
        held_.clear();
        return;
      case Phase::kQwenCalls:
        scan_qwen(d, final);
        if (phase_ == Phase::kQwenCalls) return;
        continue;
      case Phase::kV3Calls:
        scan_v3(d, final);
        if (phase_ == Phase::kV3Calls) return;
        continue;
      case Phase::kLlamaCall: {
        if (!final) return;  // one JSON object: read when the text ends
        std::string_view body = block_;
        const size_t lead = body.find_first_not_of(" \t\r\n");
        body.remove_prefix(lead == std::string_view::npos ? body.size() : lead);
        if (body.starts_with(kPythonTag)) body.remove_prefix(kPythonTag.size());
        if (!add_json_call(d, body, "parameters")) {
          held_ = block_;  // not a call: the answer as written
          phase_ = Phase::kRaw;
        } else {
          phase_ = Phase::kDrop;
        }
        block_.clear();
        continue;
      }
    }
  }
}

// Re-reads the block from its start (it is short) and sends what is newly complete: a
// call's id and name when its header is, a fragment when a parameter closes, the brace
// when the invoke does.
// One JSON call {"name": ..., args_key or "arguments": {...}}: sent whole (id and name,
// then the arguments). False, sending nothing, for text that is not such an object.
bool ChatOutputParser::add_json_call(ChatDelta& d, std::string_view body, const char* args_key) {
  const nlohmann::ordered_json j = nlohmann::ordered_json::parse(body, nullptr, false);
  if (j.is_discarded() || !j.is_object() || !j.contains("name") || !j["name"].is_string()) return false;
  const char* key = j.contains(args_key) ? args_key : "arguments";
  nlohmann::ordered_json args = j.contains(key) ? j[key] : nlohmann::ordered_json::object();
  if (args.is_string()) args = nlohmann::ordered_json::parse(args.get<std::string>(), nullptr, false);
  if (!args.is_object()) return false;
  const size_t k = calls_.size();
  calls_.push_back({j["name"].get<std::string>(), 0, true});
  d.tool_calls.push_back({k, o_.id_prefix + std::to_string(k), calls_[k].name, ""});
  d.tool_calls.push_back({k, "", "", python_json_dumps(args)});
  return true;
}

// "<tool_call>" JSON "</tool_call>" blocks, whitespace between; what follows the last one
// that is no block is content.
void ChatOutputParser::scan_qwen(ChatDelta& d, bool final) {
  for (;;) {
    const size_t lead = block_.find_first_not_of(" \t\r\n");
    if (lead == std::string::npos) {
      if (final) block_.clear(), phase_ = Phase::kDrop;
      return;
    }
    const std::string_view rest = std::string_view(block_).substr(lead);
    if (!rest.starts_with(kQwenOpen)) {
      if (!final && kQwenOpen.starts_with(rest)) return;  // may still open a call
      held_ = std::string(rest);  // text after the calls
      block_.clear();
      phase_ = Phase::kRaw;
      return;
    }
    const size_t close = rest.find(kQwenClose);
    if (close == std::string_view::npos) {
      if (!final) return;
      // Cut short inside a call: nothing of it comes out.
      block_.clear();
      phase_ = Phase::kDrop;
      return;
    }
    if (!add_json_call(d, rest.substr(kQwenOpen.size(), close - kQwenOpen.size()), "arguments")) {
      malformed_ = true;
      held_ = std::string(rest);
      block_.clear();
      phase_ = Phase::kRaw;
      return;
    }
    block_.erase(0, lead + close + kQwenClose.size());
  }
}

// DeepSeek V3 / V3.1 calls, after "<｜tool▁calls▁begin｜>" (block_ holds what follows it).
void ChatOutputParser::scan_v3(ChatDelta& d, bool final) {
  auto stop = [&](bool broken) {
    if (broken) {
      malformed_ = true;
      held_ = (calls_.empty() ? std::string(kV3Begin) : std::string()) + block_;  // the text as written
      phase_ = Phase::kRaw;
    } else {
      phase_ = Phase::kDrop;
    }
    block_.clear();
  };
  for (;;) {
    const size_t lead = block_.find_first_not_of('\n');
    const std::string_view rest = std::string_view(block_).substr(lead == std::string::npos ? block_.size() : lead);
    if (rest.starts_with(kV3End)) {  // the block's end: what follows is content
      held_ = std::string(rest.substr(kV3End.size()));
      block_.clear();
      phase_ = Phase::kRaw;
      return;
    }
    if (!rest.starts_with(kV3CallBegin)) {
      if (!final && (kV3CallBegin.starts_with(rest) || kV3End.starts_with(rest))) return;
      return stop(!rest.empty());
    }
    const size_t end = rest.find(kV3CallEnd);
    if (end == std::string_view::npos) {
      if (final) stop(false);  // cut short inside a call
      return;
    }
    std::string_view body = rest.substr(kV3CallBegin.size(), end - kV3CallBegin.size());
    const size_t sep = body.find(kV3Sep);
    if (sep == std::string_view::npos) return stop(true);
    std::string name, args;
    if (body.substr(0, sep) == "function") {  // V3: function<sep>NAME\n```json\nARGS\n```
      const std::string_view tail = body.substr(sep + kV3Sep.size());
      const size_t nl = tail.find("\n```json\n");
      if (nl == std::string_view::npos || !tail.ends_with("\n```")) return stop(true);
      name = std::string(tail.substr(0, nl));
      args = std::string(tail.substr(nl + 9, tail.size() - nl - 9 - 4));
    } else {  // V3.1: NAME<sep>ARGS
      name = std::string(body.substr(0, sep));
      args = std::string(body.substr(sep + kV3Sep.size()));
    }
    const nlohmann::ordered_json j = {{"name", name}, {"arguments", args}};
    if (name.empty() || !add_json_call(d, j.dump(), "arguments")) return stop(true);
    block_.erase(0, size_t(rest.data() - block_.data()) + end + kV3CallEnd.size());
  }
}

void ChatOutputParser::scan_tools(ChatDelta& d, bool final) {
  const std::string_view t = block_;
  const std::string invoke_end = tags_.invoke_close.substr(0, tags_.invoke_close.size() - 1);  // no '>'
  const std::string param_end = tags_.param_close.substr(1, tags_.param_close.size() - 2);     // "/…parameter"
  size_t pos = tags_.calls_start.size();
  size_t committed = 0;  // where the text after the last closed invoke starts
  size_t k = 0;          // invoke index
  auto broken = [&] {
    // What does not parse becomes content, from the first call not complete; a call
    // whose name went out is closed with the parameters it had (its text is dropped: the
    // call stands for it).
    malformed_ = true;
    if (k < calls_.size() && !calls_[k].closed) {
      d.tool_calls.push_back({k, "", "", calls_[k].params ? "}" : "{}"});
      calls_[k].closed = true;
      held_.clear();
      block_.clear();
      phase_ = Phase::kDrop;
      return;
    } else {
      held_ = block_.substr(committed);
      if (committed > 0 && held_.starts_with(">")) held_.erase(0, held_.starts_with(">\n") ? 2 : 1);  // ends the last invoke tag
    }
    block_.clear();
    phase_ = Phase::kRaw;
  };
  // The text ended inside the block (max_tokens): what was complete stands, an open call
  // is closed with the parameters it had, and the unfinished tail is dropped (it is not
  // malformed, only cut short).
  auto wait = [&] {
    if (!final) return;
    if (k < calls_.size() && !calls_[k].closed) {
      d.tool_calls.push_back({k, "", "", calls_[k].params ? "}" : "{}"});
      calls_[k].closed = true;
    }
    block_.clear();
    phase_ = Phase::kDrop;
  };
  for (;; ++k) {
    const int gt = match_at(t, pos, ">\n");
    if (gt <= 0) return gt < 0 ? broken() : wait();
    pos += 2;
    const int close = match_at(t, pos, tags_.calls_close);
    const int open = match_at(t, pos, tags_.invoke_open);
    if (close == 1) {
      pos += tags_.calls_close.size();
      held_ = block_.substr(pos);
      block_.clear();
      phase_ = Phase::kAfterTools;
      return;
    }
    if (open != 1) return (close == 0 || open == 0) ? wait() : broken();
    pos += tags_.invoke_open.size();
    // The header: up to the first parameter or the end of the invoke.
    const size_t p_at = t.find(tags_.param_open, pos), e_at = t.find(invoke_end, pos);
    if (p_at == std::string_view::npos && e_at == std::string_view::npos) return wait();
    const bool has_params = p_at != std::string_view::npos && (e_at == std::string_view::npos || p_at < e_at);
    const size_t h_end = has_params ? p_at : e_at;
    ParsedCompletion one;
    std::string name;
    {
      // The header must read  name="NAME">\n  (parse_deepseek_completion's rule).
      const std::string probe = tags_.calls_start + ">\n" + tags_.invoke_open + std::string(t.substr(pos, h_end - pos)) +
                                invoke_end + ">\n" + tags_.calls_close;
      try {
        one = parse_deepseek_completion(*o_.dsml, probe, false);
      } catch (const Error&) {
        return broken();
      }
      name = one.tool_calls.at(0).name;
    }
    if (k >= calls_.size()) {
      calls_.push_back({name, 0, false});
      d.tool_calls.push_back({k, o_.id_prefix + std::to_string(k), name, ""});
    }
    pos = h_end;
    std::vector<std::string> keys;
    if (has_params) {
      for (;;) {
        pos += tags_.param_open.size();
        const size_t v_end = t.find(param_end, pos);
        if (v_end == std::string_view::npos) return wait();
        // One parameter, read by the same rules as the whole-completion parser.
        const std::string probe = tags_.calls_start + ">\n" + tags_.invoke_open + " name=\"x\">\n" + tags_.param_open +
                                  std::string(t.substr(pos, v_end - pos)) + param_end + ">\n" + invoke_end + ">\n" +
                                  tags_.calls_close;
        try {
          one = parse_deepseek_completion(*o_.dsml, probe, false);
        } catch (const Error&) {
          return broken();
        }
        const std::string& args = one.tool_calls.at(0).arguments;  // {"key": value}
        const std::string item = args.substr(1, args.size() - 2);
        const std::string key = item.substr(0, item.find("\": ") + 1);
        for (const std::string& seen : keys)
          if (seen == key) return broken();  // a duplicate parameter
        keys.push_back(key);
        if (keys.size() > calls_[k].params) {
          d.tool_calls.push_back({k, "", "", (keys.size() == 1 ? "{" : ", ") + item});
          calls_[k].params = keys.size();
        }
        pos = v_end + param_end.size();
        const int g = match_at(t, pos, ">\n");
        if (g <= 0) return g < 0 ? broken() : wait();
        pos += 2;
        if (match_at(t, pos, tags_.param_open) == 1) continue;
        const int ie = match_at(t, pos, invoke_end);
        if (ie == 1) break;
        return (ie == 0 || match_at(t, pos, tags_.param_open) == 0) ? wait() : broken();
      }
    }
    pos += invoke_end.size();
    if (!calls_[k].closed) {
      d.tool_calls.push_back({k, "", "", keys.empty() ? "{}" : "}"});
      calls_[k].closed = true;
    }
    committed = pos;
  }
}

}  // namespace gannet::chat
