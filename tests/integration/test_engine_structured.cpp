// Structured output through the engine: every constrained output that finishes with
// "stop" is a complete document of its grammar (JSON parsed by nlohmann::json, regexes
// matched by std::regex, both independent of our matcher); outputs are bit-identical
// however requests are batched, chunked, preempted or scheduled (async on/off), and with
// n-gram speculation; a specification that does not compile fails only its request; the
// trigger leaves the text before it free; min_tokens yields to a finished document.
// labels: sanitize
#include <gtest/gtest.h>

// libstdc++'s <regex> trips GCC's -Wmaybe-uninitialized under the sanitizers (a false
// positive inside std::function); the checks below use std::regex as the independent oracle.
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#endif
#include <map>
#include <nlohmann/json.hpp>
#include <random>
#include <regex>

#include "core/error.h"
#include "engine/engine.h"
#include "tiny_checkpoint.h"

using namespace gannet;

namespace {

const std::string& tiny_model() { return gannet::test_support::tiny_checkpoint("llama", 7); }

struct Case {
  std::string prompt;
  SamplingParams params;
};

StructuredOutput schema(const std::string& s) {
  StructuredOutput so;
  so.kind = StructuredOutput::Kind::kJsonSchema;
  so.spec = s;
  return so;
}

const char* kRegexes[] = {"[0-9]{3}-[a-z]{2,4}", "(yes|no|maybe)!?", "#[0-9a-f]{6}", "[A-Z][a-z]+ [A-Z][a-z]+"};

std::vector<Case> make_cases() {
  std::vector<StructuredOutput> kinds;
  kinds.push_back(schema(R"({"type":"object","properties":{"name":{"type":"string","maxLength":6},
      "age":{"type":"integer","minimum":0,"maximum":150},"ok":{"type":"boolean"}},"required":["name","age","ok"]})"));
  kinds.push_back(schema(R"({"type":"array","items":{"enum":["red","green",3,null]},"minItems":1,"maxItems":4})"));
  kinds.push_back(schema(R"({"$defs":{"t":{"type":"object","properties":{"v":{"type":"integer","minimum":-9,"maximum":9},
      "kids":{"type":"array","items":{"$ref":"#/$defs/t"},"maxItems":2}},"required":["v"]}},"$ref":"#/$defs/t"})"));
  kinds.push_back(schema(R"({"type":"object","properties":{"when":{"type":"string","format":"date"},
      "id":{"type":"string","format":"uuid"}},"required":["when","id"]})"));
  for (const char* r : kRegexes) {
    StructuredOutput so;
    so.kind = StructuredOutput::Kind::kRegex;
    so.spec = r;
    kinds.push_back(so);
  }
  {
    StructuredOutput so;
    so.kind = StructuredOutput::Kind::kGrammar;
    so.spec = "root ::= \"(\" num (\"+\" num)* \")\"\nnum ::= [1-9] [0-9]?\n";
    kinds.push_back(so);
    so = {};
    so.kind = StructuredOutput::Kind::kJsonObject;
    so.max_whitespace = 2;
    kinds.push_back(so);
  }
  std::mt19937 rng(99);
  std::vector<Case> cases;
  for (size_t i = 0; i < 2 * kinds.size(); ++i) {
    Case c;
    c.prompt = "Request " + std::to_string(i) + ": answer in the format asked.";
    SamplingParams& p = c.params;
    p.structured = kinds[i % kinds.size()];
    p.max_tokens = 48;
    switch (i % 3) {
      case 0: p.temperature = 0; break;
      case 1:
        p.temperature = 1.0;
        p.seed = 100 + i;
        p.top_k = 50;
        break;
      default:
        p.temperature = 0.8;
        p.seed = 200 + i;
        p.repetition_penalty = 1.2;
        p.logprobs = 2;
        break;
    }
    if (i == 3 || i == 10) p.n = 2;
    cases.push_back(c);
  }
  // Unconstrained neighbours in the same batches.
  for (int i = 0; i < 3; ++i) {
    Case c;
    c.prompt = "Free text " + std::to_string(i);
    c.params.max_tokens = 20;
    c.params.temperature = i == 0 ? 0 : 0.9;
    c.params.seed = 7 + uint64_t(i);
    cases.push_back(c);
  }
  return cases;
}

EngineArgs args(bool async) {
  EngineArgs a;
  a.async_scheduling = async;
  a.model = tiny_model();
  a.quiet = true;
  a.threads = 2;
  a.kv_cache_memory = 64ull << 20;
  a.block_size = 16;
  return a;
}

using Outputs = std::map<std::string, RequestOutput>;

Outputs run(const EngineArgs& a, const std::vector<Case>& cases, bool each_alone = false) {
  engine::Engine e(a);
  Outputs out;
  auto drain = [&] {
    while (e.has_unfinished())
      for (RequestOutput& o : e.step())
        if (o.finished) out[o.request_id] = o;
  };
  for (size_t i = 0; i < cases.size(); ++i) {
    e.add_request("r" + std::to_string(i), cases[i].prompt, cases[i].params);
    if (each_alone) drain();
  }
  drain();
  EXPECT_EQ(e.block_manager().num_free_blocks(), e.block_manager().num_blocks());
  EXPECT_EQ(e.num_executor_rows(), 0u);
  return out;
}

void expect_same(const Outputs& ref, const Outputs& got, const std::string& what) {
  ASSERT_EQ(ref.size(), got.size()) << what;
  for (auto& [id, a] : ref) {
    const RequestOutput& b = got.at(id);
    ASSERT_EQ(a.outputs.size(), b.outputs.size()) << what << " " << id;
    for (size_t k = 0; k < a.outputs.size(); ++k) {
      EXPECT_EQ(a.outputs[k].token_ids, b.outputs[k].token_ids) << what << " " << id << " sample " << k;
      EXPECT_EQ(a.outputs[k].finish_reason, b.outputs[k].finish_reason) << what << " " << id;
      EXPECT_EQ(a.outputs[k].cumulative_logprob, b.outputs[k].cumulative_logprob) << what << " " << id;
    }
  }
}

const Outputs& reference() {
  static const Outputs ref = run(args(false), make_cases(), /*each_alone=*/true);
  return ref;
}

// The document a finished constrained output must be: checked without our matcher.
void expect_document(const StructuredOutput& so, const std::string& text, const std::string& what) {
  using K = StructuredOutput::Kind;
  if (so.kind == K::kRegex) {
    EXPECT_TRUE(std::regex_match(text, std::regex(so.spec))) << what << ": '" << text << "' !~ " << so.spec;
    return;
  }
  if (so.kind == K::kGrammar) {
    EXPECT_TRUE(std::regex_match(text, std::regex(R"(\([1-9][0-9]?(\+[1-9][0-9]?)*\))"))) << what << ": " << text;
    return;
  }
  nlohmann::ordered_json j;
  ASSERT_NO_THROW(j = nlohmann::ordered_json::parse(text)) << what << ": " << text;
  if (so.kind == K::kJsonObject) {
    EXPECT_TRUE(j.is_object()) << what;
    return;
  }
  const auto s = nlohmann::ordered_json::parse(so.spec);
  if (s.contains("properties") && s.contains("required") && !s.contains("$defs")) {
    ASSERT_TRUE(j.is_object()) << what;
    std::vector<std::string> keys;
    for (auto it = j.begin(); it != j.end(); ++it) keys.push_back(it.key());
    std::vector<std::string> want;
    for (auto it = s["properties"].begin(); it != s["properties"].end(); ++it) want.push_back(it.key());
    EXPECT_EQ(keys, want) << what << ": " << text;  // all required, in schema order
    if (j.contains("age")) {
      EXPECT_TRUE(j["age"].is_number_integer() && j["age"] >= 0 && j["age"] <= 150) << text;
      EXPECT_LE(j["name"].get<std::string>().size(), 6u * 4) << text;
    }
    if (j.contains("when")) {
      EXPECT_TRUE(std::regex_match(j["when"].get<std::string>(), std::regex(R"(\d{4}-(0[1-9]|1[0-2])-(0[1-9]|[12]\d|3[01]))")));
      EXPECT_TRUE(std::regex_match(j["id"].get<std::string>(), std::regex(R"([0-9a-fA-F]{8}(-[0-9a-fA-F]{4}){3}-[0-9a-fA-F]{12})")));
    }
  } else if (s.contains("items") && !s.contains("$defs")) {
    ASSERT_TRUE(j.is_array()) << what;
    EXPECT_GE(j.size(), 1u);
    EXPECT_LE(j.size(), 4u);
    for (auto& v : j) EXPECT_TRUE(v == "red" || v == "green" || v == 3 || v.is_null()) << text;
  } else {  // the recursive tree
    std::function<void(const nlohmann::ordered_json&)> tree = [&](const nlohmann::ordered_json& n) {
      ASSERT_TRUE(n.is_object() && n.contains("v")) << text;
      EXPECT_TRUE(n["v"].is_number_integer() && n["v"] >= -9 && n["v"] <= 9) << text;
      if (n.contains("kids")) {
        EXPECT_LE(n["kids"].size(), 2u);
        for (auto& k : n["kids"]) tree(k);
      }
    };
    tree(j);
  }
}

}  // namespace

TEST(EngineStructured, OutputsAreDocumentsOfTheirGrammar) {
  const auto cases = make_cases();
  const Outputs& out = reference();
  int complete = 0;
  for (size_t i = 0; i < cases.size(); ++i) {
    const RequestOutput& o = out.at("r" + std::to_string(i));
    EXPECT_TRUE(o.error.empty()) << o.error;
    if (!cases[i].params.structured.active()) continue;
    for (const CompletionOutput& c : o.outputs) {
      if (c.finish_reason != "stop") {
        EXPECT_EQ(c.finish_reason, "length");
        continue;
      }
      ++complete;
      expect_document(cases[i].params.structured, c.text, "r" + std::to_string(i));
    }
  }
  EXPECT_GE(complete, int(cases.size()) - 6);  // most documents end within max_tokens
}

TEST(EngineStructured, BitIdenticalBatchedAsyncPreemptedChunked) {
  const auto cases = make_cases();
  expect_same(reference(), run(args(true), cases), "batched, async");
  for (bool async : {false, true}) {
    EngineArgs tight = args(async);
    tight.kv_cache_memory = uint64_t(14) * 16 * 512;  // 14 blocks of 16 tokens: preemptions
    tight.max_num_batched_tokens = 24;                // prompts in chunks
    engine::Engine e(tight);
    Outputs out;
    const auto cs = make_cases();
    for (size_t i = 0; i < cs.size(); ++i) e.add_request("r" + std::to_string(i), cs[i].prompt, cs[i].params);
    while (e.has_unfinished())
      for (RequestOutput& o : e.step())
        if (o.finished) out[o.request_id] = o;
    EXPECT_GT(e.scheduler().num_preemptions(), 0) << "the budget was meant to force preemptions";
    expect_same(reference(), out, async ? "preempted, chunked, async" : "preempted, chunked");
  }
}

TEST(EngineStructured, NgramSpeculationChangesNothing) {
  const auto cases = make_cases();
  EngineArgs a = args(true);
  a.speculative = "ngram";
  a.num_speculative_tokens = 4;
  expect_same(reference(), run(a, cases), "ngram k=4");
}

TEST(EngineStructured, BadSpecificationFailsOnlyItsRequest) {
  engine::Engine e(args(true));
  SamplingParams good;
  good.temperature = 0;
  good.max_tokens = 10;
  good.structured.kind = StructuredOutput::Kind::kRegex;
  good.structured.spec = "[a-z]+";
  SamplingParams bad = good;
  bad.structured = schema(R"({"type":"object","patternProperties":{"^x":{}}})");
  SamplingParams bad2 = good;
  bad2.structured.spec = "(ab";
  e.add_request("good", "hello", good);
  e.add_request("bad", "hello", bad);
  e.add_request("bad2", "hello", bad2);
  std::map<std::string, RequestOutput> out;
  while (e.has_unfinished())
    for (RequestOutput& o : e.step())
      if (o.finished) out[o.request_id] = o;
  ASSERT_EQ(out.size(), 3u);
  EXPECT_TRUE(out["good"].error.empty()) << out["good"].error;
  EXPECT_FALSE(out["good"].outputs[0].token_ids.empty());
  EXPECT_NE(out["bad"].error.find("patternProperties"), std::string::npos) << out["bad"].error;
  EXPECT_NE(out["bad"].error.find("#/patternProperties"), std::string::npos) << out["bad"].error;
  EXPECT_EQ(out["bad"].outputs[0].finish_reason, "error");
  EXPECT_FALSE(out["bad2"].error.empty());
  // Bad parameters are still refused at once, naming the field.
  SamplingParams empty = good;
  empty.structured.spec.clear();
  EXPECT_THROW(e.add_request("x", "hello", empty), Error);
  SamplingParams ign = good;
  ign.ignore_eos = true;
  try {
    e.add_request("y", "hello", ign);
    FAIL();
  } catch (const Error& err) {
    EXPECT_NE(std::string(err.what()).find("ignore_eos"), std::string::npos);
  }
}

TEST(EngineStructured, AbortWhileCompiling) {
  engine::Engine e(args(true));
  SamplingParams p;
  p.max_tokens = 5;
  p.structured.kind = StructuredOutput::Kind::kJsonObject;
  e.add_request("a", "hello", p);
  auto o = e.abort("a");
  ASSERT_TRUE(o);
  EXPECT_EQ(o->outputs[0].finish_reason, "abort");
  EXPECT_FALSE(e.has_unfinished());
  EXPECT_TRUE(e.step().empty());
}

TEST(EngineStructured, TriggerLeavesTheTextBeforeItFree) {
  engine::Engine e(args(true));
  int triggered = 0;
  for (int i = 0; i < 12; ++i) {
    SamplingParams p;
    p.max_tokens = 60;
    p.temperature = 1.0;
    p.seed = 1000 + uint64_t(i);
    p.structured.kind = StructuredOutput::Kind::kRegex;
    p.structured.spec = "[0-9]{2}";
    p.structured.trigger = "e";  // a common byte: most outputs reach it
    e.add_request("t" + std::to_string(i), "Say something:", p);
  }
  while (e.has_unfinished())
    for (RequestOutput& o : e.step()) {
      if (!o.finished) continue;
      const CompletionOutput& c = o.outputs[0];
      const size_t at = c.text.find('e');
      if (at == std::string::npos) {
        EXPECT_EQ(c.finish_reason == "length" || c.finish_reason == "stop", true);
        continue;
      }
      ++triggered;
      const std::string rest = c.text.substr(at + 1);
      if (c.finish_reason == "stop") EXPECT_TRUE(std::regex_match(rest, std::regex("[0-9]{2}"))) << c.text;
      else EXPECT_TRUE(std::regex_match(rest, std::regex("[0-9]{0,2}"))) << c.text;
    }
  EXPECT_GE(triggered, 6);
}

TEST(EngineStructured, MinTokensYieldsToAFinishedDocument) {
  engine::Engine e(args(false));
  SamplingParams p;
  p.temperature = 0;
  p.max_tokens = 30;
  p.min_tokens = 20;
  p.structured.kind = StructuredOutput::Kind::kRegex;
  p.structured.spec = "ab";
  e.add_request("m", "x", p);
  RequestOutput out;
  while (e.has_unfinished())
    for (RequestOutput& o : e.step())
      if (o.finished) out = o;
  EXPECT_EQ(out.outputs[0].text, "ab");
  EXPECT_EQ(out.outputs[0].finish_reason, "stop");
}
