// The built-in JSON grammar against nlohmann::json::accept (an independent RFC 8259
// parser): valid documents, random edits of them, and random strings are accepted by
// both or neither (compact and whitespace-tolerant forms), and a random walk that samples
// tokens from the mask always ends in a document the reference parser accepts.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>
#include <cctype>
#include <random>

#include "structured/json_grammar.h"
#include "structured/matcher.h"
#include "structured_vocab.h"

using namespace gannet::structured;
using gannet::structured::test::bytes_vocab;

namespace {

bool full(const std::shared_ptr<const Grammar>& g, const std::string& s) {
  Matcher m(g, bytes_vocab(), 0);
  return m.accept_bytes(s) && m.can_end();
}

// Exponents past double's range are valid JSON that the reference refuses: every digit
// run after e / E (and a sign) becomes "1" for it (inside strings this changes nothing
// about validity either).
std::string tame(const std::string& s) {
  std::string out;
  for (size_t k = 0; k < s.size();) {
    out += s[k];
    if ((s[k] == 'e' || s[k] == 'E') && k + 1 < s.size()) {
      size_t j = k + 1;
      if (s[j] == '+' || s[j] == '-') out += s[j++];
      size_t d = j;
      while (d < s.size() && std::isdigit((unsigned char)s[d])) ++d;
      if (d > j) out += '1';
      k = d;
      continue;
    }
    ++k;
  }
  return out;
}

bool has_ws(const std::string& s) {
  bool in_str = false, esc = false;
  for (char c : s) {
    if (in_str) {
      if (esc) esc = false;
      else if (c == '\\') esc = true;
      else if (c == '"') in_str = false;
    } else if (c == '"') {
      in_str = true;
    } else if (c == ' ' || c == '\t' || c == '\n' || c == '\r') {
      return true;
    }
  }
  return false;
}

}  // namespace

TEST(JsonGrammar, AgreesWithAReferenceParser) {
  auto compact = std::make_shared<const Grammar>(json_grammar());
  JsonWhitespace loose;
  loose.compact = false;
  loose.max_run = 3;
  auto spaced = std::make_shared<const Grammar>(json_grammar(loose));
  const std::vector<std::string> docs = {
      R"({"a":1,"b":[true,false,null],"c":{"d":"e\"\\\/\b\f\n\r\t\u00e9"}})",
      R"([-0.5e+10,0,12,1E-2,"x",{}])",
      R"("plain")", R"(-0)", R"({"k":[[],[{}]]})", "\"caf\xC3\xA9 \xF0\x9F\x98\x80\"", "[1, 2 ,\n3]", "{ \"a\" :\t1 }",
  };
  std::mt19937 rng(2);
  const std::string alphabet = "{}[]\":,. -+0123456789eEtrufalsn\\u\t\n";
  int accepted = 0;
  for (int t = 0; t < 3000; ++t) {
    std::string s = docs[rng() % docs.size()];
    if (t % 3) {
      for (int e = 0, n = 1 + int(rng() % 3); e < n; ++e) {
        const size_t at = rng() % (s.size() + 1);
        const char ch = alphabet[rng() % alphabet.size()];
        switch (rng() % 3) {
          case 0: s.insert(s.begin() + long(at), ch); break;
          case 1: if (at < s.size()) s.erase(at, 1); break;
          default: if (at < s.size()) s[at] = ch;
        }
      }
    } else if (t % 2) {
      s.clear();
      for (int k = 0, len = int(rng() % 12); k < len; ++k) s += alphabet[rng() % alphabet.size()];
    }
    const bool ok = nlohmann::json::accept(tame(s));
    // Compact: valid JSON without whitespace outside strings.
    ASSERT_EQ(full(compact, s), ok && !has_ws(s)) << "compact on '" << s << "'";
    // Bounded whitespace: valid JSON whose whitespace runs are at most 3 long.
    bool short_runs = true;
    {
      int run = 0;
      bool in_str = false, esc = false;
      for (char c : s) {
        if (in_str) {
          if (esc) esc = false;
          else if (c == '\\') esc = true;
          else if (c == '"') in_str = false;
          run = 0;
          continue;
        }
        if (c == '"') in_str = true;
        if (c == ' ' || c == '\t' || c == '\n' || c == '\r') short_runs &= ++run <= 3;
        else run = 0;
      }
    }
    ASSERT_EQ(full(spaced, s), ok && short_runs) << "spaced on '" << s << "'";
    accepted += ok;
  }
  EXPECT_GT(accepted, 100);
}

TEST(JsonGrammar, SampledDocumentsParse) {
  // Tokens of several lengths, as a real vocabulary has, partial UTF-8 included.
  std::vector<std::string> toks = {"{", "}", "[", "]", "\"", ":", ",", "{\"", "\":", "\",\"", "\"}", "0", "1", "23",
                                   "-", ".", "e", "+", "true", "null", "fa", "lse", "a", "bc", "\\", "n", "u00", "e9",
                                   "\xC3", "\xA9", "\xF0\x9F", "\x98\x80"};
  // Every printable ASCII byte alone too (real vocabularies have them): no dead ends.
  for (char c = 0x20; c < 0x7F; ++c) toks.push_back(std::string(1, c));
  toks.push_back("");
  const int32_t eos = int32_t(toks.size()) - 1;
  auto vocab = std::make_shared<const TokenVocab>(toks, std::vector<int32_t>{eos});
  auto g = std::make_shared<const Grammar>(json_grammar({}, /*object_at_top=*/true));
  std::mt19937 rng(9);
  int done = 0;
  for (int walk = 0; walk < 200; ++walk) {
    Matcher m(g, vocab, 0);
    std::string doc;
    std::vector<uint32_t> mask((toks.size() + 31) / 32);
    for (int step = 0; step < 200 && !m.is_terminated(); ++step) {
      m.fill_next_token_bitmask(mask);
      std::vector<int32_t> allowed;
      for (int32_t t = 0; t < int32_t(toks.size()); ++t)
        if (mask[size_t(t) / 32] >> (t % 32) & 1) allowed.push_back(t);
      ASSERT_FALSE(allowed.empty()) << "after '" << doc << "'";
      // Take EOS whenever allowed after a while, and closing tokens more often later on.
      int32_t t = allowed[rng() % allowed.size()];
      if (m.can_end() && step > 5) t = eos;
      else if (step > 60)
        for (int32_t c : allowed)
          if (toks[size_t(c)] == "}" || toks[size_t(c)] == "]" || toks[size_t(c)] == "\"") t = c;
      ASSERT_TRUE(m.accept_token(t));
      if (t != eos) doc += toks[size_t(t)];
    }
    if (!m.is_terminated()) continue;
    ++done;
    ASSERT_TRUE(nlohmann::json::accept(tame(doc))) << doc;
    ASSERT_TRUE(nlohmann::json::parse(tame(doc)).is_object()) << doc;
  }
  EXPECT_GT(done, 100);
}
