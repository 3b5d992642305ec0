// The Engram compressed token map (tokenizer/engram_map.h) of the DeepSeek-V3 tokenizer
// equals the one transformers' deepseek_v41 builds with the tokenizers normalizers
// (tests/golden/engram-map-deepseek-v3.json, tools/make_engram_map_golden.py): every id,
// 98,627 distinct keys over 128,815 tokens.
// labels: exact
#include <gtest/gtest.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>

#include "tokenizer/engram_map.h"
#include "tokenizer/tokenizer.h"

namespace {

std::filesystem::path root() {
  const char* src = std::getenv("GANNET_SOURCE_DIR");
  return std::filesystem::path(src ? src : ".");
}

TEST(TokenizerEngramMap, NormalizationSteps) {
  using gannet::tokenizer::engram_normalize;
  EXPECT_EQ(engram_normalize(" The"), "the");
  EXPECT_EQ(engram_normalize("THE  \t\n cat "), "the cat");
  EXPECT_EQ(engram_normalize("Caf\xc3\xa9"), "cafe");           // accents stripped
  EXPECT_EQ(engram_normalize("\xef\xac\x81"), "fi");            // NFKC: the fi ligature
  EXPECT_EQ(engram_normalize(" "), " ");                        // a lone space survives
  EXPECT_EQ(engram_normalize("\t\n"), " ");                     // ... as does a run of them
  EXPECT_EQ(engram_normalize("\xc2\xa0x\xe3\x80\x80"), "x");    // NBSP, ideographic space: stripped
  EXPECT_EQ(engram_normalize("\xce\xa3"), "\xcf\x83");          // Sigma lowercases to sigma
}

TEST(TokenizerEngramMap, DeepseekV3MatchesTokenizersPipeline) {
  std::ifstream in(root() / "tests" / "golden" / "engram-map-deepseek-v3.json");
  ASSERT_TRUE(in.good());
  std::stringstream ss;
  ss << in.rdbuf();
  const nlohmann::json g = nlohmann::json::parse(ss.str());
  const auto tok = gannet::tokenizer::Tokenizer::from_dir((root() / "assets" / "tokenizers" / "deepseek-v3").string());
  int64_t keys = 0;
  const std::vector<int64_t> map = gannet::tokenizer::engram_compressed_map(tok, &keys);
  const std::vector<int64_t> want = g["map"].get<std::vector<int64_t>>();
  ASSERT_EQ(map.size(), want.size());
  int64_t bad = 0;
  for (size_t i = 0; i < map.size(); ++i)
    if (map[i] != want[i] && bad++ < 10) ADD_FAILURE() << "token " << i << ": " << map[i] << " vs " << want[i];
  EXPECT_EQ(bad, 0);
  EXPECT_EQ(keys, 98627);
  EXPECT_EQ(keys, g["distinct_keys"].get<int64_t>());
}

}  // namespace
