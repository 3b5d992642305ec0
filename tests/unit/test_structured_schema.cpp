// JSON Schema into the byte grammar: for schemas of varied shapes, documents that are
// valid (in the schema's property order, compact) are accepted and invalid ones refused;
// unsupported keywords are named with their JSON pointer; documents sampled from the
// masks parse as JSON and satisfy the schema's constraints.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>
#include <cctype>
#include <optional>
#include <random>

#include "core/error.h"
#include "structured/json_schema.h"
#include "structured/matcher.h"
#include "structured_vocab.h"
#include "test_scale.h"

using namespace gannet::structured;
using gannet::structured::test::bytes_vocab;

namespace {

bool accepts(const std::string& schema, const std::string& doc) {
  auto g = std::make_shared<const Grammar>(compile_json_schema(schema));
  Matcher m(g, bytes_vocab(), 0);
  return m.accept_bytes(doc) && m.can_end();
}

std::string error_of(const std::string& schema) {
  try {
    compile_json_schema(schema);
  } catch (const gannet::Error& e) {
    return e.what();
  }
  return "no error";
}

}  // namespace

TEST(JsonSchema, ObjectsArraysEnumsAndTypes) {
  const std::string person = R"({"type":"object","properties":{"name":{"type":"string","minLength":1},
    "age":{"type":"integer","minimum":0},"tags":{"type":"array","items":{"type":"string"},"maxItems":2}},
    "required":["name"],"additionalProperties":false})";
  EXPECT_TRUE(accepts(person, R"({"name":"Ann","age":31,"tags":["a","b"]})"));
  EXPECT_TRUE(accepts(person, R"({"name":"Ann"})"));
  EXPECT_TRUE(accepts(person, R"({"name":"Ann","tags":[]})"));
  EXPECT_FALSE(accepts(person, R"({"age":31})"));                  // name is required
  EXPECT_FALSE(accepts(person, R"({"name":""})"));                 // minLength 1
  EXPECT_FALSE(accepts(person, R"({"name":"A","age":-1})"));       // minimum 0
  EXPECT_FALSE(accepts(person, R"({"name":"A","x":1})"));          // no additional properties
  EXPECT_FALSE(accepts(person, R"({"name":"A","tags":["a","b","c"]})"));  // maxItems 2
  EXPECT_FALSE(accepts(person, R"({"name":"A",})"));

  const std::string open = R"({"properties":{"a":{"const":1}},"additionalProperties":{"type":"boolean"}})";
  EXPECT_TRUE(accepts(open, R"({"a":1,"x":true,"y":false})"));
  EXPECT_TRUE(accepts(open, R"({"x":true})"));
  EXPECT_FALSE(accepts(open, R"({"a":2})"));
  EXPECT_FALSE(accepts(open, R"({"a":1,"x":3})"));

  const std::string misc = R"({"anyOf":[{"enum":["red","green",3,null]},{"type":["boolean","number"]},
    {"type":"array","prefixItems":[{"type":"integer"},{"type":"string"}],"items":false},
    {"type":"array","items":{"type":"null"},"minItems":2,"maxItems":3}]})";
  // A tuple's prefixes are valid too (no minItems): [] and [1].
  for (const char* ok : {R"("red")", "3", "null", "true", "-1.5e3", R"([1,"x"])", "[null,null]", "[null,null,null]",
                         "[]", "[1]"})
    EXPECT_TRUE(accepts(misc, ok)) << ok;
  for (const char* bad : {R"("blue")", R"([1,"x",2])", "[null]", "[null,null,null,null]", R"({"a":1})", R"(["x"])"})
    EXPECT_FALSE(accepts(misc, bad)) << bad;
}

TEST(JsonSchema, RefsRecursionPatternsAndFormats) {
  const std::string tree = R"({"$ref":"#/$defs/node","$defs":{"node":{"type":"object",
    "properties":{"v":{"type":"integer"},"kids":{"type":"array","items":{"$ref":"#/$defs/node"}}},
    "required":["v","kids"]}}})";
  EXPECT_TRUE(accepts(tree, R"({"v":1,"kids":[{"v":2,"kids":[]},{"v":3,"kids":[{"v":4,"kids":[]}]}]})"));
  EXPECT_FALSE(accepts(tree, R"({"v":1,"kids":[{"v":2}]})"));
  const std::string fmt = R"({"type":"object","properties":{"d":{"type":"string","format":"date"},
    "id":{"type":"string","format":"uuid"},"code":{"type":"string","pattern":"^[A-Z]{2}\\d+$"},
    "any":{"type":"string","pattern":"x"}},"required":["d","id","code","any"]})";
  EXPECT_TRUE(accepts(fmt, R"({"d":"2026-11-30","id":"123e4567-e89b-12d3-a456-426614174000","code":"AB12","any":"..x.."})"));
  EXPECT_FALSE(accepts(fmt, R"({"d":"2026-13-30","id":"123e4567-e89b-12d3-a456-426614174000","code":"AB12","any":"x"})"));
  EXPECT_FALSE(accepts(fmt, R"({"d":"2026-11-30","id":"123e4567","code":"AB12","any":"x"})"));
  EXPECT_FALSE(accepts(fmt, R"({"d":"2026-11-30","id":"123e4567-e89b-12d3-a456-426614174000","code":"Ab12","any":"x"})"));
  EXPECT_FALSE(accepts(fmt, R"({"d":"2026-11-30","id":"123e4567-e89b-12d3-a456-426614174000","code":"AB12","any":"y"})"));
}

TEST(JsonSchema, UnsupportedKeywordsAreNamedWithTheirPointer) {
  EXPECT_NE(error_of(R"({"properties":{"a":{"type":"string","contentEncoding":"base64"}}})")
                .find("'#/properties/a/contentEncoding'"),
            std::string::npos);
  EXPECT_NE(error_of(R"({"type":"number","minimum":1})").find("#/minimum"), std::string::npos);
  EXPECT_NE(error_of(R"({"$ref":"#/$defs/missing"})").find("does not resolve"), std::string::npos);
  EXPECT_NE(error_of(R"({"type":"strin"})").find("unknown type 'strin'"), std::string::npos);
  EXPECT_NE(error_of(R"({"type":"string","format":"ipv4"})").find("#/format"), std::string::npos);
  EXPECT_NE(error_of(R"({"required":["x"],"properties":{}})").find("'x' is not in properties"), std::string::npos);
  EXPECT_NE(error_of("{not json").find("not valid JSON"), std::string::npos);
  EXPECT_NE(error_of(R"J({"type":"string","pattern":"(?=a)"})J").find("#/pattern"), std::string::npos);
}

TEST(JsonSchema, SampledDocumentsSatisfyTheSchema) {
  const std::string schema = R"({"type":"object","properties":{"id":{"type":"integer","minimum":0},
    "kind":{"enum":["a","b"]},"tags":{"type":"array","items":{"type":"string","maxLength":3},"maxItems":3},
    "ok":{"type":"boolean"}},"required":["id","kind"]})";
  auto g = std::make_shared<const Grammar>(compile_json_schema(schema));
  auto vocab = bytes_vocab();
  std::mt19937 rng(5);
  std::vector<uint32_t> mask(9);
  int done = 0;
  for (int walk = 0; walk < 300; ++walk) {
    Matcher m(g, vocab, 0);
    std::string doc;
    for (int step = 0; step < 300 && !m.is_terminated(); ++step) {
      m.fill_next_token_bitmask(mask);
      std::vector<int32_t> allowed;
      for (int32_t t = 0; t < 257; ++t)
        if (mask[size_t(t) / 32] >> (t % 32) & 1) allowed.push_back(t);
      ASSERT_FALSE(allowed.empty()) << doc;
      int32_t t = allowed[rng() % allowed.size()];
      if (m.can_end()) t = 256;
      else if (step > 80) t = allowed.back() == 256 ? 256 : allowed[0];  // head for the end
      ASSERT_TRUE(m.accept_token(t));
      if (t != 256) doc += char(t);
    }
    if (!m.is_terminated()) continue;
    ++done;
    ASSERT_TRUE(nlohmann::json::accept(doc)) << doc;
    const auto j = nlohmann::json::parse(doc);
    // An integer of any size (past 64 bits nlohmann keeps it as a double), never negative.
    ASSERT_TRUE(j.is_object() && j.contains("id") && j["id"].is_number() && j["id"].get<double>() >= 0) << doc;
    {
      const size_t at = doc.find("\"id\":") + 5;
      for (size_t k = at; k < doc.size() && doc[k] != ',' && doc[k] != '}'; ++k)
        ASSERT_TRUE(std::isdigit((unsigned char)doc[k])) << doc;
    }
    ASSERT_TRUE(j["kind"] == "a" || j["kind"] == "b") << doc;
    if (j.contains("tags")) {
      ASSERT_LE(j["tags"].size(), 3u) << doc;
      for (const auto& s : j["tags"]) {
        ASSERT_TRUE(s.is_string()) << doc;
        size_t chars = 0;  // maxLength counts code points
        for (unsigned char c : s.get<std::string>()) chars += (c & 0xC0) != 0x80;
        ASSERT_LE(chars, 3u) << doc;
      }
    }
    for (auto it = j.begin(); it != j.end(); ++it)
      ASSERT_TRUE(it.key() == "id" || it.key() == "kind" || it.key() == "tags" || it.key() == "ok") << doc;
  }
  EXPECT_GT(done, 100);
}

TEST(JsonSchema, IntegerRangesMatchExactlyTheirIntegers) {
  std::mt19937 rng(8);
  // 60 random ranges (15 under the sanitizers, test_scale.h: each of the 5 kinds 3 times).
  for (int t = 0; t < gannet::test_support::scaled(60, 15); ++t) {
    nlohmann::json s = {{"type", "integer"}};
    std::optional<int64_t> lo, hi;
    const int64_t a = int64_t(rng() % 2400) - 1200, b = a + int64_t(rng() % 1500);
    switch (t % 5) {
      case 0: s["minimum"] = a, lo = a; break;
      case 1: s["maximum"] = b, hi = b; break;
      case 2: s["minimum"] = a, s["maximum"] = b, lo = a, hi = b; break;
      case 3: s["exclusiveMinimum"] = a, s["exclusiveMaximum"] = b + 1, lo = a + 1, hi = b; break;
      default: s["minimum"] = double(a) - 0.5, s["maximum"] = double(b) + 0.25, lo = a, hi = b;  // non-integer bounds
    }
    if (lo && hi && *lo > *hi) continue;
    auto g = std::make_shared<const Grammar>(compile_json_schema(s.dump()));
    auto v = bytes_vocab();
    auto ok = [&](const std::string& doc) {
      Matcher m(g, v, 0);
      return m.accept_bytes(doc) && m.can_end();
    };
    for (int64_t x = -1600; x <= 1600; ++x) {
      const bool want = (!lo || x >= *lo) && (!hi || x <= *hi);
      ASSERT_EQ(ok(std::to_string(x)), want) << s.dump() << " on " << x;
    }
    ASSERT_EQ(ok("123456789012"), !hi) << s.dump();
    ASSERT_EQ(ok("-123456789012"), !lo) << s.dump();
    ASSERT_FALSE(ok("007")) << s.dump();
    ASSERT_FALSE(ok("1.0")) << s.dump();
  }
}

// prefixItems with every combination of items and minItems / maxItems: the matcher accepts
// exactly the arrays an independent reading of JSON Schema 2020-12 validates (length within
// the bounds, the first items matching their prefixItems, the rest matching items), over
// every array of up to 4 values drawn from one of each type; impossible bounds are refused.
TEST(JsonSchema, PrefixItemsTakeEveryLengthTheSchemaAllows) {
  const std::vector<std::string> values = {"1", "\"a\"", "true", "null"};  // integer, string, boolean, null
  const std::vector<int> prefix = {0, 1, 2};                              // prefixItems: integer, string, boolean
  const std::vector<std::string> items = {"", ",\"items\":false", ",\"items\":{\"type\":\"null\"}"};
  int checked = 0;
  for (size_t it = 0; it < items.size(); ++it)
    for (int lo : {-1, 0, 1, 2, 4})
      for (int hi : {-1, 0, 1, 2, 3, 5}) {
        if (lo >= 0 && hi >= 0 && hi < lo) continue;
        std::string schema = R"({"type":"array","prefixItems":[{"type":"integer"},{"type":"string"},{"type":"boolean"}])" +
                             items[it];
        if (lo >= 0) schema += ",\"minItems\":" + std::to_string(lo);
        if (hi >= 0) schema += ",\"maxItems\":" + std::to_string(hi);
        schema += "}";
        if (it == 1 && lo > 3) {  // items false caps the length at 3
          EXPECT_NE(error_of(schema).find("#/minItems"), std::string::npos) << schema;
          continue;
        }
        auto a = std::make_shared<Automaton>(std::make_shared<const Grammar>(compile_json_schema(schema)), bytes_vocab());
        for (int len = 0; len <= 4; ++len) {
          int total = 1;
          for (int k = 0; k < len; ++k) total *= 4;
          for (int code = 0; code < total; ++code) {
            std::string doc = "[";
            bool valid = (lo < 0 || len >= lo) && (hi < 0 || len <= hi);
            for (int k = 0, c = code; k < len; ++k, c /= 4) {
              doc += (k ? "," : "") + values[size_t(c % 4)];
              if (k < 3) valid &= c % 4 == prefix[size_t(k)];
              else if (it == 1) valid = false;
              else if (it == 2) valid &= c % 4 == 3;
            }
            doc += "]";
            Matcher m(a, 0);
            EXPECT_EQ(m.accept_bytes(doc) && m.can_end(), valid) << schema << " " << doc;
            ++checked;
          }
        }
      }
  EXPECT_GT(checked, 10000);
}

// Email: RFC 5321 mailboxes (atext and dots, quoted local parts with JSON-escaped quotes,
// single-label domains, address literals); pattern strings match the decoded text, so
// quotes, backslashes and control characters come in their JSON escapes.
TEST(JsonSchema, EmailAndEscapesInPatternStrings) {
  const std::string email = R"({"type":"string","format":"email"})";
  for (const char* ok : {R"("a.b@example.org")", R"("!#$%&'*+/=?^_`{|}~-@x.y")", R"("\"john doe\"@example.com")",
                         R"("\"a\\\"b\"@x.io")", R"("user@localhost")", R"("u@[192.168.0.1]")",
                         R"("u@[IPv6:2001:db8::1]")", R"(".a..b.@x.com")", R"("a\/b@x.com")"})
    EXPECT_TRUE(accepts(email, ok)) << ok;
  for (const char* bad : {R"("a.b example.org")", R"("@x.com")", R"("a@")", R"("a@b..c")", R"("a@[300.1.1.1]")",
                          R"("a b@x.com")", R"("\"a\"b\"@x.com")", R"("a@b_c.com")"})
    EXPECT_FALSE(accepts(email, bad)) << bad;
  const std::string quote = R"({"type":"string","pattern":"^a\"b\\\\c\nd$"})";  // a " b \ c newline d
  EXPECT_TRUE(accepts(quote, R"("a\"b\\c\nd")"));
  EXPECT_TRUE(accepts(quote, R"("a\u0022b\u005Cc\u000ad")"));
  EXPECT_FALSE(accepts(quote, "\"a\"b\\\\c\nd\""));  // a raw quote ends the string; a raw newline is not JSON
  const std::string x = R"({"type":"string","pattern":"x"})";
  EXPECT_TRUE(accepts(x, R"("\"x\"\t")"));
  EXPECT_FALSE(accepts(x, R"("\"y\"")"));
}

// format: date accepts exactly the calendar's dates (checked against the Gregorian rules
// for every month and day of years around century and leap boundaries); time and
// date-time refuse second 60 and need an offset.
TEST(JsonSchema, DateFormatIsTheCalendar) {
  auto g = std::make_shared<const Grammar>(compile_json_schema(R"({"type":"string","format":"date"})"));
  auto a = std::make_shared<Automaton>(g, bytes_vocab());
  int checked = 0;
  for (int y : {0, 1, 4, 100, 400, 1896, 1900, 1999, 2000, 2023, 2024, 2100, 2400, 9996, 9999}) {
    const bool leap = (y % 4 == 0 && y % 100 != 0) || y % 400 == 0;
    for (int mo = 0; mo <= 13; ++mo)
      for (int d = 0; d <= 32; ++d) {
        const int days[] = {31, leap ? 29 : 28, 31, 30, 31, 30, 31, 31, 30, 31, 30, 31};
        const bool ok = y >= 1 && mo >= 1 && mo <= 12 && d >= 1 && d <= days[mo - 1];
        char buf[32];
        std::snprintf(buf, sizeof buf, "\"%04d-%02d-%02d\"", y, mo, d);
        Matcher m(a, 0);
        EXPECT_EQ(m.accept_bytes(buf) && m.can_end(), ok) << buf;
        ++checked;
      }
  }
  EXPECT_EQ(checked, 15 * 14 * 33);
  EXPECT_TRUE(accepts(R"({"type":"string","format":"time"})", R"("23:59:59.5+01:00")"));
  EXPECT_FALSE(accepts(R"({"type":"string","format":"time"})", R"("23:59:60Z")"));
  EXPECT_FALSE(accepts(R"({"type":"string","format":"time"})", R"("12:00:00")"));
  EXPECT_TRUE(accepts(R"({"type":"string","format":"date-time"})", R"("2024-02-29T00:00:00Z")"));
  EXPECT_FALSE(accepts(R"({"type":"string","format":"date-time"})", R"("2023-02-29T00:00:00Z")"));
  // RFC 3339 §5.6: T and Z may be lower case.
  EXPECT_TRUE(accepts(R"({"type":"string","format":"date-time"})", R"("2024-02-29t00:00:00z")"));
  EXPECT_TRUE(accepts(R"({"type":"string","format":"date-time"})", R"("2024-02-29t00:00:00.25-08:00")"));
  EXPECT_TRUE(accepts(R"({"type":"string","format":"time"})", R"("12:00:00z")"));
  EXPECT_FALSE(accepts(R"({"type":"string","format":"date-time"})", R"("2024-02-29 00:00:00Z")"));
}

// allOf merges its branches with the keywords beside it; anyOf's siblings hold in every
// branch; enum beside type keeps the values of that type; conflicts are named.
TEST(JsonSchema, AllOfMergesAndSiblingsHold) {
  const std::string s = R"({"allOf":[{"type":"object","properties":{"a":{"type":"integer"}},"required":["a"]},
      {"properties":{"b":{"type":"string"}},"required":["b"]}],"additionalProperties":false})";
  EXPECT_TRUE(accepts(s, R"({"a":1,"b":"x"})"));
  EXPECT_FALSE(accepts(s, R"({"a":1})"));
  EXPECT_FALSE(accepts(s, R"({"b":"x"})"));
  // A property in both branches must satisfy both.
  const std::string both = R"({"allOf":[{"properties":{"n":{"type":"integer","minimum":0}},"required":["n"]},
      {"properties":{"n":{"type":"integer","maximum":9}}}]})";
  EXPECT_TRUE(accepts(both, R"({"n":5})"));
  EXPECT_FALSE(accepts(both, R"({"n":10})"));
  EXPECT_FALSE(accepts(both, R"({"n":-1})"));
  // Types intersect; integer within number.
  EXPECT_TRUE(accepts(R"({"allOf":[{"type":["number","string"]},{"type":"integer"}]})", "12"));
  EXPECT_FALSE(accepts(R"({"allOf":[{"type":["number","string"]},{"type":"integer"}]})", "1.5"));
  EXPECT_NE(error_of(R"({"allOf":[{"type":"string"},{"type":"integer"}]})").find("nothing in common"), std::string::npos);
  EXPECT_NE(error_of(R"({"allOf":[{"format":"date"},{"format":"uuid"}]})").find("#/allOf/1/format"), std::string::npos);
  // $ref branches are merged too.
  const std::string ref = R"({"$defs":{"id":{"properties":{"id":{"type":"integer"}},"required":["id"]}},
      "allOf":[{"$ref":"#/$defs/id"},{"properties":{"tag":{"enum":["x","y"]}}}]})";
  EXPECT_TRUE(accepts(ref, R"({"id":3,"tag":"y"})"));
  EXPECT_FALSE(accepts(ref, R"({"tag":"y"})"));
  // anyOf siblings: type object and required apply to each branch.
  const std::string any = R"({"type":"object","required":["k"],"anyOf":[{"properties":{"k":{"const":1}}},
      {"properties":{"k":{"const":"one"}}}]})";
  EXPECT_TRUE(accepts(any, R"({"k":1})"));
  EXPECT_TRUE(accepts(any, R"({"k":"one"})"));
  EXPECT_FALSE(accepts(any, R"({})"));
  // enum with type keeps the values of that type only.
  EXPECT_TRUE(accepts(R"({"type":"string","enum":["a",1,null]})", R"("a")"));
  EXPECT_FALSE(accepts(R"({"type":"string","enum":["a",1,null]})", "1"));
  EXPECT_NE(error_of(R"({"type":"integer","enum":["a"]})").find("no value"), std::string::npos);
  EXPECT_NE(error_of(R"({"enum":["a"],"maxLength":3})").find("maxLength"), std::string::npos);
}

// Whitespace policy: compact refuses any; max_whitespace n allows up to n characters
// between tokens (and the document still validates as the same JSON).
TEST(JsonSchema, WhitespacePolicy) {
  const std::string s = R"({"type":"object","properties":{"a":{"type":"array","items":{"type":"integer"}},
      "b":{"type":"boolean"}},"required":["a"],"additionalProperties":{"type":"string"}})";
  JsonWhitespace ws;
  ws.compact = false;
  ws.max_run = 2;
  auto g = std::make_shared<const Grammar>(compile_json_schema(s, ws));
  auto ok = [&](const std::string& doc) {
    Matcher m(g, bytes_vocab(), 0);
    return m.accept_bytes(doc) && m.can_end();
  };
  EXPECT_TRUE(ok(R"({ "a" : [ 1 , 2 ] , "b" : true , "x" : "y" })"));
  EXPECT_TRUE(ok("{\n \"a\":[],\"b\":false}"));
  EXPECT_FALSE(ok("{\n  \"a\":[],\"b\":false}"));  // newline and two spaces: three
  EXPECT_TRUE(ok(R"({"a":[1,2],"b":true})"));
  EXPECT_FALSE(ok(R"({   "a":[]})"));  // three spaces: more than 2
  EXPECT_FALSE(ok(R"({"a":[1 2]})"));
  EXPECT_FALSE(accepts(s, R"({ "a":[]})"));  // compact: none at all
  EXPECT_TRUE(accepts(s, R"({"a":[]})"));
}
