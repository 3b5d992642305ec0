// The chat-template interpreter against jinja2: tests/golden/jinja/cases.jsonl holds small
// templates rendered by the jinja2 package in transformers' chat-template environment
// (tools/make_jinja_goldens.py). Every rendering must match byte for byte, and every case
// jinja2 refuses must be refused.
// labels: exact
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "core/error.h"
#include "chat/jinja_template.h"

namespace gannet::chat::jinja {
namespace {

std::string source_dir() {
  if (const char* dir = std::getenv("GANNET_SOURCE_DIR")) return dir;
  return std::filesystem::path(__FILE__).parent_path().parent_path().parent_path().string();
}

std::string render(const std::string& tmpl, const nlohmann::ordered_json& vars) {
  return Template(tmpl).render(Value::from_json(vars));
}

TEST(Jinja, MatchesJinja2OnEveryGoldenCase) {
  std::ifstream f(source_dir() + "/tests/golden/jinja/cases.jsonl");
  ASSERT_TRUE(f) << "missing tests/golden/jinja/cases.jsonl";
  std::string line;
  int n = 0, refused = 0;
  while (std::getline(f, line)) {
    const auto c = nlohmann::ordered_json::parse(line);
    const std::string tmpl = c["template"].get<std::string>();
    ++n;
    if (c.value("error", false)) {
      ++refused;
      bool threw = false;
      try {
        render(tmpl, c["variables"]);
      } catch (const Error&) {
        threw = true;
      } catch (const TemplateRaised&) {
        threw = true;
      }
      EXPECT_TRUE(threw) << "accepted what jinja2 refuses (" << c["jinja2_error"].get<std::string>() << "): " << tmpl;
      continue;
    }
    try {
      EXPECT_EQ(render(tmpl, c["variables"]), c["rendered"].get<std::string>()) << "template: " << tmpl;
    } catch (const std::exception& e) {
      ADD_FAILURE() << "refused (" << e.what() << "): " << tmpl;
    }
  }
  EXPECT_GE(n, 100);
  EXPECT_GE(refused, 10);
}

TEST(Jinja, ErrorsNameTheLine) {
  try {
    Template("a\nb\n{{ 1 | nosuchfilter }}").render(Value(Dict{}));
    FAIL() << "no error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("line 3"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("nosuchfilter"), std::string::npos) << e.what();
  }
  try {
    Template("{% if x %}\n\n{% for %}");
    FAIL() << "no error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("line 3"), std::string::npos) << e.what();
  }
}

TEST(Jinja, RaiseExceptionCarriesTheTemplatesMessage) {
  try {
    Template("{{ raise_exception('roles must alternate') }}").render(Value(Dict{}));
    FAIL() << "no error";
  } catch (const TemplateRaised& e) {
    EXPECT_STREQ(e.what(), "roles must alternate");
  }
}

TEST(Jinja, HostileTemplatesFailCleanly) {
  // Unbounded recursion and output are refused, not a crash or an exhausted machine.
  EXPECT_THROW(Template("{% macro f(x) %}{{ f(x) }}{% endmacro %}{{ f(1) }}").render(Value(Dict{})), Error);
  EXPECT_THROW(Template("{% for a in range(1000) %}{{ 'x' * 1000000 }}{% endfor %}")
                   .render(Value(Dict{})),
               Error);
}

TEST(Jinja, StrftimeNowUsesTheClockGiven) {
  Template t("{{ strftime_now('%d %b %Y') }}");
  t.set_clock([](const std::string& fmt) { return "clock(" + fmt + ")"; });
  EXPECT_EQ(t.render(Value(Dict{})), "clock(%d %b %Y)");
}

}  // namespace
}  // namespace gannet::chat::jinja
