// The grammar engine's first pieces: GBNF parsing into the byte grammar, the matcher
// (accepts exactly the strings of the language, refusing at the first bad byte), token
// masks equal to trying every token, and rollback equal to replay.
#include <gtest/gtest.h>

#include <random>

#include "core/error.h"
#include "structured/gbnf.h"
#include "structured/matcher.h"
#include "structured_vocab.h"

using namespace gannet::structured;
using gannet::structured::test::bytes_vocab;

namespace {

std::shared_ptr<const TokenVocab> vocab_of(std::vector<std::string> toks, std::vector<int32_t> eos) {
  return std::make_shared<TokenVocab>(std::move(toks), std::move(eos));
}

// The length of the longest prefix of s the grammar accepts byte by byte, and whether all
// of s is a complete document.
std::pair<size_t, bool> run(const std::string& gbnf, const std::string& s) {
  auto g = std::make_shared<const Grammar>(parse_gbnf(gbnf));
  Matcher m(g, bytes_vocab());
  size_t n = 0;
  for (char c : s) {
    if (!m.accept_bytes(std::string(1, c))) return {n, false};
    ++n;
  }
  return {n, m.can_end()};
}

bool full(const std::string& gbnf, const std::string& s) {
  const auto [n, end] = run(gbnf, s);
  return n == s.size() && end;
}

}  // namespace

TEST(Gbnf, LiteralsClassesGroupsAndRepetition) {
  const std::string arith = R"G(
    root ::= expr
    expr ::= term (("+" | "-") term)*   # no left recursion
    term ::= num | "(" expr ")"
    num  ::= [0-9]+
  )G";
  EXPECT_TRUE(full(arith, "1+2"));
  EXPECT_TRUE(full(arith, "(12-3)+4"));
  EXPECT_FALSE(full(arith, "1+"));               // a prefix, not a document
  EXPECT_EQ(run(arith, "1+").first, 2u);          // ... but every byte was accepted
  EXPECT_EQ(run(arith, "1+*2").first, 2u);        // refused at the first bad byte
  EXPECT_EQ(run(arith, "(1))").first, 3u);

  const std::string reps = "root ::= \"a\"{2,3} \"b\"? [xyz]{2} \"c\"{1,}";
  EXPECT_TRUE(full(reps, "aaxyc"));
  EXPECT_TRUE(full(reps, "aaabzzccc"));
  EXPECT_FALSE(full(reps, "axyc"));
  EXPECT_EQ(run(reps, "aaaa").first, 3u);
  EXPECT_FALSE(full(reps, "aaxyzc"));

  const std::string neg = "root ::= \"\\\"\" ( [^\"\\\\] | \"\\\\\" . )* \"\\\"\"";  // a JSON-like string
  EXPECT_TRUE(full(neg, "\"ab\\\"c\""));
  EXPECT_EQ(run(neg, "\"ab\"c").first, 4u);
}

TEST(Gbnf, UnicodeIsMatchedAsUtf8) {
  const std::string g = "root ::= [α-ω]+ \"–\" .";
  EXPECT_TRUE(full(g, "αβω–x"));
  EXPECT_TRUE(full(g, "λ–😀"));                  // '.' takes a 4-byte character
  EXPECT_FALSE(full(g, "a–x"));
  EXPECT_EQ(run(g, "α\xCE").first, 3u);          // a partial character is a valid prefix
  EXPECT_EQ(run(g, "\xCE\x91").first, 1u);       // U+0391 (Alpha) is outside [α-ω]: its 2nd byte is refused
  // Negated classes exclude only what they name, across lengths.
  const std::string n = "root ::= [^a-zé]";
  EXPECT_TRUE(full(n, "A"));
  EXPECT_TRUE(full(n, "è"));
  EXPECT_FALSE(full(n, "é"));
  EXPECT_FALSE(full(n, "q"));
  EXPECT_FALSE(full(n, "\xED\xA0\x80"));         // a surrogate is not a character
}

TEST(Gbnf, ErrorsNameTheProblem) {
  auto msg = [](const std::string& g) {
    try {
      parse_gbnf(g);
    } catch (const gannet::Error& e) {
      return std::string(e.what());
    }
    return std::string("no error");
  };
  EXPECT_NE(msg("root ::= a\na ::= a \"x\" | \"y\"").find("left recursion"), std::string::npos);
  EXPECT_NE(msg("root ::= b").find("'b', which is not defined"), std::string::npos);
  EXPECT_NE(msg("root ::= \"a\"\nroot ::= \"b\"").find("defined twice"), std::string::npos);
  EXPECT_NE(msg("root ::= \"a").find("line 1"), std::string::npos);
  EXPECT_NE(msg("x ::= \"a\"").find("no rule named 'root'"), std::string::npos);
  EXPECT_NE(msg("root ::= (\"a\"\n").find("unclosed '('"), std::string::npos);
  EXPECT_NE(msg("root ::= \"a\"{3,1}").find("reversed"), std::string::npos);
  EXPECT_NE(msg("root ::= \"a\" @").find("line 1, column 14"), std::string::npos);
}

namespace {

const char* kJsonish = R"G(
  root   ::= object
  value  ::= object | array | string | number | "true" | "false" | "null"
  object ::= "{" ws ( string ws ":" ws value ws ( "," ws string ws ":" ws value ws )* )? "}"
  array  ::= "[" ws ( value ws ( "," ws value ws )* )? "]"
  string ::= "\"" ( [^"\\] | "\\" ["\\/bfnrt] )* "\""
  number ::= "-"? [0-9]+ ("." [0-9]+)?
  ws     ::= [ \t\n]{0,2}
)G";

std::vector<std::string> small_vocab() {
  return {"{", "}", "[", "]", "\"", "\"a", "a\"", ":", ",", " ", "\n", "1", "12", "-", ".", "true", "tr",
          "ue", "null", "x", "\\", "\\n", "{\"", "\":", "\",", "},", "é", "\xC3", "\xA9", "ab", "\"}", ""};
}

}  // namespace

TEST(Matcher, MaskEqualsTryingEveryTokenAndRollbackEqualsReplay) {
  auto g = std::make_shared<const Grammar>(parse_gbnf(kJsonish));
  const std::vector<std::string> toks = small_vocab();
  const int32_t eos = int32_t(toks.size()) - 1;
  auto vocab = vocab_of(toks, {eos});
  const int64_t V = vocab->size();
  std::mt19937 rng(1);
  for (int walk = 0; walk < 40; ++walk) {
    Matcher m(g, vocab, 64);
    std::vector<int32_t> taken;
    for (int step = 0; step < 40 && !m.is_terminated(); ++step) {
      std::vector<uint32_t> mask(size_t((V + 31) / 32));
      m.fill_next_token_bitmask(mask);
      std::vector<int32_t> allowed;
      for (int32_t t = 0; t < V; ++t) {
        // Brute force: replay everything taken so far, then try t.
        Matcher probe(g, vocab, 64);
        for (int32_t x : taken) ASSERT_TRUE(probe.accept_token(x));
        const bool ok = probe.accept_token(t);
        ASSERT_EQ(ok, bool(mask[size_t(t) / 32] >> (t % 32) & 1)) << "token '" << toks[size_t(t)] << "' after "
                                                                  << taken.size() << " tokens";
        if (ok) allowed.push_back(t);
      }
      ASSERT_FALSE(allowed.empty()) << "a live matcher always allows something";
      // Prefer closing tokens later in the walk so documents end.
      const int32_t t = allowed[rng() % allowed.size()];
      ASSERT_TRUE(m.accept_token(t));
      taken.push_back(t);
      if (taken.size() > 3 && rng() % 4 == 0) {
        // Rollback equals replay: undo k tokens and compare masks with a fresh replay.
        const int k = 1 + int(rng() % std::min<size_t>(3, taken.size()));
        m.rollback(k);
        taken.resize(taken.size() - size_t(k));
        Matcher replay(g, vocab, 64);
        for (int32_t x : taken) ASSERT_TRUE(replay.accept_token(x));
        std::vector<uint32_t> a(mask.size()), b(mask.size());
        m.fill_next_token_bitmask(a);
        replay.fill_next_token_bitmask(b);
        ASSERT_EQ(a, b);
        ASSERT_EQ(m.can_end(), replay.can_end());
      }
    }
  }
  // EOS only where the document is complete; nothing after it.
  Matcher m(g, vocab, 4);
  EXPECT_FALSE(m.accept_token(eos));
  ASSERT_TRUE(m.accept_token(0));   // {
  ASSERT_TRUE(m.accept_token(1));   // }
  EXPECT_TRUE(m.can_end());
  EXPECT_TRUE(m.accept_token(eos));
  EXPECT_TRUE(m.is_terminated());
  EXPECT_FALSE(m.accept_token(9));
  m.rollback(1);
  EXPECT_FALSE(m.is_terminated());
  EXPECT_THROW(m.rollback(3), gannet::Error);
}
