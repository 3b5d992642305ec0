// The constrained tool-call grammar (structured/tool_grammar.h): exactly the DSML blocks
// DeepSeek's encoder writes for the given tools, each value held to its schema: required
// parameters present, optional ones free, schema order, plain strings raw (enum values
// as their texts), everything else JSON under its schema with $defs in scope; one call
// unless parallel; after a trigger the block starts at its '>'.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include "core/error.h"
#include "structured/json_schema.h"
#include "structured/matcher.h"
#include "structured/tool_grammar.h"
#include "structured_vocab.h"

using namespace gannet::structured;
using gannet::structured::test::bytes_vocab;

namespace {

using ojson = nlohmann::ordered_json;

const char* kTools = R"([
  {"name": "get_weather", "parameters": {"type": "object", "properties": {
     "city": {"type": "string", "description": "a city"},
     "unit": {"type": "string", "enum": ["celsius", "fahrenheit"]},
     "days": {"type": "integer", "minimum": 1, "maximum": 7},
     "code": {"type": "string", "maxLength": 3},
     "rule": {"$ref": "#/$defs/rule"}},
   "required": ["city", "days"],
   "$defs": {"rule": {"type": "object", "properties": {"freq": {"enum": ["daily", "weekly"]}}, "required": ["freq"]}}}},
  {"name": "get_time", "parameters": {"type": "object", "properties": {}}}])";

std::string spec(bool parallel, bool after_trigger) {
  return ojson{{"calls_open", "\n\n<｜DSML｜ calls>"}, {"calls_close", "</｜DSML｜ calls>"},
               {"invoke_open", "<｜DSML｜ invoke"}, {"invoke_close", "</｜DSML｜ invoke>"},
               {"param_open", "<｜DSML｜ parameter"}, {"param_close", "</｜DSML｜ parameter>"},
               {"tools", ojson::parse(kTools)}, {"parallel", parallel}, {"after_trigger", after_trigger}}
      .dump();
}

bool accepts(const Grammar& g, const std::string& s) {
  Matcher m(std::make_shared<const Grammar>(g), bytes_vocab());
  return m.accept_bytes(s) && m.can_end();
}

std::string param(const std::string& k, bool str, const std::string& v) {
  return "<｜DSML｜ parameter name=\"" + k + "\" string=\"" + (str ? "true" : "false") + "\">" + v + "</｜DSML｜ parameter>";
}
std::string invoke(const std::string& name, const std::vector<std::string>& params) {
  std::string body;
  for (size_t i = 0; i < params.size(); ++i) body += (i ? "\n" : "") + params[i];
  return "<｜DSML｜ invoke name=\"" + name + "\">\n" + body + "\n</｜DSML｜ invoke>";
}
std::string block(const std::vector<std::string>& invokes) {
  std::string body;
  for (size_t i = 0; i < invokes.size(); ++i) body += (i ? "\n" : "") + invokes[i];
  return "\n\n<｜DSML｜ calls>\n" + body + "\n</｜DSML｜ calls>";
}

TEST(ToolGrammar, TheEncodersBlocksAndNothingElse) {
  const Grammar one = compile_tool_calls(spec(false, false)), many = compile_tool_calls(spec(true, false));
  const std::string w = invoke("get_weather", {param("city", true, "Oslo, \"<Norway>\"\nnorth"), param("days", false, "3")});
  const std::string full = invoke("get_weather", {param("city", true, ""), param("unit", true, "celsius"), param("days", false, "7"),
                                                  param("code", false, "\"ab\""), param("rule", false, "{\"freq\": \"daily\"}")});
  const std::string t = invoke("get_time", {});
  for (const std::string& ok : {block({w}), block({full}), block({t})}) {
    EXPECT_TRUE(accepts(one, ok)) << ok;
    EXPECT_TRUE(accepts(many, ok)) << ok;
  }
  EXPECT_TRUE(accepts(many, block({w, t, w})));
  EXPECT_FALSE(accepts(one, block({w, t})));  // parallel: false
  const std::string bad[] = {
      block({invoke("get_weather", {param("city", true, "Oslo")})}),                                  // days is required
      block({invoke("get_weather", {param("days", false, "3"), param("city", true, "Oslo")})}),       // schema order
      block({invoke("get_weather", {param("city", true, "Oslo"), param("days", false, "8")})}),       // maximum
      block({invoke("get_weather", {param("city", true, "Oslo"), param("days", true, "3")})}),        // integer written raw
      block({invoke("get_weather", {param("city", false, "\"Oslo\""), param("days", false, "3")})}),  // plain string as JSON
      block({invoke("get_weather", {param("city", true, "a</｜DSML｜ b"), param("days", false, "3")})}),
      block({invoke("get_weather", {param("city", true, "O"), param("unit", true, "kelvin"), param("days", false, "3")})}),
      block({invoke("get_weather", {param("city", true, "O"), param("days", false, "3"), param("code", false, "\"abcd\"")})}),
      block({invoke("get_weather", {param("city", true, "O"), param("days", false, "3"), param("rule", false, "{}")})}),
      block({invoke("get_weather", {param("city", true, "O"), param("days", false, "3"), param("other", true, "x")})}),
      block({invoke("get_now", {})}),
      block({}),
  };
  for (const std::string& b : bad) EXPECT_FALSE(accepts(many, b)) << b;
  // JSON values exactly as Python's json.dumps writes them, which is what DeepSeek's encoder
  // writes back when the call returns in the history: ": " and ", ", no other whitespace.
  auto with_rule = [](const std::string& rule) {
    return block({invoke("get_weather", {param("city", true, "O"), param("days", false, "3"), param("rule", false, rule)})});
  };
  EXPECT_TRUE(accepts(many, with_rule("{\"freq\": \"weekly\"}")));
  for (const char* other : {"{\"freq\":\"weekly\"}", "{\"freq\":  \"weekly\"}", "{ \"freq\": \"weekly\"}",
                            "{\"freq\": \"weekly\" }", "{\"freq\" : \"weekly\"}", "{\"freq\":\n\"weekly\"}",
                            "{\"freq\":\t\"weekly\"}"})
    EXPECT_FALSE(accepts(many, with_rule(other))) << other;
  // After the trigger "\n\n<｜DSML｜ calls" the grammar starts at '>'.
  const Grammar rest = compile_tool_calls(spec(true, true));
  EXPECT_TRUE(accepts(rest, block({w}).substr(std::string("\n\n<｜DSML｜ calls").size())));
  EXPECT_FALSE(accepts(rest, block({w})));
}

TEST(ToolGrammar, BadSpecsAreRefusedByName) {
  ojson s = ojson::parse(spec(true, false));
  s["tools"][0]["parameters"]["properties"]["days"] = {{"type", "integer"}, {"frobnicate", 1}};
  try {
    compile_tool_calls(s.dump());
    FAIL() << "an unknown schema keyword compiled";
  } catch (const gannet::Error& e) {
    EXPECT_NE(std::string(e.what()).find("'get_weather', parameter 'days'"), std::string::npos) << e.what();
  }
  s = ojson::parse(spec(true, false));
  s["tools"][0]["parameters"]["required"].push_back("nowhere");
  EXPECT_THROW(compile_tool_calls(s.dump()), gannet::Error);
  s = ojson::parse(spec(true, false));
  s["tools"] = ojson::array();
  EXPECT_THROW(compile_tool_calls(s.dump()), gannet::Error);
}

}  // namespace

namespace {

// The dense families' JSON layout (Qwen's blocks here): the call's name is one of the
// tools', its arguments the tool's parameters under their schema.
TEST(ToolGrammar, JsonLayoutOfTheDenseFamilies) {
  ojson spec = {{"layout", "json"}, {"block_open", ""}, {"block_close", ""},
                {"call_open", "<tool_call>\n{\"name\": \""}, {"call_mid", "\", \"arguments\": "},
                {"call_close", "}\n</tool_call>"}, {"separator", "\n"}, {"tools", ojson::parse(kTools)},
                {"parallel", true}, {"trigger", ""}};
  const Grammar g = compile_tool_calls(spec.dump());
  const std::string w = "<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Oslo\", \"days\": 3}}\n</tool_call>";
  // The arguments as the template's tojson writes them back, and no other spacing.
  for (const char* other : {"{\"city\":\"Oslo\",\"days\":3}", "{\"city\": \"Oslo\" , \"days\": 3}",
                            "{\"city\": \"Oslo\",\n\"days\": 3}", "{ \"city\": \"Oslo\", \"days\": 3 }"})
    EXPECT_FALSE(accepts(g, "<tool_call>\n{\"name\": \"get_weather\", \"arguments\": " + std::string(other) +
                                "}\n</tool_call>"))
        << other;
  const std::string t = "<tool_call>\n{\"name\": \"get_time\", \"arguments\": {}}\n</tool_call>";
  EXPECT_TRUE(accepts(g, w));
  EXPECT_TRUE(accepts(g, w + "\n" + t));
  EXPECT_FALSE(accepts(g, "<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Oslo\"}}\n</tool_call>"));
  EXPECT_FALSE(accepts(g, "<tool_call>\n{\"name\": \"get_now\", \"arguments\": {}}\n</tool_call>"));
  EXPECT_FALSE(accepts(g, "Sure. " + w));
  spec["parallel"] = false;
  EXPECT_FALSE(accepts(compile_tool_calls(spec.dump()), w + "\n" + t));
  spec["trigger"] = "<tool_call>";  // under "auto": the grammar starts after the marker
  const Grammar rest = compile_tool_calls(spec.dump());
  EXPECT_TRUE(accepts(rest, w.substr(std::string("<tool_call>").size())));
  EXPECT_FALSE(accepts(rest, w));
  spec["trigger"] = "{";
  EXPECT_THROW(compile_tool_calls(spec.dump()), gannet::Error);
}

TEST(ToolGrammar, JsonDumpsLayoutAcrossFreeAndTypedValues) {
  // The json.dumps layout holds inside values a schema leaves free (the shared JSON rules)
  // as in typed ones: each accepted text is what Python writes for its document.
  JsonWhitespace ws;
  ws.python = true;
  const std::string schema = R"({"type": "object", "properties": {"n": {"type": "array", "items": {"type": "integer"}},
                                 "free": {}, "e": {"enum": [[1, 2], {"k": "v"}]}}, "required": ["n"]})";
  const Grammar g = compile_json_schema(schema, ws);
  for (const char* ok : {R"({"n": []})", R"({"n": [1, 2, 3]})", R"({"n": [1], "free": {"a": [null, true, {"b": 1.5}]}})",
                         R"({"n": [], "free": [], "e": [1, 2]})", R"({"n": [], "e": {"k": "v"}})", R"({"n": [], "free": {}})"})
    EXPECT_TRUE(accepts(g, ok)) << ok;
  for (const char* bad : {R"({"n":[]})", R"({"n": [1,2]})", R"({"n": [ 1]})", R"({"n": [], "free": {"a":1}})",
                          R"({"n": [], "free": [1 ,2]})", R"({"n": [], "e": [1,2]})", R"({"n": [], "e": {"k":"v"}})",
                          R"( {"n": []})", R"({"n": []} )"})
    EXPECT_FALSE(accepts(g, bad)) << bad;
}

}  // namespace
