#include "server/responses_request.h"

namespace gannet::server {

namespace {

using ojson = nlohmann::ordered_json;

void check_only_keys(const ojson& o, const std::string& at, const std::string& field, std::initializer_list<const char*> allowed) {
  for (auto it = o.begin(); it != o.end(); ++it) {
    bool ok = false;
    for (const char* a : allowed) ok = ok || it.key() == a;
    if (!ok) refuse(at + " has an unknown field '" + it.key() + "'", field);
  }
}

// A message item's content -> chat content (a string, or text / image_url parts).
ojson message_content(const ojson& c, const std::string& role, const std::string& at) {
  if (c.is_string()) return c;
  if (!c.is_array()) refuse(at + ".content must be a string or a list of content parts", "input");
  ojson parts = ojson::array();
  for (size_t i = 0; i < c.size(); ++i) {
    const std::string f = at + ".content[" + std::to_string(i) + "]";
    const ojson& p = c[i];
    if (!p.is_object() || !p.contains("type") || !p["type"].is_string()) refuse(f + " must be a part with a 'type'", "input");
    const std::string type = p["type"].get<std::string>();
    if (type == "input_text" || type == "output_text") {
      if (type == "output_text" && role != "assistant") refuse(f + ": output_text parts belong to assistant messages", "input");
      if (type == "input_text" && role == "assistant") refuse(f + ": assistant messages take output_text parts", "input");
      check_only_keys(p, f, "input", {"type", "text", "annotations", "logprobs"});
      if (!p.contains("text") || !p["text"].is_string()) refuse(f + ".text must be a string", "input");
      parts.push_back({{"type", "text"}, {"text", p["text"]}});
    } else if (type == "input_image") {
      if (role != "user") refuse(f + ": images are taken in user messages only", "input");
      check_only_keys(p, f, "input", {"type", "image_url", "detail"});
      if (p.contains("detail") && !p["detail"].is_null() && p["detail"] != "auto")
        refuse(f + ".detail: only \"auto\" (the model's own resolution)", "input");
      if (!p.contains("image_url") || !p["image_url"].is_string())
        refuse(f + ".image_url must be a data: URL (file_id is not supported)", "input");
      parts.push_back({{"type", "image_url"}, {"image_url", {{"url", p["image_url"]}}}});
    } else {
      refuse(f + ": content parts of type '" + type + "' are not supported (input_text, output_text, input_image)", "input");
    }
  }
  return parts;
}

// Input items -> chat messages appended to `out`.
void convert_items(const ojson& items, ojson& out) {
  std::string reasoning;
  bool have_reasoning = false;
  auto last_assistant = [&]() -> ojson* {
    if (out.empty() || out.back()["role"] != "assistant") return nullptr;
    return &out.back();
  };
  auto new_assistant = [&](ojson content) -> ojson& {
    ojson m = {{"role", "assistant"}, {"content", std::move(content)}};
    if (have_reasoning) m["reasoning_content"] = reasoning, reasoning.clear(), have_reasoning = false;
    out.push_back(m);
    return out.back();
  };
  for (size_t i = 0; i < items.size(); ++i) {
    const std::string at = "input[" + std::to_string(i) + "]";
    const ojson& it = items[i];
    if (!it.is_object()) refuse(at + " must be an object", "input");
    const std::string type = it.contains("type") && it["type"].is_string() ? it["type"].get<std::string>() : "message";
    if (type == "message") {
      check_only_keys(it, at, "input", {"type", "role", "content", "id", "status"});
      if (!it.contains("role") || !it["role"].is_string()) refuse(at + ".role must be a string", "input");
      const std::string role = it["role"].get<std::string>();
      if (role != "user" && role != "assistant" && role != "system" && role != "developer")
        refuse(at + ".role '" + role + "' is not one of user, assistant, system, developer", "input");
      if (!it.contains("content")) refuse(at + " needs 'content'", "input");
      ojson content = message_content(it["content"], role, at);
      if (role == "assistant") new_assistant(content);
      else out.push_back({{"role", role}, {"content", content}});
    } else if (type == "reasoning") {
      check_only_keys(it, at, "input", {"type", "id", "summary", "content", "encrypted_content", "status"});
      if (it.contains("encrypted_content") && !it["encrypted_content"].is_null())
        refuse(at + ".encrypted_content: gannet writes no encrypted reasoning", "input");
      if (it.contains("content") && it["content"].is_array())
        for (const ojson& p : it["content"])
          if (p.is_object() && p.value("type", "") == "reasoning_text" && p.contains("text") && p["text"].is_string())
            reasoning += p["text"].get<std::string>();
      have_reasoning = true;
    } else if (type == "function_call") {
      check_only_keys(it, at, "input", {"type", "id", "call_id", "name", "arguments", "status"});
      if (!it.contains("call_id") || !it["call_id"].is_string()) refuse(at + ".call_id must be a string", "input");
      if (!it.contains("name") || !it["name"].is_string()) refuse(at + ".name must be a string", "input");
      if (!it.contains("arguments") || !it["arguments"].is_string()) refuse(at + ".arguments must be JSON text", "input");
      ojson* a = last_assistant();
      if (!a || have_reasoning) a = &new_assistant(nullptr);
      if (!a->contains("tool_calls")) (*a)["tool_calls"] = ojson::array();
      (*a)["tool_calls"].push_back(
          {{"id", it["call_id"]}, {"type", "function"}, {"function", {{"name", it["name"]}, {"arguments", it["arguments"]}}}});
    } else if (type == "function_call_output") {
      check_only_keys(it, at, "input", {"type", "id", "call_id", "output", "status"});
      if (!it.contains("call_id") || !it["call_id"].is_string()) refuse(at + ".call_id must be a string", "input");
      if (!it.contains("output") || !it["output"].is_string()) refuse(at + ".output must be a string", "input");
      out.push_back({{"role", "tool"}, {"tool_call_id", it["call_id"]}, {"content", it["output"]}});
    } else {
      refuse(at + ": items of type '" + type + "' are not supported (message, reasoning, function_call, "
             "function_call_output)", "input");
    }
  }
  if (have_reasoning) refuse("a reasoning item must be followed by the assistant turn it belongs to", "input");
}

ojson convert_function_tool(const ojson& t, size_t index) {
  const std::string at = "tools[" + std::to_string(index) + "]";
  if (!t.is_object() || t.value("type", "") != "function")
    refuse(at + " must be {\"type\": \"function\", \"name\", \"parameters\", ...} (function tools only)", "tools");
  check_only_keys(t, at, "tools", {"type", "name", "description", "parameters", "strict"});
  if (!t.contains("name") || !t["name"].is_string() || t["name"].get<std::string>().empty())
    refuse(at + ".name must be a non-empty string", "tools");
  ojson fn = {{"name", t["name"]}};
  if (t.contains("description") && !t["description"].is_null()) fn["description"] = t["description"];
  if (t.contains("parameters") && !t["parameters"].is_null()) fn["parameters"] = t["parameters"];
  if (t.contains("strict") && !t["strict"].is_null()) fn["strict"] = t["strict"];
  return {{"type", "function"}, {"function", fn}};
}

}  // namespace

ResponsesRequest parse_responses(const ojson& body, const std::string& served_name) {
  if (!body.is_object()) refuse("the request body must be a JSON object", "");
  ResponsesRequest r;
  ojson oa = ojson::object();
  ojson msgs = ojson::array();
  ojson instructions;
  bool have_input = false;
  for (auto it = body.begin(); it != body.end(); ++it) {
    const std::string& k = it.key();
    const ojson& v = it.value();
    if (k == "model") {
      oa["model"] = v;
    } else if (k == "input") {
      have_input = true;
      if (v.is_string()) msgs.push_back({{"role", "user"}, {"content", v}});
      else if (v.is_array() && !v.empty()) convert_items(v, msgs);
      else refuse("'input' must be a string or a non-empty list of items", "input");
    } else if (k == "instructions") {
      if (!v.is_string() && !v.is_null()) refuse("'instructions' must be a string", "instructions");
      instructions = v;
      r.echo["instructions"] = v;
    } else if (k == "max_output_tokens") {
      if (v.is_null()) continue;
      if (!v.is_number_integer() || v.get<int64_t>() < 1) refuse("'max_output_tokens' must be an integer >= 1", k);
      oa["max_tokens"] = v;
      r.echo[k] = v;
    } else if (k == "temperature" || k == "top_p") {
      if (!v.is_null()) oa[k] = v, r.echo[k] = v;
    } else if (k == "stream") {
      if (!v.is_null()) oa["stream"] = v;
    } else if (k == "tools") {
      if (v.is_null()) continue;
      if (!v.is_array()) refuse("'tools' must be a list of tools", "tools");
      ojson tools = ojson::array();
      for (size_t t = 0; t < v.size(); ++t) tools.push_back(convert_function_tool(v[t], t));
      if (!tools.empty()) oa["tools"] = tools;
      r.echo["tools"] = v;
    } else if (k == "tool_choice") {
      if (v.is_null()) continue;
      r.echo[k] = v;
      if (v.is_string()) {
        oa["tool_choice"] = v;  // auto / none / required, checked by the chat parser
      } else if (v.is_object() && v.value("type", "") == "function" && v.contains("name") && v["name"].is_string()) {
        check_only_keys(v, "tool_choice", "tool_choice", {"type", "name"});
        oa["tool_choice"] = {{"type", "function"}, {"function", {{"name", v["name"]}}}};
      } else {
        refuse("'tool_choice' must be \"auto\", \"none\", \"required\" or {\"type\": \"function\", \"name\": ...}", k);
      }
    } else if (k == "parallel_tool_calls") {
      if (!v.is_null()) oa[k] = v, r.echo[k] = v;
    } else if (k == "reasoning") {
      if (v.is_null()) continue;
      if (!v.is_object()) refuse("'reasoning' must be an object ({\"effort\": ...})", k);
      for (auto f = v.begin(); f != v.end(); ++f) {
        if (f.key() == "effort") {
          if (!f.value().is_null()) oa["reasoning_effort"] = f.value();
        } else if (f.key() == "summary" || f.key() == "generate_summary") {
          if (!f.value().is_null())
            refuse("reasoning." + f.key() + ": gannet writes no reasoning summaries (the reasoning itself comes back)", k);
        } else {
          refuse("reasoning has an unknown field '" + f.key() + "'", k);
        }
      }
      r.echo[k] = v;
    } else if (k == "text") {
      if (v.is_null()) continue;
      if (!v.is_object()) refuse("'text' must be an object ({\"format\": ...})", k);
      for (auto f = v.begin(); f != v.end(); ++f) {
        if (f.key() == "verbosity") {
          if (!f.value().is_null()) refuse("text.verbosity is not supported", k);
        } else if (f.key() != "format") {
          refuse("text has an unknown field '" + f.key() + "'", k);
        }
      }
      if (v.contains("format") && !v["format"].is_null()) {
        const ojson& fm = v["format"];
        const std::string type = fm.is_object() ? fm.value("type", "") : "";
        if (type == "json_schema") {
          check_only_keys(fm, "text.format", k, {"type", "name", "schema", "strict", "description"});
          if (!fm.contains("schema")) refuse("text.format of type json_schema needs 'schema'", k);
          ojson js = {{"schema", fm["schema"]}};
          if (fm.contains("name")) js["name"] = fm["name"];
          if (fm.contains("strict")) js["strict"] = fm["strict"];
          if (fm.contains("description")) js["description"] = fm["description"];
          oa["response_format"] = {{"type", "json_schema"}, {"json_schema", js}};
        } else if (type == "json_object") {
          check_only_keys(fm, "text.format", k, {"type"});
          oa["response_format"] = {{"type", "json_object"}};
        } else if (type != "text") {
          refuse("text.format.type must be text, json_schema or json_object", k);
        }
      }
      r.echo[k] = v;
    } else if (k == "store") {
      if (!v.is_null() && v != false)
        refuse("'store': gannet keeps no responses (stateless); send the conversation as 'input' with store: false", k);
    } else if (k == "previous_response_id" || k == "conversation" || k == "prompt") {
      if (!v.is_null())
        refuse("'" + k + "': gannet keeps no responses or conversations (stateless); send the whole conversation as 'input'", k);
    } else if (k == "background") {
      if (!v.is_null() && v != false) refuse("'background' responses are not supported", k);
    } else if (k == "truncation") {
      if (!v.is_null() && v != "disabled") refuse("'truncation' must be \"disabled\" (gannet never drops input)", k);
    } else if (k == "include") {
      if (!v.is_null() && !(v.is_array() && v.empty())) refuse("'include' is not supported", k);
    } else if (k == "metadata") {
      if (v.is_null()) continue;
      if (!v.is_object()) refuse("'metadata' must be an object of strings", k);
      for (auto f = v.begin(); f != v.end(); ++f)
        if (!f.value().is_string()) refuse("metadata values must be strings", k);
      r.echo[k] = v;
    } else if (k == "user" || k == "safety_identifier" || k == "prompt_cache_key") {
      // Identifiers and a cache-routing hint: they change no output (the prefix cache is
      // automatic and exact).
      if (!v.is_string() && !v.is_null()) refuse("'" + k + "' must be a string", k);
    } else if (k == "structured" || k == "seed" || k == "min_p" || k == "top_k") {
      if (!v.is_null()) oa[k] = v;  // gannet's sampling extensions, as on the chat endpoint
    } else if (!v.is_null()) {
      refuse("unknown field '" + k + "'", k);
    }
  }
  if (!have_input) refuse("missing 'input'", "input");
  if (!instructions.is_null()) msgs.insert(msgs.begin(), ojson{{"role", "system"}, {"content", instructions}});
  if (msgs.empty()) refuse("'input' holds no message", "input");
  oa["messages"] = msgs;
  if (!oa.contains("model")) oa["model"] = served_name;
  try {
    r.chat = parse_chat(oa, served_name);
  } catch (ApiError& e) {  // name the Responses fields
    if (e.param == "max_tokens") e.param = "max_output_tokens";
    else if (e.param == "messages") e.param = "input";
    else if (e.param == "response_format") e.param = "text";
    throw;
  }
  return r;
}

}  // namespace gannet::server
