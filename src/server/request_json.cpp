#include "server/request_json.h"

#include <cmath>

#include "core/error.h"

namespace gannet::server {

using nlohmann::json;

PromptLine parse_prompt_line(const std::string& line, const SamplingParams& defaults) {
  // Ordered: a schema's properties keep the order the user wrote them in.
  using ojson = nlohmann::ordered_json;
  ojson j;
  try {
    j = ojson::parse(line);
  } catch (const ojson::exception& e) {
    fail("bad JSON: ", e.what());
  }
  if (!j.is_object()) fail("each line must be a JSON object");
  PromptLine out{"", {}, false, {}, defaults};
  SamplingParams& p = out.params;
  bool have_prompt = false;
  const char* structured_from = nullptr;  // the field that set p.structured
  auto set_structured = [&](const char* field) {
    if (structured_from) fail("give one of '", structured_from, "' and '", field, "'");
    structured_from = field;
  };
  // A schema given as a JSON object or as JSON text.
  auto schema_text = [](const ojson& v, const std::string& field) {
    if (v.is_object() || v.is_boolean()) return v.dump();
    if (v.is_string()) return v.get<std::string>();
    fail("'", field, "' must be a JSON schema (an object, or its JSON text)");
  };
  for (auto it = j.begin(); it != j.end(); ++it) {
    const std::string& k = it.key();
    const ojson& v = it.value();
    auto num = [&]() -> double {
      if (!v.is_number()) fail("'", k, "' must be a number");
      return v.get<double>();
    };
    auto integer = [&]() -> int64_t {
      if (!v.is_number_integer()) fail("'", k, "' must be an integer");
      return v.get<int64_t>();
    };
    auto small_int = [&](int64_t lo, int64_t hi) -> int {
      const int64_t v = integer();
      if (v < lo || v > hi) fail("'", k, "' must be in [", lo, ", ", hi, "], got ", v);
      return int(v);
    };
    auto boolean = [&]() -> bool {
      if (!v.is_boolean()) fail("'", k, "' must be true or false");
      return v.get<bool>();
    };
    if (k == "prompt") {
      if (!v.is_string()) fail("'prompt' must be a string");
      if (have_prompt) fail("give one of 'prompt' and 'prompt_token_ids'");
      out.prompt = v.get<std::string>();
      have_prompt = true;
    } else if (k == "prompt_token_ids") {
      if (have_prompt) fail("give one of 'prompt' and 'prompt_token_ids'");
      if (!v.is_array() || v.empty()) fail("'prompt_token_ids' must be a non-empty list of token ids");
      for (const ojson& t : v) {
        if (!t.is_number_integer() || t.get<int64_t>() < 0 || t.get<int64_t>() > INT32_MAX)
          fail("'prompt_token_ids' must be a list of token ids (non-negative integers), got ", t.dump());
        out.prompt_token_ids.push_back(int32_t(t.get<int64_t>()));
      }
      out.has_ids = true;
      have_prompt = true;
    } else if (k == "images") {
      if (!v.is_array()) fail("'images' must be a list of image file paths");
      for (const ojson& f : v) {
        if (!f.is_string() || f.get<std::string>().empty()) fail("'images' must be a list of image file paths, got ", f.dump());
        out.images.push_back(f.get<std::string>());
      }
    } else if (k == "max_tokens") p.max_tokens = integer();
    else if (k == "min_tokens") p.min_tokens = integer();
    else if (k == "temperature") p.temperature = num();
    else if (k == "top_p") p.top_p = num();
    else if (k == "top_k") p.top_k = integer();
    else if (k == "min_p") p.min_p = num();
    else if (k == "repetition_penalty") p.repetition_penalty = num();
    else if (k == "presence_penalty") p.presence_penalty = num();
    else if (k == "frequency_penalty") p.frequency_penalty = num();
    else if (k == "n") p.n = small_int(-1000000, 1000000);
    else if (k == "ignore_eos") p.ignore_eos = boolean();
    else if (k == "skip_special_tokens") p.skip_special_tokens = boolean();
    else if (k == "include_stop_str_in_output") p.include_stop_str_in_output = boolean();
    else if (k == "logprobs") p.logprobs = small_int(-1000000, 1000000);
    else if (k == "prompt_logprobs") p.prompt_logprobs = small_int(-1000000, 1000000);
    else if (k == "num_speculative_tokens") p.num_speculative_tokens = small_int(-1000000, 1000000);
    else if (k == "seed") {
      if (!v.is_number_unsigned()) fail("'seed' must be a non-negative integer");
      p.seed = v.get<uint64_t>();
    } else if (k == "stop") {
      p.stop.clear();
      if (v.is_string()) p.stop.push_back(v.get<std::string>());
      else if (v.is_array()) {
        for (const ojson& s : v) {
          if (!s.is_string()) fail("'stop' must be a string or a list of strings");
          p.stop.push_back(s.get<std::string>());
        }
      } else fail("'stop' must be a string or a list of strings");
    } else if (k == "stop_token_ids") {
      p.stop_token_ids.clear();
      if (!v.is_array()) fail("'stop_token_ids' must be a list of integers");
      for (const ojson& s : v) {
        if (!s.is_number_integer() || s.get<int64_t>() < 0 || s.get<int64_t>() > INT32_MAX)
          fail("'stop_token_ids' must be a list of non-negative token ids");
        p.stop_token_ids.push_back(int32_t(s.get<int64_t>()));
      }
    } else if (k == "response_format") {
      // OpenAI's shape: {"type": "text" | "json_object" | "json_schema",
      //                  "json_schema": {"name": ..., "schema": {...}, "strict": ...}},
      // and gannet's extension "max_whitespace" for the two JSON types (as in 'structured':
      // 0, the default, is compact; n allows runs of up to n whitespace characters between
      // tokens, so ", " and ": " as clients' JSON encoders write them take n >= 1).
      if (!v.is_object() || !v.contains("type") || !v["type"].is_string())
        fail("'response_format' must be an object with a 'type' (text, json_object or json_schema)");
      const std::string type = v["type"].get<std::string>();
      const bool json_type = type == "json_object" || type == "json_schema";
      for (auto f = v.begin(); f != v.end(); ++f)
        if (f.key() != "type" && !(type == "json_schema" && f.key() == "json_schema") &&
            !(json_type && f.key() == "max_whitespace"))
          fail("'response_format' of type '", type, "' has an unknown field '", f.key(), "'");
      if (type == "text") continue;
      set_structured("response_format");
      if (json_type && v.contains("max_whitespace")) {
        const ojson& w = v["max_whitespace"];
        if (!w.is_number_integer()) fail("'response_format.max_whitespace' must be an integer");
        const int64_t n = w.get<int64_t>();
        if (n < 0 || n > 64) fail("'response_format.max_whitespace' must be in [0, 64], got ", n);
        p.structured.max_whitespace = int(n);
      }
      if (type == "json_object") {
        p.structured.kind = StructuredOutput::Kind::kJsonObject;
      } else if (type == "json_schema") {
        if (!v.contains("json_schema") || !v["json_schema"].is_object() || !v["json_schema"].contains("schema"))
          fail("'response_format' of type 'json_schema' needs 'json_schema': {\"schema\": {...}}");
        for (auto f = v["json_schema"].begin(); f != v["json_schema"].end(); ++f)
          if (f.key() != "name" && f.key() != "schema" && f.key() != "strict" && f.key() != "description")
            fail("'response_format.json_schema' has an unknown field '", f.key(), "'");
        p.structured.kind = StructuredOutput::Kind::kJsonSchema;
        p.structured.spec = schema_text(v["json_schema"]["schema"], "response_format.json_schema.schema");
      } else {
        fail("'response_format' type must be text, json_object or json_schema, got '", type, "'");
      }
    } else if (k == "structured") {
      // {"json_schema": <schema>} | {"regex": "..."} | {"grammar": "<GBNF>"} | {"json_object": true},
      // with optional "trigger" (text after which the constraint starts) and
      // "max_whitespace" (JSON kinds: whitespace allowed between tokens, 0 = compact).
      if (!v.is_object()) fail("'structured' must be an object");
      set_structured("structured");
      int kinds = 0;
      for (auto f = v.begin(); f != v.end(); ++f) {
        const std::string& fk = f.key();
        const ojson& fv = f.value();
        if (fk == "json_schema") {
          p.structured.kind = StructuredOutput::Kind::kJsonSchema;
          p.structured.spec = schema_text(fv, "structured.json_schema");
          ++kinds;
        } else if (fk == "regex" || fk == "grammar") {
          if (!fv.is_string()) fail("'structured.", fk, "' must be a string");
          p.structured.kind = fk == "regex" ? StructuredOutput::Kind::kRegex : StructuredOutput::Kind::kGrammar;
          p.structured.spec = fv.get<std::string>();
          ++kinds;
        } else if (fk == "json_object") {
          if (!fv.is_boolean() || !fv.get<bool>()) fail("'structured.json_object' must be true");
          p.structured.kind = StructuredOutput::Kind::kJsonObject;
          ++kinds;
        } else if (fk == "trigger") {
          if (!fv.is_string() || fv.get<std::string>().empty()) fail("'structured.trigger' must be a non-empty string");
          p.structured.trigger = fv.get<std::string>();
        } else if (fk == "max_whitespace") {
          if (!fv.is_number_integer()) fail("'structured.max_whitespace' must be an integer");
          const int64_t w = fv.get<int64_t>();
          if (w < 0 || w > 64) fail("'structured.max_whitespace' must be in [0, 64], got ", w);
          p.structured.max_whitespace = int(w);
        } else {
          fail("'structured' has an unknown field '", fk, "' (json_schema, regex, grammar, json_object, trigger, max_whitespace)");
        }
      }
      if (kinds != 1) fail("'structured' needs exactly one of json_schema, regex, grammar and json_object");
    } else fail("unknown field '", k, "'");
  }
  if (!have_prompt) fail("missing 'prompt' (or 'prompt_token_ids')");
  if (!out.has_ids && out.prompt.empty()) fail("the prompt is empty");
  p.validate();
  return out;
}

namespace {

json logprobs_json(const PositionLogprobs& p) {
  json top = json::array();
  for (const TokenLogprob& t : p.top) top.push_back({t.id, t.logprob});
  return {{"id", p.id}, {"logprob", p.logprob}, {"top", top}};
}

json completion_json(const CompletionOutput& c, const SamplingParams& params) {
  json j;
  j["text"] = c.text;
  j["token_ids"] = c.token_ids;
  j["finish_reason"] = c.finish_reason;
  if (auto* s = std::get_if<std::string>(&c.stop_reason)) j["stop_reason"] = *s;
  else if (auto* t = std::get_if<int32_t>(&c.stop_reason)) j["stop_reason"] = *t;
  else j["stop_reason"] = nullptr;
  if (params.logprobs) {
    json lp = json::array();
    for (const auto& p : c.logprobs) lp.push_back(logprobs_json(p));
    j["logprobs"] = lp;
    j["cumulative_logprob"] = c.cumulative_logprob;
  }
  return j;
}

}  // namespace

json output_to_json(const RequestOutput& out, const SamplingParams& params) {
  json j;
  j["prompt"] = out.prompt;
  json first = completion_json(out.outputs.at(0), params);
  for (auto it = first.begin(); it != first.end(); ++it) j[it.key()] = it.value();
  j["seed"] = out.seed;
  if (!out.error.empty()) j["error"] = out.error;
  if (params.prompt_logprobs) {
    json pl = json::array();
    for (const auto& p : out.prompt_logprobs) pl.push_back(p ? logprobs_json(*p) : json(nullptr));
    j["prompt_logprobs"] = pl;
  }
  if (out.outputs.size() > 1) {
    json all = json::array();
    for (const auto& c : out.outputs) all.push_back(completion_json(c, params));
    j["outputs"] = all;
  }
  const RequestMetrics& m = out.metrics;
  if (m.cached_tokens > 0) j["cached_tokens"] = m.cached_tokens;  // prompt positions from the prefix cache
  if (m.spec_steps > 0) {
    j["speculative"] = {{"steps", m.spec_steps},
                        {"drafted", m.spec_drafted},
                        {"accepted", m.spec_accepted},
                        {"mean_acceptance_length", double(m.spec_steps + m.spec_accepted) / double(m.spec_steps)},
                        {"drafted_at", m.spec_drafted_at},
                        {"accepted_at", m.spec_accepted_at}};
    if (!m.spec_calib_n.empty()) {
      // The drafter's confidences against the outcomes, by decile, and their calibration
      // error (sum over deciles |confidence sum - accepted| / drafts reached).
      int64_t reached = 0;
      double gap = 0;
      for (size_t k = 0; k < m.spec_calib_n.size(); ++k)
        reached += m.spec_calib_n[k], gap += std::fabs(m.spec_calib_conf[k] - double(m.spec_calib_accepted[k]));
      j["speculative"]["calibration"] = {{"reached", m.spec_calib_n},
                                         {"confidence_sum", m.spec_calib_conf},
                                         {"accepted", m.spec_calib_accepted},
                                         {"error", reached ? gap / double(reached) : 0.0}};
    }
  }
  return j;
}

std::string dump_line(const json& j) { return j.dump(-1, ' ', false, json::error_handler_t::replace); }

}  // namespace gannet::server
