// Regular expressions into the byte grammar, against std::regex (ECMAScript) as the
// independent reference: for each pattern, random strings over an alphabet that exercises
// it are fully matched by both or by neither; unsupported constructs are named.
#include <gtest/gtest.h>

#include <random>
// libstdc++'s <regex> trips GCC's -Wmaybe-uninitialized under the sanitizers (a false
// positive inside std::function); it is only the reference here.
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#endif
#include <regex>

#include "core/error.h"
#include "structured/matcher.h"
#include "structured/regex.h"

using namespace gannet::structured;

namespace {

bool matches(const std::shared_ptr<const Grammar>& g, const std::shared_ptr<const TokenVocab>& v, const std::string& s) {
  Matcher m(g, v, 0);
  return m.accept_bytes(s) && m.can_end();
}

}  // namespace

TEST(Regex, AgreesWithStdRegexOnRandomStrings) {
  std::vector<std::string> bytes;
  for (int b = 0; b < 256; ++b) bytes.push_back(std::string(1, char(b)));
  auto vocab = std::make_shared<const TokenVocab>(bytes, std::vector<int32_t>{});
  struct Case {
    std::string pattern, alphabet, example;  // example: a string the pattern matches
    std::string ref = "";                    // std::regex's spelling, when it differs
  };
  const std::vector<Case> cases = {
      {"abc", "abcx", "abc"},
      {"a|bc|", "abc", "bc"},
      {"(ab)*c?", "abc", "ababc"},
      {"a{2,3}b{0,1}c{2}", "abc", "aaabcc"},
      {"[a-c]+[^a-c]", "abcd!", "cab!"},
      {"\\d{3}-\\d{4}", "0123-x", "012-3210"},
      {"\\w+@\\w+\\.(com|org)", "ab@.comrgx", "a@b.org"},
      {"(?:x|y)+z?", "xyz", "xyxz"},
      {"^[A-Z][a-z]*$", "Aaz0", "Aza"},
      {"(a|b)*abb", "ab", "babb"},
      {"\\s*\\S+\\s*", " a\t", " a "},
      {"[\\d.]+e-?\\d", "12.e-3", "1.2e-3"},
      {"a.b", "a\nb.", "a.b"},
      {"(?<year>\\d{2})-(\\d)", "12-3", "12-3", "(\\d{2})-(\\d)"},
      {"[-a]+x{1,}", "-ax", "a-xx"},
      {"\\x41\\u0042[\\]\\-]", "AB]-", "AB-"},
      {"(a+)+b", "ab", "aab"},
      {"a{3}", "a", "aaa"},
      {"a{2,}", "a", "aaaa"},
      {"b{,2}", "b{,2}", "b{,2}", "b\\{,2\\}"},  // a literal brace in ECMAScript (Annex B)
  };
  std::mt19937 rng(4);
  for (const Case& c : cases) {
    auto g = std::make_shared<const Grammar>(parse_regex(c.pattern));
    const std::regex ref(c.ref.empty() ? c.pattern : c.ref, std::regex::ECMAScript);
    ASSERT_TRUE(std::regex_match(c.example, ref)) << c.pattern;
    ASSERT_TRUE(matches(g, vocab, c.example)) << "/" << c.pattern << "/ on its example '" << c.example << "'";
    int agree_true = 0;
    for (int t = 0; t < 600; ++t) {
      // Random strings, and random edits of the example (near misses and near hits).
      std::string s;
      if (t % 2) {
        s = c.example;
        for (int e = 0, n = 1 + int(rng() % 2); e < n; ++e) {
          const size_t at = s.empty() ? 0 : rng() % (s.size() + 1);
          const char ch = c.alphabet[rng() % c.alphabet.size()];
          switch (rng() % 3) {
            case 0: s.insert(s.begin() + long(at), ch); break;
            case 1: if (at < s.size()) s.erase(at, 1); break;
            default: if (at < s.size()) s[at] = ch;
          }
        }
      } else {
        for (int k = 0, len = int(rng() % 10); k < len; ++k) s += c.alphabet[rng() % c.alphabet.size()];
      }
      const bool want = std::regex_match(s, ref);
      ASSERT_EQ(matches(g, vocab, s), want) << "/" << c.pattern << "/ on '" << s << "'";
      agree_true += want;
    }
    EXPECT_GT(agree_true, 0) << "/" << c.pattern << "/";
  }
}

TEST(Regex, UnicodeAndUnsupportedConstructs) {
  std::vector<std::string> bytes;
  for (int b = 0; b < 256; ++b) bytes.push_back(std::string(1, char(b)));
  auto vocab = std::make_shared<const TokenVocab>(bytes, std::vector<int32_t>{});
  auto g = std::make_shared<const Grammar>(parse_regex("[α-γ]+\\u{1F600}."));
  EXPECT_TRUE(matches(g, vocab, "αγ😀é"));
  EXPECT_FALSE(matches(g, vocab, "αδ😀é"));
  EXPECT_FALSE(matches(g, vocab, "α😀\n"));  // '.' excludes line terminators
  auto msg = [](const std::string& p) {
    try {
      parse_regex(p);
    } catch (const gannet::Error& e) {
      return std::string(e.what());
    }
    return std::string("no error");
  };
  EXPECT_NE(msg("(a)\\1").find("back-references"), std::string::npos);
  EXPECT_NE(msg("a(?=b)").find("lookaround"), std::string::npos);
  EXPECT_NE(msg("a\\bc").find("word boundaries"), std::string::npos);
  EXPECT_NE(msg("a^b").find("'^' is only supported at the start"), std::string::npos);
  EXPECT_NE(msg("a**").find("nothing to repeat"), std::string::npos);
  EXPECT_NE(msg("(ab").find("missing ')'"), std::string::npos);
  EXPECT_NE(msg("ab)").find("')'"), std::string::npos);
  EXPECT_NE(msg("[z-a]").find("out of order"), std::string::npos);
  EXPECT_NE(msg("\\p{L}").find("Unicode property"), std::string::npos);
}
