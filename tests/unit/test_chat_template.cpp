// Chat templates rendered by gannet equal transformers' apply_chat_template byte for byte:
// tests/golden/chat_templates/ holds the official templates of Llama 3 / 3.1 / 3.2,
// Qwen 2.5 / 3 and DeepSeek V3 and, per template, 25-33 conversations rendered by
// transformers (tools/make_chat_template_goldens.py), including those it refuses.
// labels: exact
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "core/error.h"
#include "chat/chat_template.h"

namespace gannet::chat {
namespace {

using ojson = nlohmann::ordered_json;

std::string source_dir() {
  if (const char* dir = std::getenv("GANNET_SOURCE_DIR")) return dir;
  return std::filesystem::path(__FILE__).parent_path().parent_path().parent_path().string();
}

ojson read_json(const std::string& path) {
  std::ifstream f(path);
  EXPECT_TRUE(f) << path;
  return ojson::parse(f);
}

class ChatTemplateGolden : public ::testing::TestWithParam<const char*> {};

TEST_P(ChatTemplateGolden, RendersAsTransformers) {
  const std::string dir = source_dir() + "/tests/golden/chat_templates/";
  const ojson spec = read_json(dir + GetParam() + ".json");
  ojson special = ojson::object();
  for (const char* k : {"bos_token", "eos_token"})
    if (spec.contains(k) && spec[k].is_string()) special[k] = spec[k];
  ChatTemplate tmpl(spec["chat_template"].get<std::string>(), special);
  tmpl.set_clock([](const std::string&) -> std::string { throw Error("strftime_now must not be reached: the goldens pass date_string"); });
  std::ifstream f(dir + GetParam() + ".jsonl");
  ASSERT_TRUE(f);
  std::string line;
  int cases = 0, errors = 0;
  while (std::getline(f, line)) {
    const ojson c = ojson::parse(line);
    ++cases;
    ChatOptions o;
    o.add_generation_prompt = c["add_generation_prompt"].get<bool>();
    o.kwargs = c["kwargs"];
    if (c.contains("tools")) o.tools = c["tools"];
    const std::string id = c["id"].get<std::string>();
    if (c.contains("error")) {
      ++errors;
      EXPECT_THROW(tmpl.render(c["messages"], o), Error) << id << ": transformers refused it ("
                                                          << c.value("error_message", "") << ")";
      continue;
    }
    try {
      EXPECT_EQ(tmpl.render(c["messages"], o), c["rendered"].get<std::string>()) << GetParam() << " case " << id;
    } catch (const Error& e) {
      ADD_FAILURE() << GetParam() << " case " << id << " refused: " << e.what();
    }
  }
  EXPECT_GE(cases - errors, 20) << "at least 20 rendered conversations per template";
}

INSTANTIATE_TEST_SUITE_P(Templates, ChatTemplateGolden,
                         ::testing::Values("llama3", "llama3.1", "llama3.2", "qwen2.5", "qwen3", "deepseek-v3"),
                         [](const auto& info) {
                           std::string n = info.param;
                           for (char& ch : n)
                             if (!std::isalnum((unsigned char)ch)) ch = '_';
                           return n;
                         });

TEST(ChatTemplate, FromDirReadsTokenizerConfig) {
  // The DeepSeek-V3 tokenizer_config.json shipped in assets/ carries its template.
  auto t = ChatTemplate::from_dir(source_dir() + "/assets/tokenizers/deepseek-v3");
  ASSERT_TRUE(t.has_value());
  ChatOptions o;
  const ojson msgs = ojson::parse(R"([{"role": "system", "content": "S"}, {"role": "user", "content": "U"}])");
  EXPECT_EQ(t->render(msgs, o), "<｜begin▁of▁sentence｜>S<｜User｜>U<｜Assistant｜>");
  EXPECT_FALSE(ChatTemplate::from_dir(source_dir() + "/tests").has_value());
}

}  // namespace
}  // namespace gannet::chat
