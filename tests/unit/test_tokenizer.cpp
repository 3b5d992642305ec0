// The DeepSeek V3 tokenizer against ids produced by Hugging Face tokenizers
// (tests/data/deepseek-v3-reference-encodings.jsonl), plus decoding, streaming
// detokenization, added tokens, special ids and concurrent use.
// labels: exact
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>
#include <thread>
#include <vector>

#include <nlohmann/json.hpp>
#include <unistd.h>

#include "core/error.h"
#include "tokenizer/incremental_detokenizer.h"
#include "tokenizer/tokenizer.h"
#include "tokenizer/utf8.h"

namespace gannet::tokenizer {
namespace {

std::string source_dir() {
  if (const char* dir = std::getenv("GANNET_SOURCE_DIR")) return dir;
  return std::filesystem::path(__FILE__).parent_path().parent_path().parent_path().string();
}

struct Reference {
  std::string text;
  std::vector<TokenId> ids;
  bool decoded_equals_text;
};

const std::vector<Reference>& references() {
  static const std::vector<Reference> refs = [] {
    std::vector<Reference> out;
    std::ifstream in(source_dir() + "/tests/data/deepseek-v3-reference-encodings.jsonl");
    std::string line;
    while (std::getline(in, line)) {
      if (line.empty()) continue;
      auto j = nlohmann::json::parse(line);
      out.push_back({j["text"], j["ids"].get<std::vector<TokenId>>(), j["decoded_equals_text"]});
    }
    return out;
  }();
  return refs;
}

const Tokenizer& deepseek() {
  static const Tokenizer tok = Tokenizer::from_dir(source_dir() + "/assets/tokenizers/deepseek-v3");
  return tok;
}

TEST(TokenizerDeepSeek, ReferenceFileIsThere) { ASSERT_GE(references().size(), 50u); }

TEST(TokenizerDeepSeek, EncodesEveryReferenceLineExactly) {
  for (size_t i = 0; i < references().size(); ++i) {
    const Reference& r = references()[i];
    EXPECT_EQ(deepseek().encode(r.text), r.ids) << "line " << i + 1 << ": " << r.text.substr(0, 80);
  }
}

TEST(TokenizerDeepSeek, DecodesReferenceIdsBackToText) {
  for (size_t i = 0; i < references().size(); ++i) {
    const Reference& r = references()[i];
    if (r.decoded_equals_text) {
      EXPECT_EQ(deepseek().decode(r.ids), r.text) << "line " << i + 1;
    }
  }
}

TEST(TokenizerDeepSeek, IncrementalDetokenizerMatchesDecodeOneIdAtATime) {
  for (size_t i = 0; i < references().size(); ++i) {
    const Reference& r = references()[i];
    IncrementalDetokenizer detok(deepseek());
    std::string streamed;
    for (TokenId id : r.ids) {
      std::string chunk = detok.push(id);
      EXPECT_TRUE(is_valid_utf8(chunk)) << "line " << i + 1;
      streamed += chunk;
    }
    std::string tail = detok.flush();
    EXPECT_TRUE(is_valid_utf8(tail));
    streamed += tail;
    EXPECT_EQ(streamed, deepseek().decode(r.ids)) << "line " << i + 1;
  }
}

TEST(TokenizerDeepSeek, IncrementalDetokenizerHoldsBackSplitCharacters) {
  // "😀" is four bytes spread over several byte tokens.
  std::vector<TokenId> ids = deepseek().encode("😀");
  ASSERT_GT(ids.size(), 1u);
  IncrementalDetokenizer detok(deepseek());
  std::string out;
  for (size_t k = 0; k + 1 < ids.size(); ++k) out += detok.push(ids[k]);
  EXPECT_EQ(out, "");
  EXPECT_EQ(detok.push(ids.back()), "😀");
  EXPECT_EQ(detok.flush(), "");

  // An unfinished character at the end is flushed as U+FFFD.
  IncrementalDetokenizer cut(deepseek());
  EXPECT_EQ(cut.push(ids[0]), "");
  EXPECT_EQ(cut.flush(), "\xEF\xBF\xBD");
  EXPECT_EQ(cut.flush(), "");
}

TEST(TokenizerDeepSeek, AddedTokensInsideTextAreSingleIds) {
  const Tokenizer& t = deepseek();
  auto bos = t.token_to_id("<｜begin▁of▁sentence｜>");
  ASSERT_TRUE(bos.has_value());
  EXPECT_EQ(*bos, 0);
  std::vector<TokenId> ids = t.encode("a<｜begin▁of▁sentence｜>b<｜User｜>");
  ASSERT_EQ(ids.size(), 4u);
  EXPECT_EQ(ids[1], 0);
  EXPECT_EQ(ids[3], 128803);
  // A broken marker is ordinary text.
  std::vector<TokenId> broken = t.encode("<｜begin▁of▁sentence");
  EXPECT_EQ(std::count(broken.begin(), broken.end(), 0), 0);
}

TEST(TokenizerDeepSeek, SpecialIdsAndAddBos) {
  const Tokenizer& t = deepseek();
  EXPECT_EQ(t.bos_id(), std::optional<TokenId>(0));
  ASSERT_FALSE(t.eos_ids().empty());
  EXPECT_EQ(t.eos_ids()[0], 1);
  EXPECT_TRUE(t.add_bos());
  EXPECT_EQ(t.vocab_size(), 128815u);
  std::vector<TokenId> plain = t.encode("Hello, world!");
  std::vector<TokenId> with_bos = t.encode("Hello, world!", /*add_special_tokens=*/true);
  ASSERT_EQ(with_bos.size(), plain.size() + 1);
  EXPECT_EQ(with_bos[0], 0);
  EXPECT_TRUE(std::equal(plain.begin(), plain.end(), with_bos.begin() + 1));
}

TEST(TokenizerDeepSeek, DecodeSkipsSpecialTokensOnRequest) {
  const Tokenizer& t = deepseek();
  std::vector<TokenId> ids = t.encode("<｜begin▁of▁sentence｜>text<｜end▁of▁sentence｜>");
  EXPECT_EQ(t.decode(ids, /*skip_special_tokens=*/true), "text");
  EXPECT_TRUE(t.is_special(0));
  EXPECT_FALSE(t.is_special(ids[1]));
}

// A tokenizer that marks reasoning and tool-call markup special (as a V4 tokenizer may mark
// ｜DSML｜) still decodes it as text with skip_special_tokens, so the chat layer can read the
// call back and grammars can use the token; real control tokens are still dropped.
TEST(TokenizerDeepSeek, MarkupTokensMarkedSpecialStayText) {
  nlohmann::json j;
  {
    std::ifstream in(source_dir() + "/assets/tokenizers/deepseek-v3/tokenizer.json");
    in >> j;
  }
  const std::vector<std::string> markup = {"｜DSML｜", "<think>", "</think>", "<tool_call>"};
  TokenId next = 128815;
  for (const std::string& m : markup)
    j["added_tokens"].push_back({{"id", next++}, {"content", m}, {"single_word", false}, {"lstrip", false},
                                 {"rstrip", false}, {"normalized", false}, {"special", true}});
  j["added_tokens"].push_back({{"id", next}, {"content", "<｜control｜>"}, {"single_word", false}, {"lstrip", false},
                               {"rstrip", false}, {"normalized", false}, {"special", true}});
  const std::string path = testing::TempDir() + "/markup_tokenizer.json";
  {
    std::ofstream out(path);
    out << j.dump();
  }
  const Tokenizer t = Tokenizer::from_json_file(path);
  const std::string text = "<think>why</think>ok\n\n<｜DSML｜ calls><tool_call><｜control｜><｜end▁of▁sentence｜>";
  const std::vector<TokenId> ids = t.encode(text);
  for (TokenId id = 128815; id < next; ++id) {
    EXPECT_EQ(std::count(ids.begin(), ids.end(), id), 1) << "token " << id << " is one id in the text";
    EXPECT_FALSE(t.is_special(id)) << t.id_to_token(id);
  }
  EXPECT_TRUE(t.is_special(next));
  EXPECT_TRUE(t.is_special(1));
  EXPECT_EQ(t.decode(ids, /*skip_special_tokens=*/true), "<think>why</think>ok\n\n<｜DSML｜ calls><tool_call>");
  std::string streamed;
  IncrementalDetokenizer d(t, /*skip_special_tokens=*/true);
  for (TokenId id : ids) d.push(id, &streamed);
  streamed += d.flush();
  EXPECT_EQ(streamed, "<think>why</think>ok\n\n<｜DSML｜ calls><tool_call>");
}

TEST(TokenizerDeepSeek, TokenLookups) {
  const Tokenizer& t = deepseek();
  EXPECT_EQ(t.id_to_token(19923), "Hello");
  EXPECT_EQ(t.id_to_token(223), " ");                   // "Ġ" decodes to a space
  EXPECT_EQ(t.token_to_id("Ġ"), std::optional<TokenId>(223));
  EXPECT_EQ(t.id_to_token(0), "<｜begin▁of▁sentence｜>");
  EXPECT_FALSE(t.token_to_id("no such token here").has_value());
  EXPECT_THROW(t.id_to_token(-1), Error);
  EXPECT_THROW(t.id_to_token(TokenId(t.vocab_size())), Error);
  std::vector<TokenId> bad{19923, 999999};
  EXPECT_THROW(t.decode(bad), Error);
}

TEST(TokenizerDeepSeek, InvalidUtf8IsEncodedByteForByte) {
  const Tokenizer& t = deepseek();
  const std::string text = "ok \xFF\xFE caf\xC3 \xE4\xB8 end\xF0";
  std::vector<TokenId> ids = t.encode(text);
  std::string bytes;
  for (TokenId id : ids) bytes += t.id_to_token(id);
  EXPECT_EQ(bytes, text);  // nothing lost
  EXPECT_EQ(t.decode(ids), utf8_lossy(text));
  EXPECT_EQ(t.decode(ids), "ok \xEF\xBF\xBD\xEF\xBF\xBD caf\xEF\xBF\xBD \xEF\xBF\xBD end\xEF\xBF\xBD");
}

TEST(TokenizerDeepSeek, EmptyTextHasNoIds) {
  EXPECT_TRUE(deepseek().encode("").empty());
  EXPECT_EQ(deepseek().encode("", true), std::vector<TokenId>{0});
  EXPECT_EQ(deepseek().decode(std::vector<TokenId>{}), "");
}

TEST(TokenizerDeepSeek, ConcurrentEncodeAgreesWithReference) {
  std::vector<std::thread> threads;
  std::vector<int> mismatches(4, 0);
  for (int w = 0; w < 4; ++w) {
    threads.emplace_back([w, &mismatches] {
      for (int rep = 0; rep < 3; ++rep)
        for (size_t i = w; i < references().size() + w; ++i) {
          const Reference& r = references()[i % references().size()];
          if (deepseek().encode(r.text) != r.ids) ++mismatches[w];
        }
    });
  }
  for (auto& th : threads) th.join();
  for (int m : mismatches) EXPECT_EQ(m, 0);
}

TEST(TokenizerDeepSeek, LongRepetitiveInputRoundTrips) {
  std::string text;
  for (int i = 0; i < 2000; ++i) text += "lorem ipsum 123 ∑ 😀\n  ";
  text += std::string(20000, 'a') + std::string(5000, ' ') + "end";
  std::vector<TokenId> ids = deepseek().encode(text);
  EXPECT_EQ(deepseek().decode(ids), text);
}

// A process reuses the tokenizer it parsed last when tokenizer.json's bytes are the same:
// the special tokens still come from each directory's own files, and a changed
// tokenizer.json at the same path is parsed afresh.
TEST(TokenizerDeepSeek, ReusedParseKeepsEachDirectorysSpecialTokensAndSeesChanges) {
  namespace fs = std::filesystem;
  const fs::path src = fs::path(source_dir()) / "assets" / "tokenizers" / "deepseek-v3";
  const fs::path base = fs::temp_directory_path() / ("gannet_tok_reuse_" + std::to_string(::getpid()));
  fs::remove_all(base);
  const fs::path a = base / "a", b = base / "b";
  fs::create_directories(a);
  fs::create_directories(b);
  fs::copy_file(src / "tokenizer.json", a / "tokenizer.json");
  fs::copy_file(src / "tokenizer.json", b / "tokenizer.json");
  auto write = [](const fs::path& p, const std::string& text) { std::ofstream(p) << text; };
  write(a / "tokenizer_config.json", R"({"bos_token": "<｜begin▁of▁sentence｜>", "eos_token": "<｜end▁of▁sentence｜>", "add_bos_token": true})");
  write(b / "tokenizer_config.json", R"({"add_bos_token": false})");
  write(b / "config.json", R"({"eos_token_id": [7, 9]})");
  const Tokenizer ta = Tokenizer::from_dir(a.string());
  const Tokenizer tb = Tokenizer::from_dir(b.string());
  const Tokenizer ta2 = Tokenizer::from_dir(a.string());
  EXPECT_EQ(ta.bos_id(), std::optional<TokenId>(0));
  EXPECT_EQ(ta.eos_ids(), std::vector<TokenId>({1}));
  EXPECT_TRUE(ta.add_bos());
  EXPECT_EQ(tb.bos_id(), std::nullopt);
  EXPECT_EQ(tb.eos_ids(), std::vector<TokenId>({7, 9}));
  EXPECT_FALSE(tb.add_bos());
  EXPECT_EQ(ta2.eos_ids(), ta.eos_ids());
  EXPECT_TRUE(ta2.add_bos());
  EXPECT_EQ(ta.encode("Hello, world!"), tb.encode("Hello, world!"));
  // Change the file in place: a vocabulary entry renamed is seen by the next load.
  nlohmann::json j = nlohmann::json::parse(std::ifstream(a / "tokenizer.json"));
  const std::string word = "Hello";
  ASSERT_TRUE(j["model"]["vocab"].contains(word));
  const TokenId id = ta.token_to_id(word).value();
  j["model"]["vocab"].erase(word);
  j["model"]["vocab"]["Hellx"] = id;
  nlohmann::json merges = nlohmann::json::array();
  for (const auto& m : j["model"]["merges"]) {  // drop the merges that make or use "Hello"
    const std::string s = m.is_string() ? m.get<std::string>() : m[0].get<std::string>() + " " + m[1].get<std::string>();
    const size_t sp = s.find(' ');
    if (s.substr(0, sp) + s.substr(sp + 1) == word || s.substr(0, sp) == word || s.substr(sp + 1) == word) continue;
    merges.push_back(m);
  }
  j["model"]["merges"] = merges;
  std::ofstream(a / "tokenizer.json") << j.dump();
  const Tokenizer changed = Tokenizer::from_dir(a.string());
  EXPECT_FALSE(changed.token_to_id(word).has_value());
  EXPECT_EQ(changed.token_to_id("Hellx"), std::optional<TokenId>(id));
  EXPECT_EQ(ta.token_to_id(word), std::optional<TokenId>(id));  // the handle loaded before is unchanged
  fs::remove_all(base);
}


}  // namespace
}  // namespace gannet::tokenizer
