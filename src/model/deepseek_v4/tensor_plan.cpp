#include "model/deepseek_v4/tensor_plan.h"

#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "core/dtype.h"
#include "core/error.h"
#include "model/deepseek_v41/random_checkpoint.h"

namespace gannet::model::deepseek_v4 {

std::vector<TensorPlan> tensor_plan(const io::DeepseekV4Config& c) {
  std::vector<TensorPlan> out;
  deepseek_v41::TensorPlanBuilder plan{out, c.weight_block};
  auto add = [&](const std::string& name, DType dt, std::vector<int64_t> shape) { return plan.add(name, dt, shape); };
  auto fp8 = [&](const std::string& stem, int64_t n, int64_t k) { plan.fp8(stem, n, k); };
  auto fp4 = [&](const std::string& stem, int64_t n, int64_t k) { plan.fp4(stem, n, k); };
  const int64_t d = c.hidden_size, hc = c.hc_mult, D = c.head_dim, H = c.num_attention_heads;
  const int64_t mix = (2 + hc) * hc, E = c.n_routed_experts, inter = c.moe_intermediate_size;
  const int64_t idh = c.index_head_dim, nih = c.index_n_heads;
  add("embed.weight", DType::BF16, {c.vocab_size, d});
  add("head.weight", DType::BF16, {c.vocab_size, d});
  add("norm.weight", DType::BF16, {d});
  add("hc_head_fn", DType::F32, {hc, hc * d});
  add("hc_head_base", DType::F32, {hc});
  add("hc_head_scale", DType::F32, {1});
  auto compressor = [&](const std::string& s, int64_t width, int64_t ratio, bool overlap) {
    const int64_t w2 = overlap ? 2 * width : width;
    add(s + ".wkv.weight", DType::BF16, {w2, d});
    add(s + ".wgate.weight", DType::BF16, {w2, d});
    add(s + ".ape", DType::F32, {ratio, w2});
    add(s + ".norm.weight", DType::BF16, {width});
  };
  for (int64_t i = 0; i < c.num_hidden_layers; ++i) {
    const std::string p = "layers." + std::to_string(i) + ".";
    add(p + "attn_norm.weight", DType::BF16, {d});
    add(p + "ffn_norm.weight", DType::BF16, {d});
    for (const char* site : {"attn", "ffn"}) {
      add(p + "hc_" + site + "_fn", DType::F32, {mix, hc * d});
      add(p + "hc_" + site + "_base", DType::F32, {mix});
      add(p + "hc_" + site + "_scale", DType::F32, {3});
    }
    fp8(p + "attn.wq_a", c.q_lora_rank, d);
    add(p + "attn.q_norm.weight", DType::BF16, {c.q_lora_rank});
    fp8(p + "attn.wq_b", H * D, c.q_lora_rank);
    fp8(p + "attn.wkv", D, d);
    add(p + "attn.kv_norm.weight", DType::BF16, {D});
    fp8(p + "attn.wo_a", c.o_groups * c.o_lora_rank, H * D / c.o_groups);
    fp8(p + "attn.wo_b", d, c.o_groups * c.o_lora_rank);
    add(p + "attn.attn_sink", DType::F32, {H});
    const int64_t r = c.compress_ratios[size_t(i)];
    if (r > 0) compressor(p + "attn.compressor", D, r, r == 4);
    if (r == 4) {
      fp8(p + "attn.indexer.wq_b", nih * idh, c.q_lora_rank);
      add(p + "attn.indexer.weights_proj.weight", DType::BF16, {nih, d});
      compressor(p + "attn.indexer.compressor", idh, 4, true);
    }
    add(p + "ffn.gate.weight", DType::BF16, {E, d});
    if (i < c.num_hash_layers) {
      TensorPlan* t = add(p + "ffn.gate.tid2eid", DType::I64, {c.vocab_size, c.num_experts_per_tok});
      t->params = 0;  // a routing table, not weights
      t->int_range = E;
    } else {
      add(p + "ffn.gate.bias", DType::F32, {E});
    }
    for (const char* w : {"w1", "w3"}) fp8(p + "ffn.shared_experts." + w, inter, d);
    fp8(p + "ffn.shared_experts.w2", d, inter);
    for (int64_t e = 0; e < E; ++e) {
      const std::string st = p + "ffn.experts." + std::to_string(e);
      fp4(st + ".w1", inter, d);
      fp4(st + ".w2", d, inter);
      fp4(st + ".w3", inter, d);
    }
  }
  return out;
}

SizeSummary size_summary(const io::DeepseekV4Config& c) {
  SizeSummary s;
  const double expert_share = double(c.num_experts_per_tok) / double(c.n_routed_experts);
  for (const TensorPlan& t : tensor_plan(c)) {
    s.params += t.params;
    s.weight_bytes += t.bytes;
    s.bytes_by_dtype[std::string(dtype_name(t.dtype))] += t.bytes;
    double read = double(t.bytes);
    if (t.routed_expert) read *= expert_share;
    else if (t.name == "embed.weight" || t.int_range > 0) read /= double(c.vocab_size);
    s.read_bytes_per_token += uint64_t(read);
  }
  return s;
}

CacheLayout make_cache_layout(const io::DeepseekV4Config& c, int64_t spec_tokens) {
  CacheLayout lay;
  const int64_t D = c.head_dim, idh = c.index_head_dim;
  auto ring_slots = [&](bool overlap, int64_t ratio) { return (overlap ? 2 * ratio : ratio) + spec_tokens; };
  int64_t off = 0;
  std::vector<int64_t> ratios;
  for (int64_t l = 0; l < c.num_hidden_layers; ++l) {
    const int64_t ratio = c.compress_ratios[size_t(l)];
    lay.win_off.push_back(off);
    off += (c.sliding_window + spec_tokens) * D * 4;
    lay.ring_off.push_back(-1);
    lay.iring_off.push_back(-1);
    lay.comp_index.push_back(-1);
    if (ratio == 0) continue;
    const bool overlap = ratio == 4;
    const int64_t w2 = overlap ? 2 * D : D;
    lay.ring_off.back() = off;
    off += 2 * ring_slots(overlap, ratio) * w2 * 4;
    if (ratio == 4) {
      lay.iring_off.back() = off;
      off += 2 * ring_slots(true, 4) * 2 * idh * 4;
    }
    int64_t g = -1;
    for (size_t i = 0; i < ratios.size(); ++i)
      if (ratios[i] == ratio) g = int64_t(i);
    if (g < 0) {
      g = int64_t(ratios.size());
      ratios.push_back(ratio);
      lay.spec.groups.push_back({"compressed kv (ratio " + std::to_string(ratio) + ")", 0,
                                 (D + (ratio == 4 ? idh : 0)) * 4, ratio, kernels::CacheFormat::kF32});
    }
    lay.comp_index.back() = int64_t(lay.arena.size());
    lay.arena.push_back({g, lay.spec.groups[size_t(g)].layers++});
  }
  lay.spec.state_bytes_per_seq = (off + 63) / 64 * 64;
  return lay;
}

namespace {

nlohmann::ordered_json preset_config(const std::string& preset) {
  if (preset == "tiny")  // the shapes of tests/golden/deepseek-v4-tiny
    return nlohmann::ordered_json::parse(R"({"architectures": ["DeepseekV4ForCausalLM"], "model_type": "deepseek_v4",
      "vocab_size": 1024, "hidden_size": 256, "num_hidden_layers": 4, "num_attention_heads": 4,
      "num_key_value_heads": 1, "head_dim": 128, "qk_rope_head_dim": 64, "q_lora_rank": 128, "o_groups": 2,
      "o_lora_rank": 128, "sliding_window": 8, "compress_ratios": [0, 4, 8, 4, 0], "compress_rope_theta": 160000,
      "rope_theta": 10000, "rope_scaling": {"type": "yarn", "factor": 4, "original_max_position_embeddings": 64,
      "beta_fast": 32, "beta_slow": 1}, "max_position_embeddings": 512, "index_n_heads": 4, "index_head_dim": 128,
      "index_topk": 4, "n_routed_experts": 8, "num_experts_per_tok": 2, "n_shared_experts": 1,
      "moe_intermediate_size": 128, "num_hash_layers": 1, "scoring_func": "sqrtsoftplus", "topk_method": "noaux_tc",
      "norm_topk_prob": true, "routed_scaling_factor": 1.5, "swiglu_limit": 1.0, "hc_mult": 4,
      "hc_sinkhorn_iters": 20, "hc_eps": 1e-06, "rms_norm_eps": 1e-06, "num_nextn_predict_layers": 1,
      "expert_dtype": "fp4", "quantization_config": {"quant_method": "fp8", "fmt": "e4m3", "scale_fmt": "ue8m0",
      "activation_scheme": "dynamic", "weight_block_size": [128, 128]}, "tie_word_embeddings": false,
      "bos_token_id": 0, "eos_token_id": 1, "hidden_act": "silu", "torch_dtype": "bfloat16"})");
  if (preset == "small")  // ~1.3 B parameters, 1.2 B of them in 64 MXFP4 experts per layer
    return nlohmann::ordered_json::parse(R"({"architectures": ["DeepseekV4ForCausalLM"], "model_type": "deepseek_v4",
      "vocab_size": 32768, "hidden_size": 1024, "num_hidden_layers": 12, "num_attention_heads": 16,
      "num_key_value_heads": 1, "head_dim": 128, "qk_rope_head_dim": 64, "q_lora_rank": 384, "o_groups": 4,
      "o_lora_rank": 256, "sliding_window": 128, "compress_ratios": [0, 0, 4, 128, 4, 128, 4, 128, 4, 128, 4, 0, 0],
      "compress_rope_theta": 160000, "rope_theta": 10000, "rope_scaling": {"type": "yarn", "factor": 4,
      "original_max_position_embeddings": 2048, "beta_fast": 32, "beta_slow": 1}, "max_position_embeddings": 8192,
      "index_n_heads": 8, "index_head_dim": 128, "index_topk": 64, "n_routed_experts": 64, "num_experts_per_tok": 6,
      "n_shared_experts": 1, "moe_intermediate_size": 512, "num_hash_layers": 2, "scoring_func": "sqrtsoftplus",
      "topk_method": "noaux_tc", "norm_topk_prob": true, "routed_scaling_factor": 1.5, "swiglu_limit": 10.0,
      "hc_mult": 4, "hc_sinkhorn_iters": 20, "hc_eps": 1e-06, "rms_norm_eps": 1e-06, "num_nextn_predict_layers": 1,
      "expert_dtype": "fp4", "quantization_config": {"quant_method": "fp8", "fmt": "e4m3", "scale_fmt": "ue8m0",
      "activation_scheme": "dynamic", "weight_block_size": [128, 128]}, "tie_word_embeddings": false,
      "bos_token_id": 0, "eos_token_id": 1, "hidden_act": "silu", "torch_dtype": "bfloat16"})");
  fail("unknown DeepSeek-V4 preset '", preset, "' (tiny, small)");
}

}  // namespace

void write_random_deepseek_v4(const std::string& preset, uint64_t seed, const std::string& config_overrides,
                              const std::string& out_dir, const std::function<void(uint64_t, uint64_t)>& progress) {
  namespace fs = std::filesystem;
  nlohmann::ordered_json cfg = preset_config(preset);
  if (!config_overrides.empty()) {
    nlohmann::ordered_json o;
    try {
      o = nlohmann::ordered_json::parse(config_overrides);
    } catch (const std::exception& e) {
      fail("config overrides: not valid JSON: ", e.what());
    }
    if (!o.is_object()) fail("config overrides: expected a JSON object");
    for (auto it = o.begin(); it != o.end(); ++it) {
      if (it.value().is_null()) cfg.erase(it.key());
      else cfg[it.key()] = it.value();
    }
  }
  const std::string text = cfg.dump(2) + "\n";
  const io::DeepseekV4Config c = io::parse_deepseek_v4_config(nlohmann::json::parse(text), "config.json");
  if (fs::exists(out_dir) && !(fs::is_directory(out_dir) && fs::is_empty(out_dir)))
    fail(out_dir, ": already exists and is not an empty directory");
  fs::create_directories(out_dir);
  deepseek_v41::write_random_tensors(tensor_plan(c), c.weight_block, seed,
                                     (fs::path(out_dir) / "model.safetensors").string(), progress);
  std::ofstream(fs::path(out_dir) / "config.json") << text;
}

}  // namespace gannet::model::deepseek_v4
