#include "io/quant_config.h"

#include <nlohmann/json.hpp>
#include <set>

#include "core/error.h"

namespace gannet::io {

using nlohmann::json;

namespace {

void only_keys(const json& o, const std::set<std::string>& allowed, const std::string& file, const std::string& where) {
  for (auto it = o.begin(); it != o.end(); ++it)
    if (!allowed.count(it.key()))
      fail(file, ": '", where, it.key(), "' is not supported (gannet reads ", where.empty() ? "" : where,
           "{", [&] {
             std::string s;
             for (const auto& a : allowed) s += (s.empty() ? "" : ", ") + a;
             return s;
           }(), "})");
}

const json& need(const json& o, const char* key, const std::string& file, const std::string& where) {
  auto it = o.find(key);
  if (it == o.end()) fail(file, ": '", where, key, "' is missing");
  return *it;
}

void expect_value(const json& v, const json& want, const std::string& file, const std::string& field) {
  if (v != want) fail(file, ": '", field, "' = ", v.dump(), " is not supported (gannet reads ", want.dump(), ")");
}

WeightQuantization parse_fp8(const json& q, const std::string& file) {
  const std::string w = "quantization_config.";
  only_keys(q,
            {"quant_method", "activation_scheme", "weight_block_size", "fmt", "scale_fmt", "modules_to_not_convert",
             "dequantize"},
            file, w);
  WeightQuantization out;
  out.method = WeightQuantization::Method::kFp8Block;
  out.block = 128;
  // scale_fmt "ue8m0" (DeepSeek-V3.1 and later) rounds the GPU kernel's activation scales to
  // powers of two: honoured by the exact activation mode (--exact-activations); the weight
  // scales are read as their tensors store them.
  if (q.contains("scale_fmt") && !q["scale_fmt"].is_null()) {
    expect_value(q["scale_fmt"], "ue8m0", file, w + "scale_fmt");
    out.pow2_activation_scales = true;
  }
  if (q.contains("activation_scheme") && !q["activation_scheme"].is_null())
    expect_value(q["activation_scheme"], "dynamic", file, w + "activation_scheme");
  if (q.contains("fmt") && !q["fmt"].is_null()) expect_value(q["fmt"], "e4m3", file, w + "fmt");
  if (q.contains("weight_block_size") && !q["weight_block_size"].is_null()) {
    const json& b = q["weight_block_size"];
    if (!b.is_array() || b.size() != 2 || !b[0].is_number_integer() || !b[1].is_number_integer() ||
        b[0].get<int64_t>() <= 0 || b[0].get<int64_t>() > (1 << 20))
      fail(file, ": '", w, "weight_block_size' = ", b.dump(), " must be two positive integers");
    if (b[0] != b[1])
      fail(file, ": '", w, "weight_block_size' = ", b.dump(), " is not supported (square blocks only)");
    out.block = b[0].get<int64_t>();
  }
  // modules_to_not_convert only says which linears are stored unquantized; gannet reads
  // each tensor's own dtype, so it needs no list. It must still be well formed.
  if (q.contains("modules_to_not_convert") && !q["modules_to_not_convert"].is_null()) {
    const json& m = q["modules_to_not_convert"];
    if (!m.is_array()) fail(file, ": '", w, "modules_to_not_convert' must be a list of module names");
    for (const json& e : m)
      if (!e.is_string()) fail(file, ": '", w, "modules_to_not_convert' must be a list of module names");
  }
  if (q.contains("dequantize") && !q["dequantize"].is_null() && !q["dequantize"].is_boolean())
    fail(file, ": '", w, "dequantize' must be true or false");
  return out;
}

WeightQuantization parse_compressed_tensors(const json& q, const std::string& file) {
  const std::string w = "quantization_config.";
  only_keys(q,
            {"quant_method", "format", "quantization_status", "config_groups", "ignore", "kv_cache_scheme",
             "global_compression_ratio", "version", "sparsity_config"},
            file, w);
  expect_value(need(q, "format", file, w), "int-quantized", file, w + "format");
  if (q.contains("kv_cache_scheme") && !q["kv_cache_scheme"].is_null())
    fail(file, ": '", w, "kv_cache_scheme' is not supported (KV-cache quantization)");
  if (q.contains("sparsity_config") && !q["sparsity_config"].is_null() && !q["sparsity_config"].empty())
    fail(file, ": '", w, "sparsity_config' is not supported");
  if (q.contains("quantization_status") && !q["quantization_status"].is_null())
    expect_value(q["quantization_status"], "compressed", file, w + "quantization_status");
  const json& groups = need(q, "config_groups", file, w);
  if (!groups.is_object() || groups.size() != 1)
    fail(file, ": '", w, "config_groups' must hold exactly one group (gannet reads one int8 weight scheme)");
  const std::string gname = groups.begin().key();
  const json& g = groups.begin().value();
  const std::string gw = w + "config_groups." + gname + ".";
  if (!g.is_object()) fail(file, ": '", gw.substr(0, gw.size() - 1), "' must be an object");
  only_keys(g, {"targets", "weights", "input_activations", "output_activations", "format"}, file, gw);
  expect_value(need(g, "targets", file, gw), json::array({"Linear"}), file, gw + "targets");
  for (const char* a : {"input_activations", "output_activations"})
    if (g.contains(a) && !g[a].is_null())
      fail(file, ": '", gw, a, "' is not supported (gannet quantizes weights only)");
  const json& wt = need(g, "weights", file, gw);
  const std::string ww = gw + "weights.";
  if (!wt.is_object()) fail(file, ": '", ww.substr(0, ww.size() - 1), "' must be an object");
  only_keys(wt,
            {"num_bits", "type", "symmetric", "strategy", "dynamic", "group_size", "block_structure", "observer",
             "observer_kwargs", "actorder"},
            file, ww);
  expect_value(need(wt, "num_bits", file, ww), 8, file, ww + "num_bits");
  expect_value(need(wt, "type", file, ww), "int", file, ww + "type");
  expect_value(need(wt, "symmetric", file, ww), true, file, ww + "symmetric");
  expect_value(need(wt, "strategy", file, ww), "channel", file, ww + "strategy");
  if (wt.contains("dynamic")) expect_value(wt["dynamic"], false, file, ww + "dynamic");
  for (const char* a : {"group_size", "block_structure", "actorder"})
    if (wt.contains(a) && !wt[a].is_null()) fail(file, ": '", ww, a, "' is not supported with strategy \"channel\"");
  if (q.contains("ignore") && !q["ignore"].is_null()) {
    const json& ig = q["ignore"];
    if (!ig.is_array()) fail(file, ": '", w, "ignore' must be a list of module names");
    for (const json& e : ig)
      if (!e.is_string()) fail(file, ": '", w, "ignore' must be a list of module names");
  }
  WeightQuantization out;
  out.method = WeightQuantization::Method::kInt8Row;
  return out;
}

}  // namespace

const char* quant_method_name(WeightQuantization::Method m) {
  switch (m) {
    case WeightQuantization::Method::kNone: return "none";
    case WeightQuantization::Method::kFp8Block: return "fp8";
    case WeightQuantization::Method::kInt8Row: return "int8";
  }
  return "?";
}

WeightQuantization::Method parse_quantize_flag(const std::string& v) {
  if (v.empty() || v == "none") return WeightQuantization::Method::kNone;
  if (v == "fp8") return WeightQuantization::Method::kFp8Block;
  if (v == "int8") return WeightQuantization::Method::kInt8Row;
  fail("--quantize must be none, fp8 or int8, got '", v, "'");
}

WeightQuantization parse_quantization_config(const json& q, const std::string& file) {
  if (q.is_null()) return {};
  if (!q.is_object()) fail(file, ": 'quantization_config' must be an object");
  auto it = q.find("quant_method");
  if (it == q.end() || !it->is_string()) fail(file, ": 'quantization_config.quant_method' is missing");
  const std::string m = it->get<std::string>();
  if (m == "fp8") return parse_fp8(q, file);
  if (m == "compressed-tensors") return parse_compressed_tensors(q, file);
  fail(file, ": 'quantization_config.quant_method' = \"", m,
       "\" is not supported (gannet reads \"fp8\" block-scaled and \"compressed-tensors\" int8 weights)");
}

}  // namespace gannet::io
