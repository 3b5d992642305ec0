// DeepSeek-V4 / V4.1 prompt encoding (deepseek_v4_encoding.h). The steps follow DeepSeek's
// encode_messages: image blocks to placeholders (V4.1), tool messages merged into user
// turns, tool results ordered by the calls they answer, earlier reasoning dropped, then
// each message rendered with the turn header that follows it.
#include "chat/deepseek_v4_encoding.h"

#include <algorithm>
#include <map>

#include "chat/python_json.h"
#include "core/error.h"

namespace gannet::chat {

using ojson = nlohmann::ordered_json;

namespace {

constexpr const char* kBos = "<｜begin▁of▁sentence｜>";
constexpr const char* kEos = "<｜end▁of▁sentence｜>";
constexpr const char* kThinkStart = "<think>";
constexpr const char* kThinkEnd = "</think>";
constexpr const char* kDsml = "｜DSML｜";
constexpr const char* kUser = "<｜User｜>";
constexpr const char* kAssistant = "<｜Assistant｜>";
constexpr const char* kLatestReminder = "<｜latest_reminder｜>";
constexpr const char* kSystem = "<｜System｜>";          // V4.1
constexpr const char* kImage = "<｜deepseek_image｜>";   // V4.1

const std::map<std::string, std::string>& task_tokens() {
  static const std::map<std::string, std::string> t = {
      {"action", "<｜action｜>"}, {"query", "<｜query｜>"}, {"authority", "<｜authority｜>"},
      {"domain", "<｜domain｜>"}, {"title", "<｜title｜>"}, {"read_url", "<｜read_url｜>"}};
  return t;
}

constexpr const char* kEffortMaxV4 =
    "Reasoning Effort: Absolute maximum with no shortcuts permitted.\n"
    "You MUST be very thorough in your thinking and comprehensively decompose the problem to resolve the root "
    "cause, rigorously stress-testing your logic against all potential paths, edge cases, and adversarial "
    "scenarios.\n"
    "Explicitly write out your entire deliberation process, documenting every intermediate step, considered "
    "alternative, and rejected hypothesis to ensure absolutely no assumption is left unchecked.\n\n";

struct Tags {
  std::string block, invoke, param;
};
Tags tags_of(DeepseekVersion v) {
  if (v == DeepseekVersion::kV41) return {" calls", " invoke", " parameter"};
  return {"tool_calls", "invoke", "parameter"};
}

// A message and where it came from, for error messages.
struct Msg {
  ojson m;
  std::string where;  // "messages[3]" or "context[1]"
};
using Msgs = std::vector<Msg>;

const ojson* get(const ojson& m, const char* key) {
  if (!m.is_object()) return nullptr;
  auto it = m.find(key);
  return it == m.end() ? nullptr : &*it;
}
bool present(const ojson& m, const char* key) {  // Python: m.get(key) is not None
  const ojson* v = get(m, key);
  return v && !v->is_null();
}
bool truthy(const ojson& m, const char* key) {
  const ojson* v = get(m, key);
  return v && python_truthy(*v);
}
std::string role_of(const ojson& m) {
  const ojson* r = get(m, "role");
  return r && r->is_string() ? r->get<std::string>() : std::string();
}
// `content or ""`: absent, null or empty give "", text gives itself, anything else is refused.
std::string text_or_empty(const Msg& msg, const char* key) {
  const ojson* v = get(msg.m, key);
  if (!v || v->is_null()) return "";
  if (!v->is_string()) fail(msg.where, ".", key, " must be a string");
  return v->get<std::string>();
}
// Python's str() of a block type, for "[Unsupported {type}]".
std::string py_str(const ojson* v) {
  if (!v || v->is_null()) return "None";
  if (v->is_string()) return v->get<std::string>();
  return python_json_dumps(*v);
}

// ---- step 1 (V4.1): content lists become blocks, images become placeholders ----

void process_image_blocks(ojson& blocks, const std::string& where) {
  for (size_t i = 0; i < blocks.size(); ++i) {
    ojson& b = blocks[i];
    if (!b.is_object()) continue;
    const std::string type = b.contains("type") && b["type"].is_string() ? b["type"].get<std::string>() : "";
    if (type == "image" || type == "image_url") {
      bool has_source = false;
      if (type == "image_url") {
        const ojson* u = get(b, "image_url");
        if (u && u->is_string()) has_source = !u->get<std::string>().empty();
        else if (u && u->is_object()) has_source = truthy(*u, "url");
      } else {
        has_source = truthy(b, "source") || truthy(b, "url") || truthy(b, "data");
      }
      if (!has_source) fail(where, ".content[", i, "]: the image block has no source (url, source or data)");
      b = ojson{{"type", "text"}, {"text", kImage}};
    } else if (type == "tool_result" && b.contains("content") && b["content"].is_array()) {
      process_image_blocks(b["content"], where + ".content[" + std::to_string(i) + "]");
    } else if (type == "text") {
      const ojson* t = get(b, "text");
      if (t && t->is_string() && t->get<std::string>().find(kImage) != std::string::npos)
        fail(where, ".content[", i, "].text contains the image token ", kImage,
             " (give images as image content parts)");
    }
  }
}

void process_images(Msgs& msgs) {
  for (Msg& msg : msgs) {
    ojson& m = msg.m;
    for (const char* k : {"content", "reasoning_content"}) {
      const ojson* v = get(m, k);
      if (v && v->is_string() && v->get<std::string>().find(kImage) != std::string::npos)
        fail(msg.where, ".", k, " contains the image token ", kImage, " (give images as image content parts)");
    }
    if (m.is_object() && m.contains("content") && m["content"].is_array() && !m.contains("content_blocks")) {
      m["content_blocks"] = m["content"];
      m.erase("content");
    }
    if (truthy(m, "content_blocks")) {
      if (!m["content_blocks"].is_array()) fail(msg.where, ".content_blocks must be a list");
      process_image_blocks(m["content_blocks"], msg.where);
      if (!(m.contains("content") && m["content"].is_string())) {
        std::string joined;
        bool first = true;
        for (const ojson& b : m["content_blocks"]) {
          if (!b.is_object() || !b.contains("type") || b["type"] != "text") continue;
          const ojson* t = get(b, "text");
          if (t && !t->is_null() && !t->is_string()) fail(msg.where, ".content: a text part's text must be a string");
          joined += (first ? "" : "\n\n") + (t && t->is_string() ? t->get<std::string>() : std::string());
          first = false;
        }
        m["content"] = joined;
      }
    }
  }
}

// ---- step 2: tool messages and consecutive user messages become one user turn ----

Msgs merge_tool_messages(const Msgs& in, DeepseekVersion v) {
  Msgs out;
  auto last_is_open_user = [&](bool need_no_task) {
    if (out.empty()) return false;
    const ojson& last = out.back().m;
    if (role_of(last) != "user" || !last.contains("content_blocks")) return false;
    return !need_no_task || !present(last, "task");
  };
  for (const Msg& msg : in) {
    const ojson& m = msg.m;
    const std::string role = role_of(m);
    if (role == "tool") {
      ojson block = {{"type", "tool_result"},
                     {"tool_use_id", m.contains("tool_call_id") ? m["tool_call_id"] : ojson("")},
                     {"content", m.contains("content") ? m["content"] : ojson("")}};
      if (last_is_open_user(false)) {
        out.back().m["content_blocks"].push_back(block);
      } else {
        out.push_back({ojson{{"role", "user"}, {"content_blocks", ojson::array({block})}}, msg.where});
      }
    } else if (role == "user") {
      ojson blocks;
      if (v == DeepseekVersion::kV41 && m.contains("content_blocks") && !m["content_blocks"].is_null()) {
        blocks = m["content_blocks"];
      } else {
        blocks = ojson::array({ojson{{"type", "text"}, {"text", m.contains("content") ? m["content"] : ojson("")}}});
      }
      if (last_is_open_user(true)) {
        for (const ojson& b : blocks) out.back().m["content_blocks"].push_back(b);
      } else if (v == DeepseekVersion::kV41) {
        ojson n = m;  // V4.1 keeps every field of the message
        n["content_blocks"] = blocks;
        out.push_back({n, msg.where});
      } else {
        ojson n = {{"role", "user"}, {"content", m.contains("content") ? m["content"] : ojson("")},
                   {"content_blocks", blocks}};
        for (const char* k : {"task", "wo_eos", "mask"})  // V4 keeps only these
          if (m.contains(k)) n[k] = m[k];
        out.push_back({n, msg.where});
      }
    } else {
      out.push_back(msg);
    }
  }
  return out;
}

// ---- step 3: results in the order of the calls of the assistant turn before them ----

void sort_tool_results(Msgs& msgs) {
  std::map<std::string, size_t> order;  // python_json_dumps(id) -> position
  for (Msg& msg : msgs) {
    ojson& m = msg.m;
    const std::string role = role_of(m);
    if (role == "assistant" && truthy(m, "tool_calls")) {
      order.clear();
      if (!m["tool_calls"].is_array()) fail(msg.where, ".tool_calls must be a list");
      for (size_t i = 0; i < m["tool_calls"].size(); ++i) {
        const ojson& tc = m["tool_calls"][i];
        if (!tc.is_object()) fail(msg.where, ".tool_calls[", i, "] must be an object");
        ojson id = truthy(tc, "id") ? tc["id"] : ojson("");
        if (!python_truthy(id) && tc.contains("function") && tc["function"].is_object() && tc["function"].contains("id"))
          id = tc["function"]["id"];
        if (python_truthy(id)) order[python_json_dumps(id)] = i;
      }
    } else if (role == "user" && truthy(m, "content_blocks")) {
      ojson& blocks = m["content_blocks"];
      std::vector<ojson> tools;
      for (const ojson& b : blocks)
        if (b.is_object() && b.contains("type") && b["type"] == "tool_result") tools.push_back(b);
      if (tools.size() <= 1 || order.empty()) continue;
      auto key = [&](const ojson& b) -> size_t {
        const ojson* id = get(b, "tool_use_id");
        if (!id) return 0;
        auto it = order.find(python_json_dumps(*id));
        return it == order.end() ? 0 : it->second;
      };
      std::stable_sort(tools.begin(), tools.end(), [&](const ojson& a, const ojson& b) { return key(a) < key(b); });
      size_t k = 0;
      for (ojson& b : blocks)
        if (b.is_object() && b.contains("type") && b["type"] == "tool_result") b = tools[k++];
    }
  }
}

// ---- steps 5-6: earlier reasoning dropped ----

ptrdiff_t last_user_index(const Msgs& msgs, DeepseekVersion v) {
  for (ptrdiff_t i = ptrdiff_t(msgs.size()) - 1; i >= 0; --i) {
    const std::string role = role_of(msgs[size_t(i)].m);
    if (role == "user") return i;
    if (v == DeepseekVersion::kV4 && role == "developer") return i;
    if (v == DeepseekVersion::kV41 && role == "system" && i > 0) return i;
  }
  return -1;
}

Msgs drop_thinking_messages(const Msgs& msgs, DeepseekVersion v) {
  const ptrdiff_t last = last_user_index(msgs, v);
  Msgs out;
  for (size_t i = 0; i < msgs.size(); ++i) {
    const std::string role = role_of(msgs[i].m);
    if (role == "user" || role == "system" || role == "tool" || role == "latest_reminder" ||
        role == "direct_search_results" || ptrdiff_t(i) >= last) {
      out.push_back(msgs[i]);
    } else if (role == "assistant") {
      Msg m = msgs[i];
      m.m.erase("reasoning_content");
      out.push_back(std::move(m));
    }  // other roles before the last user turn are dropped
  }
  return out;
}

// ---- rendering ----

std::string render_tools(const Msg& msg, DeepseekVersion v) {
  const ojson& tools = msg.m["tools"];
  if (!tools.is_array()) fail(msg.where, ".tools must be a list of tools");
  std::string schemas;
  for (size_t i = 0; i < tools.size(); ++i) {
    if (!tools[i].is_object() || !tools[i].contains("function"))
      fail(msg.where, ".tools[", i, "] needs a 'function' (OpenAI tool form {\"type\": \"function\", \"function\": {...}})");
    schemas += (i ? "\n" : "") + python_json_dumps(tools[i]["function"]);
  }
  const Tags t = tags_of(v);
  const std::string d = kDsml;
  std::string s;
  s += "## Tools\n\nYou have access to a set of tools to help answer the user's question. You can invoke tools by writing a \"<" +
       d + t.block + ">\" block like the following:\n\n";
  s += "<" + d + t.block + ">\n";
  s += "<" + d + t.invoke + " name=\"$TOOL_NAME\">\n";
  s += "<" + d + t.param + " name=\"$PARAMETER_NAME\" string=\"true|false\">$PARAMETER_VALUE</" + d + t.param + ">\n";
  s += "...\n</" + d + t.invoke + ">\n";
  s += "<" + d + t.invoke + " name=\"$TOOL_NAME2\">\n...\n</" + d + t.invoke + ">\n";
  s += "</" + d + t.block + ">\n\n";
  s += "String parameters should be specified as is and set `string=\"true\"`. For all other types (numbers, booleans, "
       "arrays, objects), pass the value in JSON format and set `string=\"false\"`.\n\n";
  s += std::string("If thinking_mode is enabled (triggered by ") + kThinkStart +
       "), you MUST output your complete reasoning inside " + kThinkStart + "..." + kThinkEnd +
       " BEFORE any tool calls or final response.\n\n";
  s += std::string("Otherwise, output directly after ") + kThinkEnd + " with tool calls or final response.\n\n";
  s += "### Available Tool Schemas\n\n" + schemas + "\n\n";
  s += "You MUST strictly follow the above defined tool name and parameter schemas to invoke tool calls.\n";
  return s;
}

std::string render_response_format(const Msg& msg) {
  return "\n\n## Response Format:\n\nYou MUST strictly adhere to the following schema to reply:\n" +
         python_json_dumps(msg.m["response_format"]);
}

// A call's arguments as the encoder reads them: an object of parameters.
ojson call_arguments(const ojson& raw, DeepseekVersion v, const std::string& where) {
  if (v == DeepseekVersion::kV4) {
    if (raw.is_string()) {
      ojson parsed = ojson::parse(raw.get<std::string>(), nullptr, false);
      if (parsed.is_discarded()) return ojson{{"arguments", raw}};
      if (!parsed.is_object())
        fail(where, ".function.arguments must encode a JSON object for DeepSeek-V4 (its encoder fails on ",
             parsed.type_name(), ")");
      return parsed;
    }
    return ojson{{"arguments", raw}};  // the V4 encoder json.loads the value; a dict lands here whole
  }
  ojson a = raw;
  for (int k = 0; k < 2 && !a.is_object(); ++k) {  // V4.1: JSON text, even double-encoded
    if (!a.is_string()) break;
    ojson parsed = ojson::parse(a.get<std::string>(), nullptr, false);
    if (parsed.is_discarded()) break;
    a = std::move(parsed);
  }
  if (!a.is_object()) return ojson{{"arguments", raw}};
  return a;
}

std::string render_tool_calls(const Msg& msg, DeepseekVersion v) {
  const ojson& calls = msg.m["tool_calls"];
  if (!calls.is_array()) fail(msg.where, ".tool_calls must be a list");
  const Tags t = tags_of(v);
  const std::string d = kDsml;
  std::string invokes;
  for (size_t i = 0; i < calls.size(); ++i) {
    const std::string where = msg.where + ".tool_calls[" + std::to_string(i) + "]";
    const ojson& tc = calls[i];
    if (!tc.is_object() || !tc.contains("function") || !tc["function"].is_object())
      fail(where, " needs a 'function' object");
    const ojson& fn = tc["function"];
    if (!fn.contains("name") || !fn["name"].is_string()) fail(where, ".function.name must be a string");
    if (!fn.contains("arguments")) fail(where, ".function.arguments is missing");
    const ojson args = call_arguments(fn["arguments"], v, where);
    std::string params;
    bool first = true;
    for (auto it = args.begin(); it != args.end(); ++it) {
      const bool is_str = it.value().is_string();
      params += (first ? "" : "\n");
      first = false;
      params += "<" + d + t.param + " name=\"" + it.key() + "\" string=\"" + (is_str ? "true" : "false") + "\">" +
                (is_str ? it.value().get<std::string>() : python_json_dumps(it.value())) + "</" + d + t.param + ">";
    }
    invokes += (i ? "\n" : "");
    invokes += "<" + d + t.invoke + " name=\"" + fn["name"].get<std::string>() + "\">\n" + params + "\n</" + d + t.invoke + ">";
  }
  return "\n\n<" + d + t.block + ">\n" + invokes + "\n</" + d + t.block + ">";
}

std::string render_user_blocks(const Msg& msg) {
  std::string out;
  bool first = true;
  const ojson& blocks = msg.m["content_blocks"];
  for (size_t i = 0; i < blocks.size(); ++i) {
    const ojson& b = blocks[i];
    const ojson* type = get(b, "type");
    std::string part;
    if (type && *type == "text") {
      const ojson* t = get(b, "text");
      if (!t) part = "";
      else if (t->is_string()) part = t->get<std::string>();
      else fail(msg.where, ".content must be a string (or a list of text parts)");
    } else if (type && *type == "tool_result") {
      const ojson* c = get(b, "content");
      if (!c) {
        part = "";
      } else if (c->is_string()) {
        part = c->get<std::string>();
      } else if (c->is_array()) {
        bool f2 = true;
        for (const ojson& x : *c) {
          const ojson* xt = get(x, "type");
          std::string piece;
          if (xt && *xt == "text") {
            const ojson* tt = get(x, "text");
            if (tt && !tt->is_string()) fail(msg.where, ".content: a tool result's text part must hold a string");
            piece = tt ? tt->get<std::string>() : "";
          } else {
            piece = "[Unsupported " + py_str(xt) + "]";
          }
          part += (f2 ? "" : "\n\n") + piece;
          f2 = false;
        }
      } else {
        fail(msg.where, ".content of a tool result must be a string or a list of text parts");
      }
      part = "<tool_result>" + part + "</tool_result>";
    } else {
      part = "[Unsupported " + py_str(type) + "]";
    }
    out += (first ? "" : "\n\n") + part;
    first = false;
  }
  return out;
}

std::string render_effort(DeepseekVersion v, size_t index, bool thinking, const ojson& effort) {
  const std::string text = deepseek_effort_text(v, effort);  // validates (every message, as the encoders do)
  if (index != 0 || !thinking) return "";
  if (v == DeepseekVersion::kV4) return text == "max" ? kEffortMaxV4 : "";
  return "Reasoning Effort: " + text + " (range 1-100, the higher the value, the more thorough the reasoning)\n\n";
}

std::string render_message(size_t index, const Msgs& msgs, DeepseekVersion v, const DeepseekEncodeOptions& o,
                           bool drop_thinking) {
  if (o.thinking_mode != "chat" && o.thinking_mode != "thinking")
    fail("thinking_mode must be \"chat\" or \"thinking\" (got \"", o.thinking_mode, "\")");
  const bool thinking = o.thinking_mode == "thinking";
  const Msg& msg = msgs[index];
  const ojson& m = msg.m;
  const ptrdiff_t last_user = last_user_index(msgs, v);
  const ojson* role_v = get(m, "role");
  if (!role_v || !role_v->is_string()) fail(msg.where, ".role must be a string");
  const std::string role = role_v->get<std::string>();

  const std::string effort = render_effort(v, index, thinking, o.reasoning_effort);
  std::string prompt;
  if (v == DeepseekVersion::kV41 && index == 0 && (!effort.empty() || role == "system")) prompt += kSystem;
  prompt += effort;

  if (role == "system") {
    if (v == DeepseekVersion::kV41 && index > 0) prompt += kSystem;
    prompt += text_or_empty(msg, "content");
    if (truthy(m, "tools")) prompt += "\n\n" + render_tools(msg, v);
    if (truthy(m, "response_format")) prompt += render_response_format(msg);
  } else if (role == "developer" && v == DeepseekVersion::kV4) {
    const std::string content = text_or_empty(msg, "content");
    if (content.empty()) fail(msg.where, ".content: a developer message needs content");
    prompt += kUser + content;
    if (truthy(m, "tools")) prompt += "\n\n" + render_tools(msg, v);
    if (truthy(m, "response_format")) prompt += render_response_format(msg);
  } else if (role == "user") {
    prompt += kUser;
    if (truthy(m, "content_blocks")) prompt += render_user_blocks(msg);
    else prompt += text_or_empty(msg, "content");
  } else if (role == "latest_reminder") {
    const ojson* c = get(m, "content");
    if (!c || !c->is_string()) fail(msg.where, ".content must be a string");
    prompt += kLatestReminder + c->get<std::string>();
  } else if (role == "assistant") {
    std::string tool_part;
    if (truthy(m, "tool_calls")) tool_part = render_tool_calls(msg, v);
    const std::string content = text_or_empty(msg, "content");
    const std::string reasoning = text_or_empty(msg, "reasoning_content");
    const bool prev_has_task = index > 0 && present(msgs[index - 1].m, "task");
    std::string thinking_part;
    if (thinking && !prev_has_task && (!drop_thinking || ptrdiff_t(index) > last_user))
      thinking_part = reasoning + kThinkEnd;
    prompt += thinking_part + content + tool_part;
    if (!truthy(m, "wo_eos")) prompt += kEos;
  } else if (role == "developer") {
    fail(msg.where, ".role: DeepSeek-V4.1 has no 'developer' role (its encoder refuses it; use 'system')");
  } else {
    fail(msg.where, ".role: unknown role '", role, "' (", deepseek_version_name(v), " takes system, ",
         v == DeepseekVersion::kV4 ? "developer, " : "", "user, assistant, tool and latest_reminder)");
  }

  // The turn header, when the next message is an assistant turn or there is none.
  if (index + 1 < msgs.size()) {
    const std::string next = role_of(msgs[index + 1].m);
    if (next != "assistant" && next != "latest_reminder") return prompt;
  }
  if (present(m, "task")) {
    const ojson& task = m["task"];
    auto it = task.is_string() ? task_tokens().find(task.get<std::string>()) : task_tokens().end();
    if (it == task_tokens().end())
      fail(msg.where, ".task ", python_json_dumps(task),
           " is not one of action, query, authority, domain, title, read_url");
    if (it->first != "action") {
      prompt += it->second;
    } else {
      prompt += kAssistant;
      prompt += thinking ? kThinkStart : kThinkEnd;
      prompt += it->second;
    }
  } else if (role == "user" || (v == DeepseekVersion::kV4 && role == "developer") ||
             (v == DeepseekVersion::kV41 && role == "system" && index > 0)) {
    prompt += kAssistant;
    if (thinking && (!drop_thinking || ptrdiff_t(index) >= last_user)) prompt += kThinkStart;
    else prompt += kThinkEnd;
  }
  return prompt;
}

Msgs wrap(const ojson& list, const char* name) {
  if (!list.is_array()) fail(name, " must be a list of messages");
  Msgs out;
  for (size_t i = 0; i < list.size(); ++i) {
    const std::string where = std::string(name) + "[" + std::to_string(i) + "]";
    if (!list[i].is_object()) fail(where, " must be an object");
    out.push_back({list[i], where});
  }
  return out;
}

Msgs preprocess(const ojson& list, const char* name, DeepseekVersion v) {
  Msgs msgs = wrap(list, name);
  if (v == DeepseekVersion::kV41) {
    process_images(msgs);
  } else {
    for (const Msg& m : msgs)
      if (m.m.contains("content") && !m.m["content"].is_string() && !m.m["content"].is_null() &&
          !(role_of(m.m) == "tool" && m.m["content"].is_array()))
        fail(m.where, ".content must be a string for DeepSeek-V4 (its encoder takes no content parts)");
  }
  return merge_tool_messages(msgs, v);
}

}  // namespace

const char* deepseek_version_name(DeepseekVersion v) {
  return v == DeepseekVersion::kV4 ? "DeepSeek-V4" : "DeepSeek-V4.1";
}

std::string deepseek_effort_text(DeepseekVersion v, const ojson& effort) {
  if (v == DeepseekVersion::kV4) {
    if (effort.is_null()) return "";
    if (effort == "high" || effort == "max") return effort.get<std::string>();
    fail("reasoning_effort ", python_json_dumps(effort), " is not a DeepSeek-V4 setting (it takes \"high\" or \"max\")");
  }
  if (effort.is_null()) return "75";
  if (effort.is_number_integer() || effort.is_number_unsigned()) {
    const bool in_range = effort.is_number_unsigned() ? effort.get<uint64_t>() >= 1 && effort.get<uint64_t>() <= 100
                                                      : effort.get<int64_t>() >= 1 && effort.get<int64_t>() <= 100;
    if (in_range) return std::to_string(effort.get<int64_t>());
  } else if (effort == "low") {
    return "50";
  } else if (effort == "high") {
    return "75";
  } else if (effort == "max") {
    return "100";
  }
  fail("reasoning_effort ", python_json_dumps(effort),
       " is not a DeepSeek-V4.1 setting (it takes an integer 1-100 or \"low\" (50), \"high\" (75), \"max\" (100))");
}

DeepseekEncodeOptions deepseek_options_from_kwargs(const ojson& kwargs) {
  DeepseekEncodeOptions o;
  if (kwargs.is_null()) return o;
  if (!kwargs.is_object()) fail("kwargs must be an object");
  for (auto it = kwargs.begin(); it != kwargs.end(); ++it) {
    const std::string& k = it.key();
    const ojson& v = it.value();
    if (k == "thinking_mode") {
      if (!v.is_string()) fail("kwargs.thinking_mode must be \"chat\" or \"thinking\"");
      o.thinking_mode = v.get<std::string>();
      if (o.thinking_mode != "chat" && o.thinking_mode != "thinking")
        fail("kwargs.thinking_mode must be \"chat\" or \"thinking\" (got \"", o.thinking_mode, "\")");
    } else if (k == "drop_thinking" || k == "add_default_bos_token") {
      if (!v.is_boolean()) fail("kwargs.", k, " must be true or false");
      (k == "drop_thinking" ? o.drop_thinking : o.add_default_bos_token) = v.get<bool>();
    } else if (k == "reasoning_effort") {
      o.reasoning_effort = v;
    } else if (k == "context") {
      if (!v.is_null() && !v.is_array()) fail("kwargs.context must be a list of messages");
      o.context = v.is_null() ? ojson::array() : v;
    } else {
      fail("kwargs has an unknown key '", k,
           "' (DeepSeek's encode_messages takes thinking_mode, drop_thinking, add_default_bos_token, "
           "reasoning_effort, context)");
    }
  }
  return o;
}

std::string encode_deepseek_messages(DeepseekVersion v, const ojson& messages, const DeepseekEncodeOptions& o) {
  Msgs context = preprocess(o.context, "context", v);
  Msgs current = preprocess(messages, "messages", v);
  Msgs full = context;
  full.insert(full.end(), current.begin(), current.end());
  sort_tool_results(full);

  std::string prompt = o.add_default_bos_token && context.empty() ? kBos : "";
  bool drop = o.drop_thinking;
  for (const Msg& m : full)
    if (truthy(m.m, "tools")) drop = false;

  size_t context_len = context.size(), to_render = current.size();
  if (o.thinking_mode == "thinking" && drop) {
    Msgs context_sorted(full.begin(), full.begin() + ptrdiff_t(context.size()));
    full = drop_thinking_messages(full, v);
    to_render = full.size() - drop_thinking_messages(context_sorted, v).size();
    context_len = full.size() - to_render;
  }
  for (size_t i = 0; i < to_render; ++i) prompt += render_message(context_len + i, full, v, o, drop);
  return prompt;
}

}  // namespace gannet::chat
