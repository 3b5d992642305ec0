#include "structured/tool_grammar.h"

#include <algorithm>

#include <nlohmann/json.hpp>

#include "core/error.h"
#include "structured/json_schema.h"

namespace gannet::structured {

namespace {

using ojson = nlohmann::ordered_json;

// Copies every rule of `from` into `into` under `prefix`; returns the id of from's root.
int32_t import_grammar(Grammar& into, const Grammar& from, const std::string& prefix) {
  std::vector<int32_t> ids(from.rules().size());
  for (size_t r = 0; r < from.rules().size(); ++r) ids[r] = into.rule(prefix + from.rules()[r].name);
  for (size_t r = 0; r < from.rules().size(); ++r) {
    for (const std::vector<Element>& alt : from.rules()[r].alts) {
      std::vector<Element> seq;
      for (const Element& e : alt)
        seq.push_back(e.kind == Element::Kind::kBytes ? bytes_el(into, from.sets()[size_t(e.id)]) : rule_el(ids[size_t(e.id)]));
      into.add_alt(ids[r], std::move(seq));
    }
  }
  return ids[size_t(from.root())];
}

// Text that never contains `stop` (code points; stop[0] occurs only at its start): the
// states of a matcher of `stop`, each free to end.
int32_t text_without(Grammar& g, const std::vector<uint32_t>& stop, const std::string& name) {
  const size_t n = stop.size();
  std::vector<int32_t> state(n);
  for (size_t i = 0; i < n; ++i) state[i] = g.rule(name + "_s" + std::to_string(i));
  for (size_t i = 0; i < n; ++i) {
    g.add_alt(state[i], {});
    if (i + 1 < n) g.add_alt(state[i], {rule_el(code_point_class(g, {{stop[i], stop[i]}}, false, name)), rule_el(state[i + 1])});
    if (i > 0) g.add_alt(state[i], {rule_el(code_point_class(g, {{stop[0], stop[0]}}, false, name)), rule_el(state[1])});
    std::vector<std::pair<uint32_t, uint32_t>> not_these = {{stop[i], stop[i]}, {stop[0], stop[0]}};
    g.add_alt(state[i], {rule_el(code_point_class(g, not_these, true, name)), rule_el(state[0])});
  }
  return state[0];
}

std::vector<uint32_t> code_points(const std::string& s) {
  std::vector<uint32_t> out;
  for (size_t i = 0; i < s.size();) {
    const unsigned char c = static_cast<unsigned char>(s[i]);
    const int len = c < 0x80 ? 1 : c < 0xE0 ? 2 : c < 0xF0 ? 3 : 4;
    uint32_t cp = len == 1 ? c : len == 2 ? c & 0x1F : len == 3 ? c & 0x0F : c & 0x07;
    for (int k = 1; k < len && i + size_t(k) < s.size(); ++k) cp = (cp << 6) | (static_cast<unsigned char>(s[i + size_t(k)]) & 0x3F);
    out.push_back(cp);
    i += size_t(len);
  }
  return out;
}

// Whether a property is written raw (string="true"): a plain string schema.
bool raw_string(const ojson& schema) {
  if (!schema.is_object() || schema.value("type", ojson()) != "string") return false;
  for (auto it = schema.begin(); it != schema.end(); ++it) {
    const std::string& k = it.key();
    if (k == "type" || k == "title" || k == "description" || k == "default" || k == "examples" || k == "$comment" ||
        k == "deprecated" || k == "readOnly" || k == "writeOnly")
      continue;
    if ((k == "enum" || k == "const") && (k == "const" ? it.value().is_string() : it.value().is_array())) {
      if (k == "enum")
        for (const ojson& v : it.value())
          if (!v.is_string()) return false;
      continue;
    }
    return false;
  }
  return true;
}

std::string need_string(const ojson& spec, const char* key) {
  if (!spec.contains(key) || !spec[key].is_string() || spec[key].get<std::string>().empty())
    fail("tool-call grammar: '", key, "' must be a non-empty string");
  return spec[key].get<std::string>();
}

}  // namespace

namespace {

// The JSON layouts of the dense families (tool_grammar.h): BLOCK_OPEN call (SEP call)*
// BLOCK_CLOSE with call = CALL_OPEN NAME CALL_MID <the parameters' schema> CALL_CLOSE.
Grammar compile_json_calls(const ojson& spec, const JsonWhitespace& ws) {
  auto text = [&](const char* key) {
    if (!spec.contains(key) || !spec[key].is_string()) fail("tool-call grammar: '", key, "' must be a string");
    return spec[key].get<std::string>();
  };
  const std::string block_open = text("block_open"), block_close = text("block_close"), call_open = text("call_open");
  const std::string call_mid = text("call_mid"), call_close = text("call_close"), sep = text("separator");
  const bool parallel = spec.value("parallel", true);
  const std::string trigger = spec.value("trigger", std::string());
  const std::string head = block_open + call_open;
  if (!head.starts_with(trigger)) fail("tool-call grammar: the trigger must open the block");
  Grammar g;
  // One rule per tool: NAME CALL_MID ARGS CALL_CLOSE (the call's opening comes before).
  const int32_t call = g.rule("call");
  for (size_t t = 0; t < spec["tools"].size(); ++t) {
    const ojson& tool = spec["tools"][t];
    if (!tool.is_object() || !tool.contains("name") || !tool["name"].is_string())
      fail("tool-call grammar: tools[", t, "].name must be a string");
    const std::string name = tool["name"].get<std::string>();
    std::string quoted;  // inside a JSON string where the layout is JSON
    for (const char c : name) quoted += (c == '"' || c == '\\') ? std::string("\\") + c : std::string(1, c);
    ojson params = tool.contains("parameters") && tool["parameters"].is_object() ? tool["parameters"]
                                                                                : ojson{{"type", "object"}};
    Grammar args;
    try {
      args = compile_json_schema(params.dump(), ws);
    } catch (const Error& e) {
      fail("tool '", name, "': ", e.what());
    }
    std::vector<Element> seq = literal(g, quoted + call_mid);
    seq.push_back(rule_el(import_grammar(g, args, "t" + std::to_string(t) + "_")));
    for (const Element& e : literal(g, call_close)) seq.push_back(e);
    g.add_alt(call, std::move(seq));
  }
  const int32_t more = g.rule("more");  // (SEP CALL_OPEN call)* BLOCK_CLOSE
  std::vector<Element> end = literal(g, block_close);
  g.add_alt(more, end);
  if (parallel) {
    std::vector<Element> next = literal(g, sep + call_open);
    next.push_back(rule_el(call));
    next.push_back(rule_el(more));
    g.add_alt(more, std::move(next));
  }
  const int32_t root = g.rule("root");
  std::vector<Element> first = literal(g, head.substr(trigger.size()));
  first.push_back(rule_el(call));
  first.push_back(rule_el(more));
  g.add_alt(root, std::move(first));
  g.set_root(root);
  g.check();
  return g;
}

}  // namespace

Grammar compile_tool_calls(const std::string& spec_json) {
  // Values as Python's json.dumps writes them: the templates render a returned call's
  // arguments that way, so what the model wrote is what its next prompt holds.
  JsonWhitespace ws;
  ws.python = true;
  const ojson spec = ojson::parse(spec_json, nullptr, false);
  if (spec.is_discarded() || !spec.is_object()) fail("tool-call grammar: the spec is not a JSON object");
  if (spec.value("layout", std::string("dsml")) == "json") {
    if (!spec.contains("tools") || !spec["tools"].is_array() || spec["tools"].empty())
      fail("tool-call grammar: 'tools' must be a non-empty list");
    return compile_json_calls(spec, ws);
  }
  const std::string calls_open = need_string(spec, "calls_open"), calls_close = need_string(spec, "calls_close");
  const std::string invoke_open = need_string(spec, "invoke_open"), invoke_close = need_string(spec, "invoke_close");
  const std::string param_open = need_string(spec, "param_open"), param_close = need_string(spec, "param_close");
  if (!spec.contains("tools") || !spec["tools"].is_array() || spec["tools"].empty())
    fail("tool-call grammar: 'tools' must be a non-empty list");
  const bool parallel = spec.value("parallel", true), after_trigger = spec.value("after_trigger", false);
  if (after_trigger && !calls_open.ends_with(">")) fail("tool-call grammar: calls_open must end with '>'");

  Grammar g;
  // Raw values may hold anything but the start of the parameter's closing tag.
  const std::string dsml = "｜DSML｜";
  const size_t dsml_at = param_close.find(dsml);
  const std::string stop = param_close.substr(0, dsml_at == std::string::npos ? param_close.size() : dsml_at + dsml.size());
  int32_t raw_text = -1;

  const int32_t invoke = g.rule("invoke");
  for (size_t t = 0; t < spec["tools"].size(); ++t) {
    const ojson& tool = spec["tools"][t];
    if (!tool.is_object() || !tool.contains("name") || !tool["name"].is_string())
      fail("tool-call grammar: tools[", t, "].name must be a string");
    const std::string name = tool["name"].get<std::string>();
    const ojson params = tool.contains("parameters") && tool["parameters"].is_object() ? tool["parameters"] : ojson::object();
    const ojson props = params.contains("properties") && params["properties"].is_object() ? params["properties"]
                                                                                         : ojson::object();
    std::vector<std::string> required;
    if (params.contains("required") && params["required"].is_array())
      for (const ojson& r : params["required"])
        if (r.is_string()) required.push_back(r.get<std::string>());
    for (const std::string& r : required)
      if (!props.contains(r)) fail("tool '", name, "': required parameter '", r, "' has no schema in properties");

    // One rule per parameter: its tag, then the raw or the JSON value.
    std::vector<int32_t> param;
    std::vector<bool> is_required;
    size_t i = 0;
    for (auto it = props.begin(); it != props.end(); ++it, ++i) {
      const std::string pre = "t" + std::to_string(t) + "p" + std::to_string(i);
      const int32_t p = g.rule(pre);
      std::vector<Element> head = literal(g, param_open + " name=\"" + it.key() + "\" string=\"");
      if (raw_string(it.value())) {
        std::vector<Element> seq = head;
        for (const Element& e : literal(g, "true\">")) seq.push_back(e);
        const ojson& s = it.value();
        if (s.contains("const") || s.contains("enum")) {
          const int32_t choice = g.rule(pre + "_enum");
          const ojson values = s.contains("const") ? ojson::array({s["const"]}) : s["enum"];
          for (const ojson& v : values) g.add_alt(choice, literal(g, v.get<std::string>()));
          seq.push_back(rule_el(choice));
        } else {
          if (raw_text < 0) raw_text = text_without(g, code_points(stop), "raw");
          seq.push_back(rule_el(raw_text));
        }
        for (const Element& e : literal(g, param_close)) seq.push_back(e);
        g.add_alt(p, std::move(seq));
      } else {
        ojson schema = it.value();
        if (schema.is_object()) {
          for (const char* defs : {"$defs", "definitions"})
            if (params.contains(defs) && !schema.contains(defs)) schema[defs] = params[defs];
        }
        Grammar value;
        try {
          value = compile_json_schema(schema.dump(), ws);
        } catch (const Error& e) {
          fail("tool '", name, "', parameter '", it.key(), "': ", e.what());
        }
        std::vector<Element> seq = head;
        for (const Element& e : literal(g, "false\">")) seq.push_back(e);
        seq.push_back(rule_el(import_grammar(g, value, pre + "_")));
        for (const Element& e : literal(g, param_close)) seq.push_back(e);
        g.add_alt(p, std::move(seq));
      }
      param.push_back(p);
      is_required.push_back(std::find(required.begin(), required.end(), it.key()) != required.end());
    }
    // after[i]: parameters i.. once one is written ("\n" before each); first[i]: none yet.
    const size_t n = param.size();
    std::vector<int32_t> after(n + 1), first(n + 1);
    for (size_t k = 0; k <= n; ++k) {
      after[k] = g.rule("t" + std::to_string(t) + "_after" + std::to_string(k));
      first[k] = g.rule("t" + std::to_string(t) + "_first" + std::to_string(k));
    }
    g.add_alt(after[n], {});
    g.add_alt(first[n], {});
    for (size_t k = n; k-- > 0;) {
      std::vector<Element> nl = literal(g, "\n");
      nl.push_back(rule_el(param[k]));
      nl.push_back(rule_el(after[k + 1]));
      g.add_alt(after[k], nl);
      if (!is_required[k]) g.add_alt(after[k], {rule_el(after[k + 1])});
      g.add_alt(first[k], {rule_el(param[k]), rule_el(after[k + 1])});
      if (!is_required[k]) g.add_alt(first[k], {rule_el(first[k + 1])});
    }
    std::vector<Element> seq = literal(g, invoke_open + " name=\"" + name + "\">\n");
    seq.push_back(rule_el(first[0]));
    for (const Element& e : literal(g, "\n" + invoke_close)) seq.push_back(e);
    g.add_alt(invoke, std::move(seq));
  }
  const int32_t invokes = g.rule("invokes");
  g.add_alt(invokes, {rule_el(invoke)});
  if (parallel) {
    std::vector<Element> more = {rule_el(invoke)};
    for (const Element& e : literal(g, "\n")) more.push_back(e);
    more.push_back(rule_el(invokes));
    g.add_alt(invokes, std::move(more));
  }
  const int32_t root = g.rule("root");
  std::vector<Element> seq = literal(g, (after_trigger ? std::string(">") : calls_open) + "\n");
  seq.push_back(rule_el(invokes));
  for (const Element& e : literal(g, "\n" + calls_close)) seq.push_back(e);
  g.add_alt(root, std::move(seq));
  g.set_root(root);
  g.check();
  return g;
}

}  // namespace gannet::structured
