#include "io/rope_config.h"

#include <cmath>

#include "core/error.h"
#include "io/json_fields.h"

namespace gannet::io {

using nlohmann::json;
using namespace json_fields;

namespace {

// A number field that must be present (it may not be null unless `allow_null`).
double required_number(const json& d, const char* key, const std::string& type, const std::string& file,
                       const std::string& where) {
  auto v = get_number(d, key, file, where);
  if (!v) fail(file, ": rope type '", type, "' needs '", where, key, "'");
  return *v;
}

// One rope object (rope_parameters or rope_scaling), without theta.
RopeScaling parse_scaling(const json& d, const json& top, int64_t max_pos, const std::string& file,
                          const std::string& where) {
  RopeScaling r;
  std::string type = "default";
  if (auto t = get_string(d, "rope_type", file, where)) type = *t;
  else if (auto t2 = get_string(d, "type", file, where)) type = *t2;
  if (type == "default") return r;
  if (type == "linear") r.kind = RopeScaling::Kind::kLinear;
  else if (type == "llama3") r.kind = RopeScaling::Kind::kLlama3;
  else if (type == "yarn") r.kind = RopeScaling::Kind::kYarn;
  else if (type == "dynamic" || type == "longrope")
    fail(file, ": '", where, "rope_type' = \"", type, "\" (", type == "dynamic" ? "dynamic NTK" : "LongRoPE",
         " scaling) is not implemented; supported: default, linear, llama3, yarn");
  else
    fail(file, ": '", where, "rope_type' = \"", type, "\" is not supported (default, linear, llama3, yarn)");

  if (r.kind == RopeScaling::Kind::kYarn) {
    // transformers: a null factor means max_position_embeddings / original length.
    if (!d.contains("factor")) fail(file, ": rope type 'yarn' needs '", where, "factor'");
    auto f = get_number(d, "factor", file, where);
    r.factor = f ? *f : 0.0;
  } else {
    r.factor = required_number(d, "factor", type, file, where);
  }
  if (r.kind != RopeScaling::Kind::kLinear) {
    // A top-level original_max_position_embeddings wins over the nested one (transformers
    // gives it priority, for Phi-3-style configs); else the nested one; else the context.
    int64_t orig = get_int(top, {"original_max_position_embeddings"}, file, int64_t(1) << 40);
    if (orig < 0) orig = get_int(d, {"original_max_position_embeddings"}, file, int64_t(1) << 40, where);
    if (orig < 0) orig = max_pos;
    if (orig == 0) fail(file, ": '", where, "original_max_position_embeddings' must be positive");
    r.original_max_position_embeddings = orig;
  }
  if (r.kind == RopeScaling::Kind::kYarn && r.factor == 0.0)
    r.factor = double(max_pos) / double(r.original_max_position_embeddings);
  if (!(r.factor > 0) || !std::isfinite(r.factor))
    fail(file, ": '", where, "factor' must be a positive number, got ", r.factor);

  if (r.kind == RopeScaling::Kind::kLlama3) {
    r.low_freq_factor = required_number(d, "low_freq_factor", type, file, where);
    r.high_freq_factor = required_number(d, "high_freq_factor", type, file, where);
    if (!(r.high_freq_factor > r.low_freq_factor) || !(r.low_freq_factor > 0))
      fail(file, ": '", where, "high_freq_factor' (", r.high_freq_factor, ") must exceed '", where,
           "low_freq_factor' (", r.low_freq_factor, ") and both be positive");
  }
  if (r.kind == RopeScaling::Kind::kYarn) {
    // As transformers: a zero or null beta means the default.
    r.beta_fast = get_double(d, "beta_fast", 0.0, file, where);
    r.beta_slow = get_double(d, "beta_slow", 0.0, file, where);
    if (r.beta_fast == 0) r.beta_fast = 32.0;
    if (r.beta_slow == 0) r.beta_slow = 1.0;
    if (!(r.beta_fast > 0 && r.beta_slow > 0))
      fail(file, ": '", where, "beta_fast' and '", where, "beta_slow' must be positive");
    r.mscale = get_double(d, "mscale", 0.0, file, where);
    r.mscale_all_dim = get_double(d, "mscale_all_dim", 0.0, file, where);
    if (auto a = get_number(d, "attention_factor", file, where)) {
      if (!(*a > 0)) fail(file, ": '", where, "attention_factor' must be positive, got ", *a);
      r.attention_factor = *a;
    }
    r.truncate = get_bool(d, "truncate", true, file, where);
  }
  return r;
}

bool same(const RopeScaling& a, const RopeScaling& b) {
  return a.kind == b.kind && a.factor == b.factor && a.low_freq_factor == b.low_freq_factor &&
         a.high_freq_factor == b.high_freq_factor &&
         a.original_max_position_embeddings == b.original_max_position_embeddings && a.beta_fast == b.beta_fast &&
         a.beta_slow == b.beta_slow && a.mscale == b.mscale && a.mscale_all_dim == b.mscale_all_dim &&
         a.attention_factor == b.attention_factor && a.truncate == b.truncate;
}

const json* object_field(const json& j, const char* key, const std::string& file) {
  auto it = j.find(key);
  if (it == j.end() || it->is_null()) return nullptr;
  if (!it->is_object()) fail(file, ": '", key, "' must be an object, got ", it->dump());
  if (it->empty()) return nullptr;
  return &*it;
}

}  // namespace

const char* rope_kind_name(RopeScaling::Kind k) {
  switch (k) {
    case RopeScaling::Kind::kNone: return "default";
    case RopeScaling::Kind::kLinear: return "linear";
    case RopeScaling::Kind::kLlama3: return "llama3";
    case RopeScaling::Kind::kYarn: return "yarn";
  }
  return "?";
}

RopeConfig parse_rope_config(const json& j, int64_t head_dim, int64_t max_pos, const std::string& file) {
  RopeConfig rc;
  const json* params = object_field(j, "rope_parameters", file);
  const json* legacy = object_field(j, "rope_scaling", file);
  if (params) {
    // Per-layer-type nesting (Gemma-3 style) has no meaning for these architectures.
    for (const char* lt : {"full_attention", "sliding_attention"})
      if (params->contains(lt))
        fail(file, ": 'rope_parameters' nested by layer type ('", lt, "') is not supported for this architecture");
  }
  // transformers 5 takes rope_scaling when both are given; we refuse a disagreement.
  const json* d = legacy ? legacy : params;
  const std::string where = legacy ? "rope_scaling." : "rope_parameters.";
  rc.source = legacy ? "rope_scaling" : params ? "rope_parameters" : "";
  if (d) rc.scaling = parse_scaling(*d, j, max_pos, file, where);
  if (legacy && params && !same(rc.scaling, parse_scaling(*params, j, max_pos, file, "rope_parameters.")))
    fail(file, ": 'rope_scaling' and 'rope_parameters' disagree; keep one of them");

  // theta: the rope object's own, else the top-level one, else 10000. Two different values
  // would leave the reader guessing, so they are refused.
  std::optional<double> top_theta = get_number(j, "rope_theta", file);
  std::optional<double> nested_theta;
  for (const json* o : {params, legacy})
    if (o)
      if (auto t = get_number(*o, "rope_theta", file, o == params ? "rope_parameters." : "rope_scaling.")) {
        if (nested_theta && *nested_theta != *t)
          fail(file, ": 'rope_parameters.rope_theta' and 'rope_scaling.rope_theta' disagree");
        nested_theta = t;
      }
  if (nested_theta && top_theta && *nested_theta != *top_theta)
    fail(file, ": 'rope_theta' = ", *top_theta, " disagrees with the rope object's 'rope_theta' = ", *nested_theta);
  rc.theta = nested_theta ? *nested_theta : top_theta.value_or(10000.0);
  if (!(rc.theta > 0) || !std::isfinite(rc.theta)) fail(file, ": 'rope_theta' must be a positive number");
  if (rc.source.empty()) rc.source = top_theta ? "rope_theta" : "default";

  // partial_rotary_factor: the dense architectures' attention rotates the whole head
  // (transformers' Llama/Qwen rotary cannot apply a narrower table), so only factors that
  // round to the whole head are meaningful.
  std::optional<double> prf;
  for (const json* o : {d})
    if (o) prf = get_number(*o, "partial_rotary_factor", file, where);
  if (!prf) prf = get_number(j, "partial_rotary_factor", file);
  if (prf && !(*prf > 0 && *prf <= 1))
    fail(file, ": 'partial_rotary_factor' = ", *prf, " must lie in (0, 1]");
  if (prf && int64_t(double(head_dim) * *prf) != head_dim)
    fail(file, ": 'partial_rotary_factor' = ", *prf, " would rotate ", int64_t(double(head_dim) * *prf), " of ",
         head_dim, " channels; partial rotary is not supported for this architecture");
  return rc;
}

}  // namespace gannet::io
