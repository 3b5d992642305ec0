#include "chat/output_parser.h"

#include "chat/python_json.h"
#include "core/error.h"

namespace gannet::chat {

namespace {

constexpr std::string_view kEndOfThinking = "</think>";

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
  (phase_ == Phase::kTools ? block_ : held_) += piece;
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
        const size_t end = held_.find(kEndOfThinking);
        const size_t call = o_.dsml ? held_.find(start) : std::string::npos;
        if (end != std::string::npos && (call == std::string::npos || end < call)) {
          d.reasoning += held_.substr(0, end);
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
        const size_t keep = final ? 0 : o_.dsml ? held_tail(held_, {kEndOfThinking, start}) : held_tail(held_, {kEndOfThinking});
        d.reasoning += held_.substr(0, held_.size() - keep);
        held_.erase(0, held_.size() - keep);
        return;
      }
      case Phase::kContent: {
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
    }
  }
}

// Re-reads the block from its start (it is short) and sends what is newly complete: a
// call's id and name when its header is, a fragment when a parameter closes, the brace
// when the invoke does.
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
