// The JSON Schema audit (tests/data/json_schema_audit.jsonl, made by
// tools/make_json_schema_audit.py): documents that an independent generator
// (hypothesis-jsonschema) drew at each supported keyword's edges and that the `jsonschema`
// package validated, written as client encoders write them. The grammar must accept every
// one: compact without whitespace; spaced (", " and ": ") and indented (indent=2) exactly
// when their longest whitespace run fits max_whitespace, refused one below it and by the
// compact grammar. A grammar narrower than its schema silently removes valid outputs; the
// one narrowing gannet documents (objects: declared members in the schema's order, others
// only where additionalProperties allows them) is checked to be exactly that: the draws it
// leaves out are refused.
// sanitized build: -O1
#include <gtest/gtest.h>

#include <cstdlib>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <set>

#include "structured/json_schema.h"
#include "structured/matcher.h"
#include "structured_vocab.h"

using namespace gannet;
using namespace gannet::structured;
using gannet::structured::test::bytes_vocab;

namespace {

std::string source_dir() {
  const char* d = std::getenv("GANNET_SOURCE_DIR");
  return d ? d : ".";
}

std::vector<nlohmann::ordered_json> audit() {
  std::ifstream in(source_dir() + "/tests/data/json_schema_audit.jsonl");
  EXPECT_TRUE(in) << "tests/data/json_schema_audit.jsonl";
  std::vector<nlohmann::ordered_json> out;
  std::string line;
  while (std::getline(in, line))
    if (!line.empty()) out.push_back(nlohmann::ordered_json::parse(line));
  return out;
}

// The longest run of whitespace between a document's tokens (outside strings).
int longest_run(const std::string& d) {
  int best = 0, run = 0;
  bool in_string = false, escaped = false;
  for (char c : d) {
    if (in_string) {
      if (escaped) escaped = false;
      else if (c == '\\') escaped = true;
      else if (c == '"') in_string = false;
      continue;
    }
    if (c == ' ' || c == '\n' || c == '\t' || c == '\r') {
      best = std::max(best, ++run);
      continue;
    }
    run = 0;
    in_string = c == '"';
  }
  return best;
}

bool accepts(const std::shared_ptr<const Grammar>& g, const std::string& doc) {
  Matcher m(g, bytes_vocab(), 0);
  return m.accept_bytes(doc) && m.can_end();
}

void keys(const nlohmann::ordered_json& s, std::set<std::string>* out, std::set<std::string>* formats) {
  if (s.is_object()) {
    for (auto it = s.begin(); it != s.end(); ++it) {
      out->insert(it.key());
      if (it.key() == "format" && it.value().is_string()) formats->insert(it.value().get<std::string>());
      if (it.key() == "properties" || it.key() == "$defs" || it.key() == "definitions") {
        for (const auto& v : it.value()) keys(v, out, formats);
      } else if (it.key() != "enum" && it.key() != "const" && it.key() != "default" && it.key() != "examples") {
        keys(it.value(), out, formats);
      }
    }
  } else if (s.is_array()) {
    for (const auto& v : s) keys(v, out, formats);
  }
}

}  // namespace

TEST(StructuredAudit, EveryKeywordAndFormatIsAudited) {
  std::set<std::string> used, formats;
  for (const auto& e : audit()) keys(e["schema"], &used, &formats);
  for (const char* k : {"type", "properties", "required", "additionalProperties", "enum", "const", "anyOf", "oneOf",
                        "allOf", "items", "prefixItems", "minItems", "maxItems", "minLength", "maxLength", "pattern",
                        "format", "$ref", "$defs", "definitions", "minimum", "maximum", "exclusiveMinimum",
                        "exclusiveMaximum", "title", "description", "default", "examples", "$schema", "$comment",
                        "deprecated", "readOnly"})
    EXPECT_TRUE(used.count(k)) << "no audit schema uses " << k;
  for (const char* f : {"date", "time", "date-time", "uuid", "email"}) EXPECT_TRUE(formats.count(f)) << "format " << f;
}

TEST(StructuredAudit, EveryValidatedDocumentIsAcceptedAsClientsWriteIt) {
  const auto entries = audit();
  ASSERT_GE(entries.size(), 50u);
  size_t n_docs = 0, n_spaced = 0, n_beyond = 0;
  std::map<int, std::shared_ptr<const Grammar>> by_run;
  for (const auto& e : entries) {
    const std::string name = e["keyword"].get<std::string>() + "/" + e["name"].get<std::string>();
    const std::string schema = e["schema"].dump();
    by_run.clear();
    auto grammar = [&](int max_run) {  // 0: compact
      auto& g = by_run[max_run];
      if (!g) {
        JsonWhitespace ws;
        ws.compact = max_run == 0;
        ws.max_run = std::max(1, max_run);
        g = std::make_shared<const Grammar>(compile_json_schema(schema, ws));
      }
      return g;
    };
    ASSERT_FALSE(e["docs"].empty()) << name;
    for (const auto& d : e["docs"]) {
      const std::string compact = d["compact"];
      ASSERT_EQ(longest_run(compact), 0) << name << ": " << compact;
      EXPECT_TRUE(accepts(grammar(0), compact)) << name << ": " << compact;
      EXPECT_TRUE(accepts(grammar(1), compact)) << name << " (max_whitespace 1): " << compact;
      ++n_docs;
      for (const char* form : {"spaced", "indented"}) {
        const std::string doc = d[form];
        const int run = longest_run(doc);
        if (run == 0) continue;  // a scalar, or an empty array or object
        EXPECT_TRUE(accepts(grammar(run), doc)) << name << " (max_whitespace " << run << "): " << doc;
        EXPECT_FALSE(accepts(grammar(0), doc)) << name << " (compact): " << doc;
        if (run > 1) {
          EXPECT_FALSE(accepts(grammar(run - 1), doc)) << name << " (max_whitespace " << run - 1 << "): " << doc;
        }
        ++n_spaced;
      }
    }
    // Draws gannet's object policy leaves out (json_schema.h: declared members in the
    // schema's order; others only where additionalProperties allows them): refused.
    for (const auto& d : e["beyond_policy"]) {
      EXPECT_FALSE(accepts(grammar(0), d.get<std::string>())) << name << " (beyond the policy): " << d;
      ++n_beyond;
    }
  }
  EXPECT_GE(n_beyond, 50u);
  EXPECT_GE(n_docs, 600u);
  EXPECT_GE(n_spaced, 600u);
}
