// DeepSeek-V4 / V4.1 prompts and completion parsing equal DeepSeek's own encoders byte for
// byte: every conversation in tests/data/deepseek_v4_chat/ renders to the official text
// (or is refused where the official encoder refuses it), and every DSML completion parses
// to the official content, reasoning and arguments. Python's json.dumps formatting, which
// the encoders write tool schemas and arguments with, is checked against values printed
// by CPython.
// labels: exact
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "chat/chat_format.h"
#include "chat/deepseek_v4_encoding.h"
#include "chat/python_json.h"
#include "core/error.h"

namespace gannet::chat {
namespace {

using ojson = nlohmann::ordered_json;

std::string source_dir() {
  if (const char* dir = std::getenv("GANNET_SOURCE_DIR")) return dir;
  return std::filesystem::path(__FILE__).parent_path().parent_path().parent_path().string();
}

std::vector<ojson> read_lines(const std::string& name) {
  std::ifstream f(source_dir() + "/tests/data/deepseek_v4_chat/" + name);
  EXPECT_TRUE(f) << name;
  std::vector<ojson> rows;
  for (std::string line; std::getline(f, line);)
    if (!line.empty()) rows.push_back(ojson::parse(line));
  return rows;
}

void check_renderings(const std::string& file, DeepseekVersion v) {
  const std::vector<ojson> rows = read_lines(file);
  ASSERT_EQ(rows.size(), 33u);
  size_t refused = 0;
  for (const ojson& row : rows) {
    const std::string id = row["id"];
    SCOPED_TRACE(id + ": " + row["desc"].get<std::string>());
    std::string rendered, error;
    try {
      rendered = encode_deepseek_messages(v, row["messages"], deepseek_options_from_kwargs(row["kwargs"]));
    } catch (const Error& e) {
      error = e.what();
    }
    if (row.contains("error")) {
      ++refused;
      EXPECT_FALSE(error.empty()) << "the official encoder refuses this (" << row["error"]["type"] << "), gannet rendered:\n"
                                  << rendered;
    } else {
      EXPECT_EQ(error, "");
      EXPECT_EQ(rendered, row["rendered"].get<std::string>());
    }
  }
  EXPECT_GE(refused, 3u);
}

TEST(DeepseekV4Encoding, MatchesTheOfficialV4Encoder) { check_renderings("v4.jsonl", DeepseekVersion::kV4); }
TEST(DeepseekV4Encoding, MatchesTheOfficialV41Encoder) { check_renderings("v41.jsonl", DeepseekVersion::kV41); }

TEST(DeepseekV4Encoding, ParsesCompletionsAsTheOfficialParser) {
  const std::vector<ojson> rows = read_lines("dsml_parse.jsonl");
  ASSERT_EQ(rows.size(), 15u);
  for (const ojson& row : rows) {
    SCOPED_TRACE(row["id"].get<std::string>());
    const DeepseekVersion v = row["version"] == "v4" ? DeepseekVersion::kV4 : DeepseekVersion::kV41;
    const bool thinking = row["thinking_mode"] == "thinking";
    if (row.contains("error")) {
      EXPECT_THROW(parse_deepseek_completion(v, row["text"], thinking), Error);
      continue;
    }
    ParsedCompletion p;
    ASSERT_NO_THROW(p = parse_deepseek_completion(v, row["text"], thinking));
    EXPECT_EQ(p.content, row["content"].get<std::string>());
    EXPECT_EQ(p.reasoning_content, row["reasoning_content"].get<std::string>());
    ASSERT_EQ(p.tool_calls.size(), row["tool_calls"].size());
    for (size_t i = 0; i < p.tool_calls.size(); ++i) {
      const ojson& want = row["tool_calls"][i];
      EXPECT_EQ(p.tool_calls[i].name, want["name"].get<std::string>());
      ASSERT_TRUE(want["arguments_raw_is_valid_json"].get<bool>());
      EXPECT_EQ(p.tool_calls[i].arguments, want["arguments_raw"].get<std::string>());
      EXPECT_EQ(ojson::parse(p.tool_calls[i].arguments), want["arguments"]);
      EXPECT_FALSE(p.tool_calls[i].value_was_invalid_json);
    }
  }
}

// A string="false" value that is not JSON: the official parser pastes it in and returns
// invalid JSON; gannet keeps the text as a JSON string and says so.
TEST(DeepseekV4Encoding, InvalidJsonValuesBecomeStrings) {
  const std::string text =
      "\n\n<｜DSML｜ calls>\n<｜DSML｜ invoke name=\"f\">\n<｜DSML｜ parameter name=\"mode\" string=\"false\">fast</｜DSML｜ "
      "parameter>\n<｜DSML｜ parameter name=\"n\" string=\"false\"> [1, 2,  3] </｜DSML｜ parameter>\n</｜DSML｜ "
      "invoke>\n</｜DSML｜ calls><｜end▁of▁sentence｜>";
  const ParsedCompletion p = parse_deepseek_completion(DeepseekVersion::kV41, text, false);
  ASSERT_EQ(p.tool_calls.size(), 1u);
  EXPECT_EQ(p.tool_calls[0].arguments, "{\"mode\": \"fast\", \"n\":  [1, 2,  3] }");
  EXPECT_TRUE(p.tool_calls[0].value_was_invalid_json);
  // What the encoder writes for a call, the parser reads back.
  const ojson msgs = ojson::parse(R"([{"role": "user", "content": "q"}, {"role": "assistant", "content": "",
      "tool_calls": [{"id": "a", "type": "function", "function": {"name": "g", "arguments": "{\"s\": \"x\\ny\", \"k\": [1, {\"z\": null}]}"}}]}])");
  for (const DeepseekVersion v : {DeepseekVersion::kV4, DeepseekVersion::kV41}) {
    const std::string prompt = encode_deepseek_messages(v, msgs, DeepseekEncodeOptions{});
    const std::string head = "<｜Assistant｜></think>";
    const std::string completion = prompt.substr(prompt.find(head) + head.size());
    const ParsedCompletion back = parse_deepseek_completion(v, completion, false);
    ASSERT_EQ(back.tool_calls.size(), 1u);
    EXPECT_EQ(back.tool_calls[0].name, "g");
    EXPECT_EQ(back.tool_calls[0].arguments, "{\"s\": \"x\\ny\", \"k\": [1, {\"z\": null}]}");
  }
}

TEST(DeepseekV4Encoding, RefusalsNameTheMessageAndField) {
  auto error_of = [](DeepseekVersion v, const char* messages, const char* kwargs) {
    try {
      encode_deepseek_messages(v, ojson::parse(messages), deepseek_options_from_kwargs(ojson::parse(kwargs)));
    } catch (const Error& e) {
      return std::string(e.what());
    }
    return std::string("(rendered)");
  };
  EXPECT_NE(error_of(DeepseekVersion::kV41, R"([{"role": "user", "content": "a"}, {"role": "robot", "content": "x"}])", "{}")
                .find("messages[1].role"),
            std::string::npos);
  EXPECT_NE(error_of(DeepseekVersion::kV41, R"([{"role": "developer", "content": "x"}])", "{}").find("messages[0].role"),
            std::string::npos);
  EXPECT_NE(error_of(DeepseekVersion::kV41, R"([{"role": "user", "content": "x"}])",
                     R"({"thinking_mode": "thinking", "reasoning_effort": 101})")
                .find("reasoning_effort"),
            std::string::npos);
  EXPECT_NE(error_of(DeepseekVersion::kV41, R"([{"role": "user", "content": "x"}])", R"({"reasoning_effort": true})")
                .find("reasoning_effort"),
            std::string::npos);
  EXPECT_NE(error_of(DeepseekVersion::kV4, R"([{"role": "user", "content": "x"}])", R"({"reasoning_effort": "low"})")
                .find("reasoning_effort"),
            std::string::npos);
  EXPECT_NE(error_of(DeepseekVersion::kV4, R"([{"role": "user", "content": "x"}])", R"({"thinking_mode": "fast"})")
                .find("thinking_mode"),
            std::string::npos);
  EXPECT_NE(error_of(DeepseekVersion::kV4, R"([{"role": "user", "content": "x"}])", R"({"temperature": 1})").find("temperature"),
            std::string::npos);
  EXPECT_NE(error_of(DeepseekVersion::kV4, R"([{"role": "user", "content": "x", "task": "nope"}])", "{}").find("messages[0].task"),
            std::string::npos);
  EXPECT_NE(error_of(DeepseekVersion::kV4, R"([{"role": "user", "content": "q"}, {"role": "assistant", "content": "",
      "tool_calls": [{"id": "a", "function": {"name": "g", "arguments": "[1]"}}]}])", "{}")
                .find("messages[1].tool_calls[0].function.arguments"),
            std::string::npos);
  EXPECT_NE(error_of(DeepseekVersion::kV41, R"([{"role": "user", "content": [{"type": "text", "text": "<｜deepseek_image｜>"}]}])", "{}")
                .find("messages[0].content[0]"),
            std::string::npos);
}

// context: messages already in the cache count for ordering and the last user turn but
// are not rendered again, and there is no BOS.
TEST(DeepseekV4Encoding, ContextIsNotRenderedAgain) {
  const ojson all = ojson::parse(R"([{"role": "system", "content": "S"}, {"role": "user", "content": "Q1"},
      {"role": "assistant", "content": "A1", "reasoning_content": "R1"}, {"role": "user", "content": "Q2"}])");
  for (const DeepseekVersion v : {DeepseekVersion::kV4, DeepseekVersion::kV41}) {
    for (const bool drop : {true, false}) {
      DeepseekEncodeOptions o;
      o.thinking_mode = "thinking";
      o.drop_thinking = drop;
      const std::string whole = encode_deepseek_messages(v, all, o);
      // Split after the first user turn's header: the prefix is what the cache holds.
      o.context = ojson::array({all[0], all[1]});
      const std::string tail = encode_deepseek_messages(v, ojson::array({all[2], all[3]}), o);
      DeepseekEncodeOptions head_o = o;
      head_o.context = ojson::array();
      const std::string head = encode_deepseek_messages(v, ojson::array({all[0], all[1]}), head_o);
      if (!drop) {
        EXPECT_EQ(head + tail, whole);  // kept reasoning: the turn renders the same in both
      } else {
        EXPECT_TRUE(whole.ends_with(tail)) << whole << "\n---\n" << tail;
      }
      EXPECT_FALSE(tail.starts_with("<｜begin▁of▁sentence｜>"));
    }
  }
}

TEST(PythonJson, DumpsAsCPython) {
  // Left: the value; right: CPython 3.11's json.dumps of it.
  const std::pair<double, const char*> floats[] = {
      {15.5, "15.5"}, {-0.0015, "-0.0015"}, {1e20, "1e+20"}, {1e16, "1e+16"}, {1e15, "1000000000000000.0"},
      {1234567890123456.0, "1234567890123456.0"}, {0.0001, "0.0001"}, {0.00001, "1e-05"}, {1.5e-7, "1.5e-07"},
      {-0.0, "-0.0"}, {0.1, "0.1"}, {1.0 / 3, "0.3333333333333333"}, {2.5e300, "2.5e+300"}, {123.0, "123.0"},
      {5e-324, "5e-324"}, {1.7976931348623157e308, "1.7976931348623157e+308"}, {100.0, "100.0"}};
  for (const auto& [x, want] : floats) EXPECT_EQ(python_json_dumps(ojson(x)), want) << want;
  const ojson v = ojson::parse("{\"a\": \"x\\\"\\\\\\n\\t\\u0001\\u007f é 😀\", \"b\": [1, 2.0, null, true, {}], \"c\": {}}");
  EXPECT_EQ(python_json_dumps(v), "{\"a\": \"x\\\"\\\\\\n\\t\\u0001\x7f é 😀\", \"b\": [1, 2.0, null, true, {}], \"c\": {}}");
}

}  // namespace
}  // namespace gannet::chat
