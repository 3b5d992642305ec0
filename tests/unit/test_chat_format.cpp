// The server's chat format choice and the reasoning / answer split of DeepSeek-V4 outputs.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>

#include "core/error.h"
#include "chat/chat_format.h"

namespace gannet::chat {
namespace {

// Every way of cutting `text` into pieces gives the same reasoning and answer as one
// piece: the split must not depend on how the engine's deltas fall.
TEST(ReasoningSplitter, SplitDoesNotDependOnPieces) {
  const std::string texts[] = {"think hard</think>The answer", "</think>x", "no end at all", "a</thi", "a</think>",
                               "<</think></think>b", "x</think"};
  for (const std::string& text : texts) {
    std::string r1, c1;
    ReasoningSplitter whole(true);
    whole.feed(text, r1, c1);
    whole.finish(r1, c1);
    for (size_t cut1 = 0; cut1 <= text.size(); ++cut1)
      for (size_t cut2 = cut1; cut2 <= text.size(); ++cut2) {
        std::string r, c;
        ReasoningSplitter s(true);
        s.feed(text.substr(0, cut1), r, c);
        s.feed(text.substr(cut1, cut2 - cut1), r, c);
        s.feed(text.substr(cut2), r, c);
        s.finish(r, c);
        EXPECT_EQ(r, r1) << text << " cut at " << cut1 << "," << cut2;
        EXPECT_EQ(c, c1) << text << " cut at " << cut1 << "," << cut2;
      }
  }
  std::string r, c;
  ReasoningSplitter s(true);
  s.feed("step one</think>Paris", r, c);
  EXPECT_EQ(r, "step one");
  EXPECT_EQ(c, "Paris");
  EXPECT_FALSE(s.in_reasoning());
  std::string r2, c2;
  ReasoningSplitter off(false);
  off.feed("plain </think> text", r2, c2);
  EXPECT_EQ(r2, "");
  EXPECT_EQ(c2, "plain </think> text");
}

TEST(ChatFormat, BuiltInDeepSeekV4ForV4CheckpointsWithoutATemplate) {
  const auto dir = std::filesystem::temp_directory_path() / "gannet_chat_format_v4";
  std::filesystem::create_directories(dir);
  std::ofstream(dir / "config.json") << R"({"architectures": ["DeepseekV41ForCausalLM"]})";
  ChatFormat f = ChatFormat::load(dir.string(), "");
  ASSERT_TRUE(f.available());
  const nlohmann::ordered_json msgs = nlohmann::ordered_json::parse(R"([{"role": "user", "content": "Q"}])");
  bool reasoning = true;
  chat::ChatOptions o;
  EXPECT_EQ(f.render(msgs, o, &reasoning), "<｜begin▁of▁sentence｜><｜User｜>Q<｜Assistant｜></think>");
  EXPECT_FALSE(reasoning);
  o.kwargs = {{"thinking", true}};
  EXPECT_EQ(f.render(msgs, o, &reasoning),
            "<｜begin▁of▁sentence｜><｜System｜>Reasoning Effort: 75 (range 1-100, the higher the value, the more "
            "thorough the reasoning)\n\n<｜User｜>Q<｜Assistant｜><think>");
  EXPECT_TRUE(reasoning);

  std::ofstream(dir / "config.json") << R"({"architectures": ["LlamaForCausalLM"]})";
  ChatFormat none = ChatFormat::load(dir.string(), "");
  EXPECT_FALSE(none.available());
  EXPECT_THROW(none.render(msgs, o, nullptr), Error);

  std::ofstream(dir / "t.jinja") << "{% for m in messages %}[{{ m.role }}:{{ m.content }}]{% endfor %}";
  ChatFormat file = ChatFormat::load(dir.string(), (dir / "t.jinja").string());
  EXPECT_EQ(file.render(msgs, chat::ChatOptions{}, nullptr), "[user:Q]");
  std::ofstream(dir / "bad.jinja") << "{% if %}";
  EXPECT_THROW(ChatFormat::load(dir.string(), (dir / "bad.jinja").string()), Error);
  EXPECT_THROW(ChatFormat::load(dir.string(), (dir / "missing.jinja").string()), Error);
  std::filesystem::remove_all(dir);
}

}  // namespace
}  // namespace gannet::chat
