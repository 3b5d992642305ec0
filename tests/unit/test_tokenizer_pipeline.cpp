// The tokenizer's stages on small hand-written inputs: Split behaviors, the GPT-2 regex,
// Oniguruma-compatible classes, NFC, UTF-8 repair, a complete tokenizer.json written to a
// temp folder (merges in both formats, added tokens, special ids) and the errors that
// broken files get. Expected ids were checked against Hugging Face tokenizers.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>
#include <unistd.h>

#include "core/error.h"
#include "tokenizer/byte_level.h"
#include "tokenizer/nfc.h"
#include "tokenizer/onig_syntax.h"
#include "tokenizer/pre_tokenizer.h"
#include "tokenizer/regex.h"
#include "tokenizer/tokenizer.h"
#include "tokenizer/utf8.h"

namespace gannet::tokenizer {
namespace {

using json = nlohmann::json;
using Ids = std::vector<TokenId>;
using Pieces = std::vector<std::string>;

Pieces pre_tokenize(const json& pre, const std::string& text) {
  Pieces out;
  PreTokenizer::from_json(pre).split(text, out);
  return out;
}

json split(const std::string& behavior, bool invert = false) {
  return {{"type", "Split"}, {"pattern", {{"String", "-"}}}, {"behavior", behavior}, {"invert", invert}};
}

TEST(TokenizerPreTokenizer, SplitBehaviors) {
  const std::string text = "the-final--countdown";
  EXPECT_EQ(pre_tokenize(split("Removed"), text), (Pieces{"the", "final", "countdown"}));
  EXPECT_EQ(pre_tokenize(split("Isolated"), text), (Pieces{"the", "-", "final", "-", "-", "countdown"}));
  EXPECT_EQ(pre_tokenize(split("MergedWithPrevious"), text), (Pieces{"the-", "final-", "-", "countdown"}));
  EXPECT_EQ(pre_tokenize(split("MergedWithNext"), text), (Pieces{"the", "-final", "-", "-countdown"}));
  EXPECT_EQ(pre_tokenize(split("Contiguous"), text), (Pieces{"the", "-", "final", "--", "countdown"}));
  EXPECT_EQ(pre_tokenize(split("Removed", /*invert=*/true), text), (Pieces{"-", "-", "-"}));
}

TEST(TokenizerPreTokenizer, SequenceAppliesEachStepToEveryPiece) {
  json pre = {{"type", "Sequence"},
              {"pretokenizers",
               {{{"type", "Split"}, {"pattern", {{"Regex", "\\s+"}}}, {"behavior", "Removed"}, {"invert", false}},
                {{"type", "Digits"}, {"individual_digits", true}}}}};
  EXPECT_EQ(pre_tokenize(pre, "ab12 c3"), (Pieces{"ab", "1", "2", "c", "3"}));
}

TEST(TokenizerPreTokenizer, ByteLevelUsesTheGpt2Pattern) {
  json bl = {{"type", "ByteLevel"}, {"add_prefix_space", false}, {"use_regex", true}};
  EXPECT_EQ(pre_tokenize(bl, "I'm  fine!!\n"), (Pieces{"I", "'m", " ", " fine", "!!", "\n"}));
  EXPECT_EQ(pre_tokenize(bl, "x  \t "), (Pieces{"x", "  \t "}));  // \s+(?!\S) at the end
  bl["add_prefix_space"] = true;
  EXPECT_EQ(pre_tokenize(bl, "Hi 42"), (Pieces{" Hi", " 42"}));
  bl["use_regex"] = false;
  EXPECT_EQ(pre_tokenize(bl, "Hi 42"), (Pieces{" Hi 42"}));
}

TEST(TokenizerRegex, OnigurumaShorthandClasses) {
  // Oniguruma's \s does not include U+180E; PCRE2's own \s would.
  Regex space("\\s");
  size_t b, e;
  EXPECT_FALSE(space.search("\xE1\xA0\x8E", 0, b, e));
  EXPECT_TRUE(space.search("\xE3\x80\x80", 0, b, e));  // U+3000
  EXPECT_EQ(onig_to_pcre2("[^\\s\\p{L}]\\S"), "[^\\t-\\r\\x{20}\\x{85}\\p{Z}\\p{L}][^\\t-\\r\\x{20}\\x{85}\\p{Z}]");
  EXPECT_EQ(onig_to_pcre2("[]\\s]"), "[]\\t-\\r\\x{20}\\x{85}\\p{Z}]");
  EXPECT_EQ(onig_to_pcre2("\\p{N}{1,3}"), "\\p{N}{1,3}");
  EXPECT_TRUE(Regex("\\w").search("\xCC\x81", 0, b, e));   // a combining mark is a word character
  EXPECT_FALSE(Regex("\\w").search("\xE2\x91\xA0", 0, b, e));  // ① is not
  EXPECT_TRUE(Regex("^\\h+$").search("c0FFee", 0, b, e));  // \h is a hex digit
}

TEST(TokenizerRegex, FindMatchesReportsEmptyMatchesLikeOniguruma) {
  std::vector<Span> spans;
  Regex("x*").find_matches("axb", spans);
  // "" at 0, gap "a", "x", gap "b", "" at 3; none right after the "x" match, which is
  // where the previous match ended.
  ASSERT_EQ(spans.size(), 5u);
  EXPECT_TRUE(spans[0].is_match && spans[0].begin == 0 && spans[0].end == 0);
  EXPECT_TRUE(!spans[1].is_match && spans[1].end == 1);
  EXPECT_TRUE(spans[2].is_match && spans[2].begin == 1 && spans[2].end == 2);
  EXPECT_TRUE(!spans[3].is_match && spans[3].end == 3);
  EXPECT_TRUE(spans[4].is_match && spans[4].begin == 3 && spans[4].end == 3);
}

TEST(TokenizerUnicode, Nfc) {
  EXPECT_EQ(nfc("e\xCC\x81"), "\xC3\xA9");                        // e + acute -> é
  EXPECT_EQ(nfc("\xE1\x84\x80\xE1\x85\xA1\xE1\x86\xA8"), "\xEA\xB0\x81");  // Hangul L V T -> 각
  EXPECT_EQ(nfc("a\xCC\x81\xCC\xA3"), "\xE1\xBA\xA1\xCC\x81");    // marks reordered, ạ + acute
  EXPECT_EQ(nfc("\xE2\x84\xAB"), "\xC3\x85");                     // Angstrom sign -> Å
  EXPECT_EQ(nfc("plain ascii"), "plain ascii");
  EXPECT_EQ(nfc("\xFF" "e\xCC\x81"), "\xFF\xC3\xA9");  // ill-formed bytes pass through
}

TEST(TokenizerUnicode, LossyRepairMatchesRust) {
  EXPECT_EQ(utf8_lossy("ok"), "ok");
  // One U+FFFD per maximal ill-formed subpart: E2 82 (cut short) is one, FF is one.
  EXPECT_EQ(utf8_lossy("a\xE2\x82" "b\xFF"), "a\xEF\xBF\xBD" "b\xEF\xBF\xBD");
  EXPECT_EQ(utf8_lossy("\xED\xA0\x80"), "\xEF\xBF\xBD\xEF\xBF\xBD\xEF\xBF\xBD");  // a surrogate
  EXPECT_EQ(utf8_lossy("\xF0\x9F\x98"), "\xEF\xBF\xBD");
}

TEST(TokenizerUnicode, ByteLevelMapRoundTrips) {
  EXPECT_EQ(to_byte_level(" \n"), "\xC4\xA0\xC4\x8A");  // "ĠĊ"
  std::string all;
  for (int b = 0; b < 256; ++b) all += char(b);
  EXPECT_EQ(from_byte_level(to_byte_level(all)), all);
  EXPECT_FALSE(from_byte_level("\xE4\xB8\xAD").has_value());  // 中 is no byte character
}

// A complete little byte-level tokenizer: bytes are ids 0-255, six merges ("a b" strings,
// or ["a", "b"] pairs as newer files write them), three added tokens, NFC, a "|"
// separator that is removed.
json small_tokenizer_json(bool pair_merges = false) {
  json vocab = json::object();
  for (int b = 0; b < 256; ++b) vocab[to_byte_level(std::string(1, char(b)))] = b;
  const char* merged[] = {"Ġt", "he", "Ġthe", "ll", "hell", "hello"};
  for (int i = 0; i < 6; ++i) vocab[merged[i]] = 256 + i;
  json merges = {"Ġ t", "h e", "Ġt he", "l l", "he ll", "hell o"};
  if (pair_merges) {
    merges = json::array();  // a braced list of string pairs would become an object
    for (const auto& [a, b] : std::vector<std::pair<std::string, std::string>>{
             {"Ġ", "t"}, {"h", "e"}, {"Ġt", "he"}, {"l", "l"}, {"he", "ll"}, {"hell", "o"}})
      merges.push_back(json::array({a, b}));
  }
  json added = {
      {{"id", 262}, {"content", "<|end|>"}, {"special", true}, {"normalized", false}},
      {{"id", 263}, {"content", "[X]"}, {"special", false}, {"normalized", true}, {"lstrip", true}},
      {{"id", 264}, {"content", "<s>"}, {"special", true}, {"normalized", false}}};
  json pre = {{"type", "Sequence"},
              {"pretokenizers",
               {{{"type", "Split"}, {"pattern", {{"String", "|"}}}, {"behavior", "Removed"}, {"invert", false}},
                {{"type", "ByteLevel"}, {"add_prefix_space", false}, {"use_regex", true}}}}};
  return {{"version", "1.0"},
          {"added_tokens", added},
          {"normalizer", {{"type", "Sequence"}, {"normalizers", {{{"type", "NFC"}}}}}},
          {"pre_tokenizer", pre},
          {"post_processor", nullptr},
          {"decoder", {{"type", "ByteLevel"}}},
          {"model", {{"type", "BPE"}, {"vocab", vocab}, {"merges", merges}}}};
}

class TempDir {
 public:
  TempDir() {
    static int n = 0;
    path_ = std::filesystem::temp_directory_path() /
            ("gannet_tok_" + std::to_string(::getpid()) + "_" + std::to_string(n++));
    std::filesystem::create_directories(path_);
  }
  ~TempDir() { std::filesystem::remove_all(path_); }
  std::string path() const { return path_.string(); }
  std::string write(const std::string& name, const std::string& text) const {
    std::ofstream(path_ / name) << text;
    return (path_ / name).string();
  }

 private:
  std::filesystem::path path_;
};

TEST(TokenizerSmall, EncodesWithRankedMergesInBothFormats) {
  for (bool pairs : {false, true}) {
    SCOPED_TRACE(pairs ? "pair merges" : "string merges");
    TempDir dir;
    dir.write("tokenizer.json", small_tokenizer_json(pairs).dump());
    Tokenizer t = Tokenizer::from_dir(dir.path());
    EXPECT_EQ(t.vocab_size(), 265u);
    EXPECT_EQ(t.encode("hello the"), (Ids{261, 258}));
    EXPECT_EQ(t.encode("the"), (Ids{'t', 257}));  // no "t he" merge
    EXPECT_EQ(t.encode("hello|the"), (Ids{261, 't', 257}));
    EXPECT_EQ(t.decode(Ids{261, 258}), "hello the");
    EXPECT_EQ(t.token_to_id("Ġthe"), std::optional<TokenId>(258));
    EXPECT_EQ(t.id_to_token(258), " the");
  }
}

TEST(TokenizerSmall, AddedTokenIdsFollowHuggingFace) {
  // The library ignores written ids: a content already in the vocabulary takes its id,
  // a new one the next free id after the vocabulary.
  TempDir dir;
  json tj = small_tokenizer_json();
  tj["added_tokens"].push_back({{"id", 999}, {"content", "hello"}, {"special", false}});
  tj["added_tokens"].push_back({{"id", 5}, {"content", "<new>"}, {"special", true}});
  dir.write("tokenizer.json", tj.dump());
  Tokenizer t = Tokenizer::from_dir(dir.path());
  EXPECT_EQ(t.token_to_id("hello"), std::optional<TokenId>(261));
  EXPECT_EQ(t.token_to_id("<new>"), std::optional<TokenId>(265));
  EXPECT_EQ(t.vocab_size(), 266u);
}

TEST(TokenizerSmall, AddedTokensAndNormalization) {
  TempDir dir;
  dir.write("tokenizer.json", small_tokenizer_json().dump());
  Tokenizer t = Tokenizer::from_dir(dir.path());
  EXPECT_EQ(t.encode("x<|end|>y"), (Ids{'x', 262, 'y'}));
  EXPECT_EQ(t.encode("a  [X]b"), (Ids{'a', 263, 'b'}));  // lstrip takes the spaces
  EXPECT_EQ(t.encode("he\xCC\x81"), (Ids{'h', 0xC3, 0xA9}));  // NFC first: "hé"
  EXPECT_EQ(t.encode("h\xC3\xA9"), t.encode("he\xCC\x81"));
  EXPECT_EQ(t.decode(Ids{'x', 262, 'y'}, /*skip_special_tokens=*/true), "xy");
  EXPECT_EQ(t.decode(Ids{'x', 263, 'y'}, /*skip_special_tokens=*/true), "x[X]y");
  EXPECT_FALSE(t.bos_id().has_value());
  EXPECT_FALSE(t.add_bos());
  EXPECT_TRUE(t.eos_ids().empty());
}

TEST(TokenizerSmall, SpecialIdsFromConfigFiles) {
  TempDir dir;
  dir.write("tokenizer.json", small_tokenizer_json().dump());
  dir.write("tokenizer_config.json",
            R"({"bos_token": {"content": "<s>"}, "eos_token": "<|end|>", "add_bos_token": true})");
  dir.write("generation_config.json", R"({"bos_token_id": 1, "eos_token_id": [262, 264]})");
  dir.write("config.json", R"({"eos_token_id": 5})");
  Tokenizer t = Tokenizer::from_dir(dir.path());
  EXPECT_EQ(t.bos_id(), std::optional<TokenId>(264));  // tokenizer_config wins
  EXPECT_EQ(t.eos_ids(), (Ids{262, 264}));             // config.json is only a fallback
  EXPECT_TRUE(t.add_bos());
  EXPECT_EQ(t.encode("the", true), (Ids{264, 't', 257}));
  EXPECT_EQ(t.encode("the", false), (Ids{'t', 257}));
}

TEST(TokenizerSmall, AddBosFromPostProcessorTemplate) {
  TempDir dir;
  json tj = small_tokenizer_json();
  tj["post_processor"] = {
      {"type", "TemplateProcessing"},
      {"single", {{{"SpecialToken", {{"id", "<s>"}, {"type_id", 0}}}}, {{"Sequence", {{"id", "A"}, {"type_id", 0}}}}}}};
  dir.write("tokenizer.json", tj.dump());
  dir.write("config.json", R"({"bos_token_id": 264, "eos_token_id": 262})");
  Tokenizer t = Tokenizer::from_json_file(dir.path() + "/tokenizer.json");
  EXPECT_EQ(t.bos_id(), std::optional<TokenId>(264));
  EXPECT_EQ(t.eos_ids(), (Ids{262}));
  EXPECT_TRUE(t.add_bos());
}

// Loading `tj` must fail with a message holding `file` and `problem`.
void expect_load_error(const json& tj, const std::string& problem) {
  TempDir dir;
  std::string path = dir.write("tokenizer.json", tj.dump());
  try {
    Tokenizer::from_json_file(path);
    ADD_FAILURE() << "no error for: " << problem;
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find(path), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find(problem), std::string::npos) << e.what();
  }
}

TEST(TokenizerErrors, BrokenTokenizerJsonNamesFileAndProblem) {
  json tj = small_tokenizer_json();
  json bad = tj;
  bad["model"]["type"] = "WordPiece";
  expect_load_error(bad, "\"WordPiece\" is unsupported");
  bad = tj;
  bad["model"].erase("vocab");
  expect_load_error(bad, "missing \"vocab\"");
  bad = tj;
  bad["pre_tokenizer"]["pretokenizers"][0]["pattern"] = {{"Regex", "(unclosed"}};
  expect_load_error(bad, "bad regex '(unclosed'");
  bad = tj;
  bad["model"]["merges"].push_back("q zz");
  expect_load_error(bad, "\"zz\", which is not in the vocabulary");
  bad = tj;
  bad["model"]["merges"].push_back("a b c");
  expect_load_error(bad, "not two tokens separated by one space");
  bad = tj;
  bad["normalizer"] = {{"type", "NFKC"}};
  expect_load_error(bad, "normalizer: type \"NFKC\" is unsupported");
  bad = tj;
  bad["pre_tokenizer"] = {{"type", "Metaspace"}};
  expect_load_error(bad, "\"Metaspace\" is unsupported");
  bad = tj;
  bad["pre_tokenizer"]["pretokenizers"][0]["behavior"] = "Sideways";
  expect_load_error(bad, "behavior \"Sideways\" is unknown");
  bad = tj;
  bad["decoder"] = {{"type", "WordPiece"}};
  expect_load_error(bad, "decoder: type \"WordPiece\" is unsupported");
  bad = tj;
  bad.erase("model");
  expect_load_error(bad, "missing \"model\"");
  bad = tj;
  bad["added_tokens"][1].erase("content");
  expect_load_error(bad, "added_tokens[1]: needs a string \"content\"");
}

TEST(TokenizerErrors, MissingOrUnparsableFiles) {
  TempDir dir;
  EXPECT_THROW(Tokenizer::from_dir(dir.path() + "/nope"), Error);
  try {
    Tokenizer::from_dir(dir.path());
    ADD_FAILURE();
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("tokenizer.json: cannot open"), std::string::npos) << e.what();
  }
  std::string path = dir.write("tokenizer.json", "{\"model\": ");
  try {
    Tokenizer::from_json_file(path);
    ADD_FAILURE();
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find(path + ": invalid JSON"), std::string::npos) << e.what();
  }
}

TEST(TokenizerErrors, BadSpecialTokenConfigNamesTheFile) {
  TempDir dir;
  dir.write("tokenizer.json", small_tokenizer_json().dump());
  dir.write("tokenizer_config.json", R"({"bos_token": "<missing>"})");
  try {
    Tokenizer::from_dir(dir.path());
    ADD_FAILURE();
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("tokenizer_config.json: bos_token \"<missing>\""), std::string::npos)
        << e.what();
  }
  dir.write("tokenizer_config.json", "{}");
  dir.write("generation_config.json", R"({"eos_token_id": [1, 99999]})");
  try {
    Tokenizer::from_dir(dir.path());
    ADD_FAILURE();
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("generation_config.json: \"eos_token_id\" has 99999"), std::string::npos)
        << e.what();
  }
}

}  // namespace
}  // namespace gannet::tokenizer
