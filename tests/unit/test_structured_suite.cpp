// The JSON Schema suite (tests/data/json_schema_suite.jsonl, made and checked against the
// `jsonschema` package by tools/make_json_schema_suite.py): per schema, every valid
// document is accepted byte by byte and ends complete; every invalid one is refused at
// exactly its first bad byte (bad_at), or, when every byte continues a valid prefix
// (bad_at null), cannot end. With the DeepSeek-V3 vocabulary, each valid document's
// tokens are in the masks along the way, and those masks (from the classifications of
// wide sets) equal the plain trie walk's bit for bit; rolling back and replaying lands on
// the same masks; documents sampled from the masks parse as JSON. Half the schemas'
// automata are precomputed first, as the engine compiles them (Automaton::precompute):
// their masks must equal the plain walk's too.
// sanitized build: -O1
#include <gtest/gtest.h>

#include <cstdlib>
#include <fstream>
#include <nlohmann/json.hpp>
#include <random>

#include "structured/gbnf.h"
#include "structured/json_schema.h"
#include "structured/matcher.h"
#include "structured_vocab.h"
#include "tokenizer/tokenizer.h"

using namespace gannet;
using namespace gannet::structured;
using gannet::structured::test::bytes_vocab;

namespace {

std::string source_dir() {
  const char* d = std::getenv("GANNET_SOURCE_DIR");
  return d ? d : ".";
}

struct Entry {
  std::string name;
  std::string schema;
  std::vector<std::string> valid;
  std::vector<std::pair<std::string, std::optional<size_t>>> invalid;
};

const std::vector<Entry>& suite() {
  static const std::vector<Entry> s = [] {
    std::ifstream in(source_dir() + "/tests/data/json_schema_suite.jsonl");
    EXPECT_TRUE(in) << "tests/data/json_schema_suite.jsonl";
    std::vector<Entry> out;
    std::string line;
    while (std::getline(in, line)) {
      if (line.empty()) continue;
      const auto j = nlohmann::ordered_json::parse(line);
      Entry e;
      e.name = j["name"];
      e.schema = j["schema"].dump();
      for (const auto& d : j["valid"]) e.valid.push_back(d);
      for (const auto& d : j["invalid"])
        e.invalid.push_back({d["doc"], d["bad_at"].is_null() ? std::nullopt : std::optional<size_t>(d["bad_at"].get<size_t>())});
      out.push_back(e);
    }
    return out;
  }();
  return s;
}

struct DeepSeek {
  std::unique_ptr<tokenizer::Tokenizer> tok;
  std::shared_ptr<const TokenVocab> vocab;
};

const DeepSeek& deepseek() {
  static const DeepSeek d = [] {
    DeepSeek x;
    x.tok = std::make_unique<tokenizer::Tokenizer>(
        tokenizer::Tokenizer::from_json_file(source_dir() + "/assets/tokenizers/deepseek-v3/tokenizer.json"));
    std::vector<std::string> bytes(129280);
    for (int32_t t = 0; t < int32_t(x.tok->vocab_size()); ++t)
      if (!x.tok->is_special(t)) bytes[size_t(t)] = x.tok->id_to_token(t);
    x.vocab = std::make_shared<const TokenVocab>(std::move(bytes), x.tok->eos_ids());
    return x;
  }();
  return d;
}

bool has(const std::vector<uint32_t>& m, int32_t t) { return (m[size_t(t) / 32] >> (t % 32)) & 1u; }

}  // namespace

TEST(StructuredSuite, ValidAcceptedInvalidRefusedAtTheFirstBadByte) {
  ASSERT_GE(suite().size(), 100u);
  size_t n_valid = 0, n_invalid = 0;
  for (const Entry& e : suite()) {
    auto a = std::make_shared<Automaton>(std::make_shared<const Grammar>(compile_json_schema(e.schema)), bytes_vocab());
    for (const std::string& d : e.valid) {
      Matcher m(a, 0);
      EXPECT_TRUE(m.accept_bytes(d) && m.can_end()) << e.name << ": " << d;
      ++n_valid;
    }
    for (const auto& [d, bad_at] : e.invalid) {
      Matcher m(a, 0);
      size_t i = 0;
      while (i < d.size() && m.accept_bytes(std::string_view(d).substr(i, 1))) ++i;
      if (bad_at) {
        EXPECT_EQ(i, *bad_at) << e.name << ": " << d;
      } else {
        EXPECT_EQ(i, d.size()) << e.name << ": " << d;
        EXPECT_FALSE(m.can_end()) << e.name << ": " << d;
      }
      ++n_invalid;
    }
  }
  EXPECT_GE(n_valid, 300u);
  EXPECT_GE(n_invalid, 300u);
}

TEST(StructuredSuite, TokenMasksHoldTheDocumentsAndEqualThePlainWalk) {
  const DeepSeek& ds = deepseek();
  const int32_t eos = ds.tok->eos_ids().front();
  std::vector<uint32_t> fast(size_t((ds.vocab->size() + 31) / 32)), plain(fast.size());
  size_t checked = 0, precomputed = 0, index = 0;
  for (const Entry& e : suite()) {
    auto g = std::make_shared<const Grammar>(compile_json_schema(e.schema));
    auto a = std::make_shared<Automaton>(g, ds.vocab);
    auto b = std::make_shared<Automaton>(g, ds.vocab);  // masks by the plain walk
    b->set_reference(true);
    EXPECT_EQ(b->precompute(), 0) << "the reference learns lazily";
    if (index++ % 2 == 0) {  // what precompute learns must not change a mask
      const int64_t sets = a->precompute(256, 1e9);
      EXPECT_GE(sets, 1) << e.name;
      precomputed += sets > 1;
    }
    for (const std::string& d : e.valid) {
      const std::vector<int32_t> ids = ds.tok->encode(d);
      Matcher m(a, 64), p(b, 64);
      for (size_t k = 0; k <= ids.size(); ++k) {
        m.fill_next_token_bitmask(fast);
        p.fill_next_token_bitmask(plain);
        ASSERT_EQ(fast, plain) << e.name << ": " << d << " after " << k << " tokens";
        ++checked;
        const int32_t t = k < ids.size() ? ids[k] : eos;
        ASSERT_TRUE(has(fast, t)) << e.name << ": " << d << " token " << k;
        ASSERT_TRUE(m.accept_token(t) && p.accept_token(t));
      }
      EXPECT_TRUE(m.is_terminated());
    }
  }
  EXPECT_GE(checked, 5000u);
  EXPECT_GE(precomputed, suite().size() / 4) << "schemas whose precompute went past the start";
}

TEST(StructuredSuite, RollbackEqualsReplayAndSamplesParse) {
  const DeepSeek& ds = deepseek();
  std::mt19937 rng(5);
  std::vector<uint32_t> mask(size_t((ds.vocab->size() + 31) / 32)), again(mask.size());
  int parsed = 0, sampled = 0;
  for (size_t s = 0; s < suite().size(); s += 3) {
    const Entry& e = suite()[s];
    auto a = std::make_shared<Automaton>(std::make_shared<const Grammar>(compile_json_schema(e.schema)), ds.vocab);
    // Rollback: take back k tokens at random points; the masks equal a fresh replay's.
    const std::vector<int32_t> ids = ds.tok->encode(e.valid[0]);
    Matcher m(a, 8);
    for (size_t k = 0; k < ids.size(); ++k) {
      ASSERT_TRUE(m.accept_token(ids[k]));
      if (rng() % 3 == 0) {
        const int back = int(std::min<size_t>(k + 1, 1 + rng() % 8));
        m.rollback(back);
        for (size_t j = k + 1 - size_t(back); j <= k; ++j) ASSERT_TRUE(m.accept_token(ids[j]));
      }
      Matcher r(a, 0);
      for (size_t j = 0; j <= k; ++j) ASSERT_TRUE(r.accept_token(ids[j]));
      m.fill_next_token_bitmask(mask);
      r.fill_next_token_bitmask(again);
      ASSERT_EQ(mask, again) << e.name << " after " << k + 1 << " tokens";
    }
    // Random walk: draw uniformly among allowed tokens (EOS when it is allowed and a coin
    // says so); a finished document parses.
    Matcher w(a, 0);
    std::string doc;
    for (int step = 0; step < 200 && !w.is_terminated(); ++step) {
      w.fill_next_token_bitmask(mask);
      std::vector<int32_t> allowed;
      for (int32_t t = 0; t < int32_t(ds.vocab->size()); ++t)
        if (has(mask, t)) allowed.push_back(t);
      ASSERT_FALSE(allowed.empty()) << e.name << ": dead end after '" << doc << "'";
      int32_t t = allowed[rng() % allowed.size()];
      if (has(mask, ds.tok->eos_ids().front()) && rng() % 2 == 0) t = ds.tok->eos_ids().front();
      ASSERT_TRUE(w.accept_token(t));
      if (!w.is_terminated()) doc += ds.vocab->bytes(t);
    }
    ++sampled;
    if (w.is_terminated()) {
      EXPECT_TRUE(nlohmann::json::accept(doc)) << e.name << ": " << doc;
      ++parsed;
    }
  }
  EXPECT_GE(parsed, sampled / 4);
}

// Counted repetitions (mandatory copies, optional chains, exact counts, unbounded tails,
// a repetition entered again from the same place, elements of several lengths, counts
// inside counts) have their masks cut from one classification per inner (and per long
// tokens' class): along documents and random walks they equal the plain walk bit for bit.
TEST(StructuredSuite, CountedRepetitionMasksEqualThePlainWalk) {
  const DeepSeek& ds = deepseek();
  const int32_t eos = ds.tok->eos_ids().front();
  struct Case {
    const char* gbnf;
    std::vector<std::string> docs;
  };
  const std::vector<Case> cases = {
      {R"(root ::= "\"" [a-zA-Z0-9_]{8,24} "\"")", {"\"abcdefgh\"", "\"call_0123456789abcdefXYZ\""}},
      {R"(root ::= "\"" [a-z]{6} "\"")", {"\"abcdef\""}},
      {R"(root ::= "\"" [^"\\]{3,} "\"")", {"\"Привет, как дела? Всё хорошо\"", "\"abc\""}},
      {R"(root ::= ([a-z]{1,3} ",")* [a-z]{1,3})", {"ab,c,def,gh", "x"}},
      {R"(root ::= ("a" | "ab"){2,5} "b")", {"aabab", "abababb"}},
      {R"(root ::= ("x" [0-9]{2,4}){1,3} ";")", {"x12x3456;", "x99;"}},
      {R"(root ::= "[" (item ("," item){0,20})? "]"
item ::= [a-z ]{0,12})", {"[hello world,a,,b c]", "[]"}},
      {R"(root ::= [0-9a-f]{8} "-" [0-9a-f]{4} | [a-zA-Z ]{2,40} "!")", {"deadbeef-cafe", "Hello there my friend!"}},
      // Hand-written counts with a gap: w matches 1, 3 or 4 letters, never 2 (a token such
      // as "biz" would end w after two).
      {R"(root ::= w "z"
w ::= l t
t ::= l l u | ""
u ::= l | ""
l ::= [a-y])", {"abcz", "abcdz", "az"}},
      {R"(root ::= w "z"
w ::= l t
t ::= l l s | ""
s ::= l s | ""
l ::= [a-y])", {"abcdefghz", "az"}},
  };
  std::mt19937 rng(11);
  std::vector<uint32_t> fast(size_t((ds.vocab->size() + 31) / 32)), plain(fast.size());
  size_t checked = 0;
  for (const Case& c : cases) {
    auto g = std::make_shared<const Grammar>(parse_gbnf(c.gbnf));
    auto a = std::make_shared<Automaton>(g, ds.vocab);
    auto b = std::make_shared<Automaton>(g, ds.vocab);
    b->set_reference(true);
    auto compare = [&](Matcher& m, Matcher& p, const std::string& where) {
      m.fill_next_token_bitmask(fast);
      p.fill_next_token_bitmask(plain);
      ++checked;
      return fast == plain ? testing::AssertionSuccess() : testing::AssertionFailure() << c.gbnf << " " << where;
    };
    for (const std::string& d : c.docs) {
      const std::vector<int32_t> ids = ds.tok->encode(d);
      Matcher m(a, 0), p(b, 0);
      for (size_t k = 0; k <= ids.size(); ++k) {
        ASSERT_TRUE(compare(m, p, d + " after " + std::to_string(k) + " tokens"));
        const int32_t t = k < ids.size() ? ids[k] : eos;
        ASSERT_TRUE(has(fast, t)) << c.gbnf << ": " << d << " token " << k;
        ASSERT_TRUE(m.accept_token(t) && p.accept_token(t));
      }
    }
    for (int walk = 0; walk < 6; ++walk) {
      Matcher m(a, 0), p(b, 0);
      std::string doc;
      for (int step = 0; step < 40 && !m.is_terminated(); ++step) {
        ASSERT_TRUE(compare(m, p, "walk '" + doc + "'"));
        std::vector<int32_t> allowed;
        for (int32_t t = 0; t < int32_t(ds.vocab->size()); ++t)
          if (has(fast, t)) allowed.push_back(t);
        ASSERT_FALSE(allowed.empty()) << c.gbnf << ": dead end after '" << doc << "'";
        int32_t t = allowed[rng() % allowed.size()];
        if (has(fast, eos) && rng() % 4 == 0) t = eos;
        ASSERT_TRUE(m.accept_token(t) && p.accept_token(t));
        if (!m.is_terminated()) doc += ds.vocab->bytes(t);
      }
    }
  }
  EXPECT_GE(checked, 500u);
}
