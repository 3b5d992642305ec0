// The server's streaming reader of completions (chat/output_parser.h): for every way of
// cutting a completion into pieces it returns the same reasoning, content and tool calls
// as for the whole text, equal to DeepSeek's own parser on the shared DSML cases, and no
// delta ever carries DSML bytes; a malformed block becomes content and is flagged.
// labels: exact
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "chat/output_parser.h"
#include "chat/python_json.h"

namespace gannet::chat {
namespace {

using ojson = nlohmann::ordered_json;

struct Message {
  std::string reasoning, content;
  std::vector<std::pair<std::string, std::string>> calls;  // name, arguments
  std::vector<std::string> ids;
  bool malformed = false;
  bool operator==(const Message&) const = default;
};

// Feeds `pieces`, gathering the deltas the way a client joins them.
Message run(const ChatOutputParser::Options& o, const std::vector<std::string>& pieces, bool clean = false) {
  ChatOutputParser p(o);
  Message m;
  auto take = [&](const ChatDelta& d) {
    m.reasoning += d.reasoning;
    m.content += d.content;
    if (clean) {  // well-formed: no delta carries DSML bytes
      EXPECT_EQ(d.content.find("｜DSML｜"), std::string::npos) << d.content;
      EXPECT_EQ(d.reasoning.find("｜DSML｜"), std::string::npos);
    }
    for (const ToolCallDelta& t : d.tool_calls) {
      if (t.index == m.calls.size()) {
        EXPECT_FALSE(t.name.empty());  // a call opens with its name
        m.calls.push_back({t.name, ""});
        m.ids.push_back(t.id);
      }
      ASSERT_LT(t.index, m.calls.size());
      if (t.index + 1 == m.calls.size() && !t.name.empty()) {
        EXPECT_EQ(t.arguments, "");  // the name comes alone
      }
      m.calls[t.index].second += t.arguments;
    }
  };
  for (const std::string& piece : pieces) take(p.feed(piece));
  take(p.finish());
  m.malformed = p.malformed();
  return m;
}

std::vector<std::vector<std::string>> cuts(const std::string& text) {
  std::vector<std::vector<std::string>> out = {{text}};
  for (size_t i = 1; i < text.size(); ++i) out.push_back({text.substr(0, i), text.substr(i)});
  std::vector<std::string> bytes;
  for (char c : text) bytes.push_back(std::string(1, c));
  out.push_back(bytes);
  return out;
}

std::string source_dir() {
  if (const char* dir = std::getenv("GANNET_SOURCE_DIR")) return dir;
  return std::filesystem::path(__FILE__).parent_path().parent_path().parent_path().string();
}

TEST(ChatOutputParser, EveryCutEqualsTheOfficialParse) {
  std::ifstream f(source_dir() + "/tests/data/deepseek_v4_chat/dsml_parse.jsonl");
  ASSERT_TRUE(f);
  int checked = 0;
  for (std::string line; std::getline(f, line);) {
    const ojson row = ojson::parse(line);
    if (row.contains("error")) continue;
    SCOPED_TRACE(row["id"].get<std::string>());
    ChatOutputParser::Options o;
    o.dsml = row["version"] == "v4" ? DeepseekVersion::kV4 : DeepseekVersion::kV41;
    o.starts_in_reasoning = row["thinking_mode"] == "thinking";
    // The engine's text stops before the end-of-sentence token.
    std::string text = row["text"];
    const std::string eos = "<｜end▁of▁sentence｜>";
    if (text.ends_with(eos)) text.resize(text.size() - eos.size());
    Message want{row["reasoning_content"], row["content"], {}, {}, false};
    for (const ojson& c : row["tool_calls"]) want.calls.push_back({c["name"], c["arguments_raw"]});
    for (size_t i = 0; i < want.calls.size(); ++i) want.ids.push_back("call_" + std::to_string(i));
    for (const auto& pieces : cuts(text)) ASSERT_EQ(run(o, pieces, true), want) << "cut at " << pieces[0].size();
    ++checked;
  }
  EXPECT_EQ(checked, 12);
}

TEST(ChatOutputParser, ContentThatOnlyLooksLikeABlockIsKept) {
  ChatOutputParser::Options o;
  o.dsml = DeepseekVersion::kV41;
  const std::string text = "a\n\nb\n\n<｜DSM\n\n";
  for (const auto& pieces : cuts(text)) {
    const Message m = run(o, pieces);
    EXPECT_EQ(m.content, text);
    EXPECT_TRUE(m.calls.empty());
  }
  o.dsml.reset();  // no tools in the request: DSML is not looked for
  EXPECT_EQ(run(o, {"x\n\n<｜DSML｜ calls>\n"}).content, "x\n\n<｜DSML｜ calls>\n");
}

TEST(ChatOutputParser, MalformedBlocksBecomeContent) {
  ChatOutputParser::Options o;
  o.dsml = DeepseekVersion::kV41;
  const std::string good =
      "\n\n<｜DSML｜ calls>\n<｜DSML｜ invoke name=\"f\">\n<｜DSML｜ parameter name=\"a\" string=\"false\">1</｜DSML｜ "
      "parameter>\n</｜DSML｜ invoke>\n";
  // A second invoke with a broken header: the first call stands, the rest is content.
  const std::string text = "Hi" + good + "<｜DSML｜ invoke nam=\"g\">\n</｜DSML｜ invoke>\n</｜DSML｜ calls>";
  const Message whole = run(o, {text});
  EXPECT_TRUE(whole.malformed);
  EXPECT_EQ(whole.content, "Hi<｜DSML｜ invoke nam=\"g\">\n</｜DSML｜ invoke>\n</｜DSML｜ calls>");
  ASSERT_EQ(whole.calls.size(), 1u);
  EXPECT_EQ(whole.calls[0].second, "{\"a\": 1}");
  for (const auto& pieces : cuts(text)) {
    Message m = run(o, pieces);
    // Raw DSML may come back only as content of a malformed block.
    EXPECT_EQ(m.calls, whole.calls);
    EXPECT_EQ(m.content, whole.content);
  }
  // Cut off inside a parameter (max_tokens): the open call is closed with what it had,
  // and a call broken after its name went out drops the rest, whatever the cuts.
  for (const auto& pieces : cuts(good + "<｜DSML｜ invoke name=\"g\">\n<｜DSML｜ parameter nam=\"x\">1</｜DSML｜ parameter>\nmore")) {
    const Message m = run(o, pieces);
    EXPECT_EQ(m.content, "");
    ASSERT_EQ(m.calls.size(), 2u);
    EXPECT_EQ(m.calls[1].second, "{}");
  }
  const Message cut = run(o, {good + "<｜DSML｜ invoke name=\"g\">\n<｜DSML｜ parameter name=\"x\" str"});
  EXPECT_FALSE(cut.malformed);  // cut short, not broken
  ASSERT_EQ(cut.calls.size(), 2u);
  EXPECT_EQ(cut.calls[1].second, "{}");
  EXPECT_EQ(cut.content, "");  // the call stands for its text
  // Cut short before a call's header is complete: nothing of it comes out.
  for (const auto& pieces : cuts(good + "<｜DSML｜ invoke name=\"get_ti")) {
    const Message m = run(o, pieces, true);
    EXPECT_EQ(m.content, "");
    EXPECT_EQ(m.calls.size(), 1u);
  }
  // Text after the block.
  const Message after = run(o, {good + "</｜DSML｜ calls>more"});
  EXPECT_TRUE(after.malformed);
  EXPECT_EQ(after.content, "more");
  EXPECT_EQ(after.calls.size(), 1u);
}

TEST(ChatOutputParser, ReasoningThatRunsIntoACallEndsThere) {
  ChatOutputParser::Options o;
  o.dsml = DeepseekVersion::kV4;
  o.starts_in_reasoning = true;
  const std::string text =
      "think\n\n<｜DSML｜tool_calls>\n<｜DSML｜invoke name=\"f\">\n\n</｜DSML｜invoke>\n</｜DSML｜tool_calls>";
  for (const auto& pieces : cuts(text)) {
    const Message m = run(o, pieces, true);
    EXPECT_EQ(m.reasoning, "think");
    EXPECT_EQ(m.content, "");
    ASSERT_EQ(m.calls.size(), 1u);
    EXPECT_EQ(m.calls[0].second, "{}");
    EXPECT_FALSE(m.malformed);
  }
}

}  // namespace
}  // namespace gannet::chat

namespace gannet::chat {
namespace {

// Dense families: what their official templates write for calls (tests/data/
// tool_call_parse/, rendered by transformers) reads back, at every cut.
TEST(ChatOutputParser, DenseFamiliesReadWhatTheirTemplatesWrite) {
  int checked = 0;
  for (const char* name : {"llama3.1", "llama3.2", "qwen2.5", "qwen3"}) {
    std::ifstream f(source_dir() + "/tests/data/tool_call_parse/" + name + ".jsonl");
    ASSERT_TRUE(f) << name;
    for (std::string line; std::getline(f, line);) {
      if (line.empty()) continue;
      const ojson row = ojson::parse(line);
      SCOPED_TRACE(row["id"].get<std::string>());
      ChatOutputParser::Options o;
      const std::string n = name;
      o.json = n.starts_with("qwen") ? ChatOutputParser::Options::Json::kQwen : ChatOutputParser::Options::Json::kLlama;
      o.think_tag = n == "qwen3";
      Message want{"", row["content"], {}, {}, false};
      for (const ojson& c : row["tool_calls"]) want.calls.push_back({c["name"], python_json_dumps(c["arguments"])});
      for (size_t i = 0; i < want.calls.size(); ++i) want.ids.push_back("call_" + std::to_string(i));
      for (const auto& pieces : cuts(row["text"])) ASSERT_EQ(run(o, pieces, true), want) << "cut at " << pieces[0].size();
      ++checked;
    }
  }
  EXPECT_EQ(checked, 22);
}

// DeepSeek V3 and V3.1 calls, in the layout their templates write.
TEST(ChatOutputParser, DeepseekV3Calls) {
  ChatOutputParser::Options o;
  o.json = ChatOutputParser::Options::Json::kDeepseekV3;
  const std::string v3 =
      "Checking.<｜tool▁calls▁begin｜><｜tool▁call▁begin｜>function<｜tool▁sep｜>get_weather\n```json\n{\"city\": "
      "\"Oslo\", \"days\": [1, 2]}\n```<｜tool▁call▁end｜>\n<｜tool▁call▁begin｜>function<｜tool▁sep｜>get_time\n```json\n{}"
      "\n```<｜tool▁call▁end｜><｜tool▁calls▁end｜>";
  const std::string v31 =
      "<｜tool▁calls▁begin｜><｜tool▁call▁begin｜>get_weather<｜tool▁sep｜>{\"city\":\"Rome\"}<｜tool▁call▁end｜>"
      "<｜tool▁calls▁end｜>";
  Message want_v3{"", "Checking.", {{"get_weather", "{\"city\": \"Oslo\", \"days\": [1, 2]}"}, {"get_time", "{}"}},
                  {"call_0", "call_1"}, false};
  Message want_v31{"", "", {{"get_weather", "{\"city\": \"Rome\"}"}}, {"call_0"}, false};
  for (const auto& pieces : cuts(v3)) ASSERT_EQ(run(o, pieces, true), want_v3) << "cut at " << pieces[0].size();
  for (const auto& pieces : cuts(v31)) ASSERT_EQ(run(o, pieces, true), want_v31) << "cut at " << pieces[0].size();
  // Cut short in the second call (V3's one-call template writes no end tag either).
  const Message cut = run(o, {v3.substr(0, v3.find("get_time"))});
  EXPECT_EQ(cut.calls.size(), 1u);
  EXPECT_FALSE(cut.malformed);
  const Message bad = run(o, {"<｜tool▁calls▁begin｜><｜tool▁call▁begin｜>function<｜tool▁sep｜>f\nnot json<｜tool▁call▁end｜>"});
  EXPECT_TRUE(bad.malformed);
  EXPECT_TRUE(bad.calls.empty());
  EXPECT_EQ(bad.content, "<｜tool▁calls▁begin｜><｜tool▁call▁begin｜>function<｜tool▁sep｜>f\nnot json<｜tool▁call▁end｜>");
}

TEST(ChatOutputParser, DenseAnswersThatAreNoCalls) {
  ChatOutputParser::Options o;
  o.json = ChatOutputParser::Options::Json::kLlama;
  for (const std::string text : {"{\"answer\": 42}", "{not json", "plain words {\"name\": \"f\"}"}) {
    const Message m = run(o, {text});
    EXPECT_EQ(m.content, text);
    EXPECT_TRUE(m.calls.empty());
  }
  o.json = ChatOutputParser::Options::Json::kQwen;
  o.think_tag = true;
  for (const auto& pieces : cuts("<think>hmm</think>\n\nNo call.\n\n")) {
    const Message m = run(o, pieces);
    EXPECT_EQ(m.reasoning, "hmm");
    EXPECT_EQ(m.content, "No call.\n\n");
  }
  const Message bad = run(o, {"x\n<tool_call>\n{\"nam\": 1}\n</tool_call>"});
  EXPECT_TRUE(bad.malformed);
  EXPECT_EQ(bad.content, "x<tool_call>\n{\"nam\": 1}\n</tool_call>");
}

}  // namespace
}  // namespace gannet::chat
