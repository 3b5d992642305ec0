// `gannet make-model --arch deepseek_v41`: random-weight DeepSeek-V4.1 checkpoints in the
// raw released format (FP8 E4M3 linears with E8M0 scales on weight_block tiles, MXFP4
// routed experts, FP8 Engram tables with E8M0 per 32 channels, BF16 norms / embeddings /
// compressor and indexer-key weights, F32 mHC parameters, sinks and gate biases), every
// tensor of tensor_plan(). No tokenizer: the presets run on token ids.
#include "model/deepseek_v41/random_checkpoint.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>

#include "core/dtype.h"
#include "core/error.h"
#include "io/deepseek_v41_config.h"
#include "io/safetensors.h"
#include "kernels/cpu/fake_quant.h"
#include "model/deepseek_v41/engram.h"
#include "model/deepseek_v41/weights.h"
#include "model/random_checkpoint.h"

namespace gannet::model::deepseek_v41 {

namespace fs = std::filesystem;
using nlohmann::ordered_json;

namespace {

ordered_json text_config(const std::string& preset) {
  ordered_json t;
  t["model_type"] = "deepseek_v41_text";
  if (preset == "tiny") {  // deepseek-v4-architecture.md §10.2
    t = ordered_json::parse(R"({"model_type": "deepseek_v41_text", "vocab_size": 512, "hidden_size": 256,
      "num_hidden_layers": 6, "num_attention_heads": 4, "num_key_value_heads": 1, "head_dim": 128,
      "qk_rope_head_dim": 32, "q_lora_rank": 128, "o_groups": 2, "o_lora_rank": 64, "sliding_window": 8,
      "compress_ratios": [0, 2, 2, 1, 1, 1], "kv_source_layer_ids": [1, 3], "index_source_layer_ids": [1, 3, 5],
      "candidate_source_layer_id": 3, "candidate_topk_blocks": 4, "candidate_block_size": 2, "index_n_heads": 4,
      "index_head_dim": 64, "index_topk": 4, "rope_theta": 10000, "compress_rope_theta": 160000,
      "rope_scaling": {"rope_type": "yarn", "factor": 4, "beta_fast": 32, "beta_slow": 1,
                       "original_max_position_embeddings": 64},
      "max_position_embeddings": 512, "n_routed_experts": 8, "num_experts_per_tok": 2, "n_shared_experts": 1,
      "moe_intermediate_size": 128, "scoring_func": "sqrtsoftplus", "topk_method": "noaux_tc", "gate_temp": 1.0,
      "norm_topk_prob": true, "routed_scaling_factor": 1.5, "swiglu_limit": 1.0, "hc_mult": 4,
      "hc_sinkhorn_iters": 20, "hc_eps": 1e-06, "rms_norm_eps": 1e-20, "engram_layer_ids": [1],
      "engram_max_ngram_size": 3, "engram_n_heads": 2, "engram_head_dim": 32, "engram_vocab_size": 101,
      "engram_num_embeddings": [420], "engram_pad_id": 2, "engram_compressed_vocab_size": 512,
      "num_nextn_predict_layers": 2, "dspark_block_size": 3, "dspark_noise_token_id": 511,
      "dspark_target_layer_ids": [3, 4, 5], "dspark_markov_rank": 32, "dspark_n_routed_experts": 4,
      "dspark_num_experts_per_tok": 2, "hidden_act": "silu", "bos_token_id": 0, "eos_token_id": 1})");
  } else if (preset == "small") {
    // ~1.3 B parameters, 1.2 B of them in 64 MXFP4 experts per layer (and a 3-stage DSpark
    // drafter of 16 experts): the released
    // model's mechanisms (ratio-2 encoder and ratio-1 decoder sources, Reuse and Reindex
    // layers, candidate blocks, Engram) at a size a workstation runs for benchmarks.
    t = ordered_json::parse(R"({"model_type": "deepseek_v41_text", "vocab_size": 32768, "hidden_size": 1024,
      "num_hidden_layers": 12, "num_attention_heads": 16, "num_key_value_heads": 1, "head_dim": 128,
      "qk_rope_head_dim": 64, "q_lora_rank": 384, "o_groups": 4, "o_lora_rank": 256, "sliding_window": 128,
      "compress_ratios": [0, 0, 2, 2, 2, 2, 2, 1, 1, 1, 1, 1], "kv_source_layer_ids": [2, 7],
      "index_source_layer_ids": [2, 7, 9, 11], "candidate_source_layer_id": 7, "candidate_topk_blocks": 64,
      "candidate_block_size": 8, "index_n_heads": 8, "index_head_dim": 128, "index_topk": 128,
      "rope_theta": 10000, "compress_rope_theta": 160000,
      "rope_scaling": {"rope_type": "yarn", "factor": 4, "beta_fast": 32, "beta_slow": 1,
                       "original_max_position_embeddings": 2048},
      "max_position_embeddings": 8192, "n_routed_experts": 64, "num_experts_per_tok": 6, "n_shared_experts": 1,
      "moe_intermediate_size": 512, "scoring_func": "sqrtsoftplus", "topk_method": "noaux_tc", "gate_temp": 1.0,
      "norm_topk_prob": true, "routed_scaling_factor": 1.5, "swiglu_limit": 10.0, "hc_mult": 4,
      "hc_sinkhorn_iters": 20, "hc_eps": 1e-06, "rms_norm_eps": 1e-20, "engram_layer_ids": [1],
      "engram_max_ngram_size": 3, "engram_n_heads": 4, "engram_head_dim": 64, "engram_vocab_size": 50000,
      "engram_num_embeddings": [0], "engram_pad_id": 2, "engram_compressed_vocab_size": 32768,
      "num_nextn_predict_layers": 3, "dspark_block_size": 5, "dspark_noise_token_id": 32767,
      "dspark_target_layer_ids": [9, 10, 11], "dspark_markov_rank": 64, "dspark_n_routed_experts": 16,
      "dspark_num_experts_per_tok": 3, "hidden_act": "silu", "bos_token_id": 0, "eos_token_id": 1})");
  } else {
    fail("unknown DeepSeek-V4.1 preset '", preset, "' (tiny, small)");
  }
  return t;
}

// Rows of the Engram tables the layout needs (the primes above engram_vocab_size).
void fill_engram_rows(ordered_json& t) {
  if (t["engram_layer_ids"].empty()) return;
  ordered_json cfg = {{"architectures", {"DeepseekV41ForCausalLM"}}, {"text_config", t}};
  cfg["text_config"]["engram_num_embeddings"] = std::vector<int64_t>(t["engram_layer_ids"].size(), 0);
  const io::DeepseekV41Config c = io::parse_deepseek_v41_config(nlohmann::json::parse(cfg.dump()), "preset");
  std::vector<int64_t> rows;
  for (const auto& primes : engram_primes(c)) {
    int64_t total = 0;
    for (int64_t p : primes) total += p;
    rows.push_back(total);
  }
  t["engram_num_embeddings"] = rows;
}

struct Tensor {
  DType dtype;
  std::vector<int64_t> shape;
  std::vector<uint8_t> bytes;
};

}  // namespace

void write_random_tensors(const std::vector<TensorPlan>& plan, int64_t fp8_block, uint64_t seed, const std::string& path,
                          const std::function<void(uint64_t, uint64_t)>& progress, float router_skew) {
  uint64_t total = 0;
  for (const TensorPlan& p : plan) total += p.bytes;
  const int64_t B = fp8_block;
  std::map<std::string, Tensor> made;  // quantized weight + scale pairs, made together
  uint64_t done = 0;
  io::SafetensorsWriter w;
  for (size_t pi = 0; pi < plan.size(); ++pi) {
    const TensorPlan& p = plan[pi];
    const std::string& name = p.name;
    auto ends = [&](const char* s) {
      const std::string x = s;
      return name.size() >= x.size() && name.compare(name.size() - x.size(), x.size(), x) == 0;
    };
    if (made.count(name)) {
      Tensor& tt = made[name];
      w.add(name, tt.dtype, tt.shape, [&made, name, &done, &progress, total](uint8_t* buf, int64_t off, int64_t n) {
        const Tensor& x = made[name];
        const size_t es = dtype_size(x.dtype);
        std::memcpy(buf, x.bytes.data() + size_t(off) * es, size_t(n) * es);
        done += uint64_t(n) * es;
        if (progress) progress(done, total);
      });
      continue;
    }
    Tensor out{p.dtype, p.shape, std::vector<uint8_t>(size_t(p.bytes))};
    const uint64_t key = random_tensor_key(seed, name);
    int64_t numel = 1;
    for (int64_t v : p.shape) numel *= v;
    if (p.int_range > 0) {
      // An integer table (hash routing's token -> experts): each row p.shape[1] distinct
      // values below int_range, drawn by a partial shuffle seeded by the row.
      const int64_t rows = p.shape[0], cols = p.shape[1];
      std::vector<int64_t> pool(static_cast<size_t>(p.int_range));
      for (int64_t r = 0; r < rows; ++r) {
        for (int64_t e = 0; e < p.int_range; ++e) pool[size_t(e)] = e;
        for (int64_t j = 0; j < cols; ++j) {
          uint64_t z = key + 0x9E3779B97F4A7C15ull * uint64_t(r * cols + j + 1);  // splitmix64
          z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
          z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
          z ^= z >> 31;
          const int64_t pick = j + int64_t(z % uint64_t(p.int_range - j));
          std::swap(pool[size_t(j)], pool[size_t(pick)]);
          const int64_t v = pool[size_t(j)];
          std::memcpy(out.bytes.data() + size_t(r * cols + j) * dtype_size(p.dtype), &v, dtype_size(p.dtype));
        }
      }
    } else if (p.dtype == DType::F8_E4M3 || (p.dtype == DType::I8 && p.routed_expert)) {
      // A quantized weight: sample the float tensor (std 1/sqrt(fan_in); Engram rows 1),
      // quantize, and keep its scale tensor (the next plan entry) for later.
      const bool fp4 = p.dtype == DType::I8;
      const int64_t n = p.shape[0], k = fp4 ? p.shape[1] * 2 : p.shape[1];
      const bool table = p.engram_table;
      const float std = table ? 1.0f : 1.0f / std::sqrt(float(k));
      std::vector<float> v(size_t(n * k));
      for (int64_t i = 0; i < n * k; ++i) v[size_t(i)] = random_tensor_value(key, i, 0.0f, std);
      const TensorPlan& sp = plan[pi + 1];
      Tensor sc{sp.dtype, sp.shape, std::vector<uint8_t>(size_t(sp.bytes))};
      if (fp4) {
        for (int64_t r = 0; r < n; ++r)
          kernels::pack_fp4(v.data() + r * k, k, 32, out.bytes.data() + r * (k / 2), sc.bytes.data() + r * (k / 32));
      } else if (table) {
        for (int64_t r = 0; r < n; ++r)
          kernels::pack_fp8_pow2(v.data() + r * k, k, 32, out.bytes.data() + r * k, sc.bytes.data() + r * (k / 32));
      } else {
        // B x B tiles: one power-of-two scale per tile (amax / 448 rounded up).
        const int64_t tr = (n + B - 1) / B, tc = (k + B - 1) / B;
        for (int64_t a = 0; a < tr; ++a)
          for (int64_t b = 0; b < tc; ++b) {
            float amax = 0.0f;
            for (int64_t r = a * B; r < std::min(n, (a + 1) * B); ++r)
              for (int64_t cc = b * B; cc < std::min(k, (b + 1) * B); ++cc)
                amax = std::max(amax, std::fabs(v[size_t(r * k + cc)]));
            const float s = kernels::pow2_ceil(std::max(amax, 1e-30f) / 448.0f);
            uint32_t bits;
            std::memcpy(&bits, &s, 4);
            sc.bytes[size_t(a * tc + b)] = uint8_t((bits >> 23) & 0xff);
            for (int64_t r = a * B; r < std::min(n, (a + 1) * B); ++r)
              for (int64_t cc = b * B; cc < std::min(k, (b + 1) * B); ++cc)
                out.bytes[size_t(r * k + cc)] = f32_to_fp8_e4m3(v[size_t(r * k + cc)] / s);
          }
      }
      made[sp.name] = std::move(sc);
    } else {
      // Plain tensors: norms 1 + N(0, 0.1); embedding N(0, 1); mHC projections N(0,
      // 1/(hc d)), bases N(0, 0.5), scales ~1; sinks N(0, 1); gate biases N(0, 0.5);
      // everything else a linear with std 1/sqrt(fan_in).
      float mean = 0.0f, std = 1.0f;
      if (ends("norm.weight")) mean = 1.0f, std = 0.1f;
      else if (name == "embed.weight" || ends("attn_sink")) std = 1.0f;
      else if (ends("_fn")) std = 1.0f / std::sqrt(float(p.shape[1]));
      else if (ends("_base")) std = 0.5f;
      else if (ends("_scale")) mean = 1.0f, std = 0.25f;
      else if (ends("gate.bias") || ends("gate.bias_vl")) std = 0.5f;
      else if (ends("q_weight") || ends("k_weight")) mean = 1.0f, std = 0.1f;
      else if (p.shape.size() == 2) std = 1.0f / std::sqrt(float(p.shape[1]));
      // A skewed router (load-balancing experiments): the backbone's selection biases rise
      // linearly toward expert 0 by up to router_skew, so low-numbered experts run hot.
      const bool skew = router_skew != 0.0f && ends("ffn.gate.bias") && name.rfind("mtp.", 0) != 0 && numel > 1;
      for (int64_t i = 0; i < numel; ++i) {
        float x = random_tensor_value(key, i, mean, std);
        if (skew) x = x + router_skew * float(numel - 1 - i) / float(numel - 1);
        if (p.dtype == DType::F32) std::memcpy(out.bytes.data() + 4 * i, &x, 4);
        else {
          const uint16_t h = f32_to_bf16(x);
          std::memcpy(out.bytes.data() + 2 * i, &h, 2);
        }
      }
    }
    made[name] = std::move(out);
    w.add(name, p.dtype, p.shape, [&made, name, &done, &progress, total](uint8_t* buf, int64_t off, int64_t n) {
      const Tensor& x = made[name];
      const size_t es = dtype_size(x.dtype);
      std::memcpy(buf, x.bytes.data() + size_t(off) * es, size_t(n) * es);
      done += uint64_t(n) * es;
      if (progress) progress(done, total);
    });
  }
  w.write(path);
}

void write_random_deepseek_v41(const std::string& preset, uint64_t seed, const std::string& config_overrides,
                               const std::string& out_dir, const std::function<void(uint64_t, uint64_t)>& progress,
                               float router_skew) {
  ordered_json t = text_config(preset);
  ordered_json top;  // vision_config / image_token_id: keys of the composite config
  if (!config_overrides.empty()) {
    ordered_json o;
    try {
      o = ordered_json::parse(config_overrides);
    } catch (const std::exception& e) {
      fail("config overrides: not valid JSON: ", e.what());
    }
    if (!o.is_object()) fail("config overrides: expected a JSON object");
    for (auto it = o.begin(); it != o.end(); ++it) {
      if (it.key() == "vision_config" || it.key() == "image_token_id") top[it.key()] = it.value();
      else if (it.value().is_null()) t.erase(it.key());
      else t[it.key()] = it.value();
    }
  }
  fill_engram_rows(t);
  ordered_json cfg;
  cfg["architectures"] = {"DeepseekV41ForCausalLM"};
  cfg["model_type"] = "deepseek_v41";
  cfg["quantization_config"] = {{"quant_method", "fp8"},          {"fmt", "e4m3"},
                                {"activation_scheme", "dynamic"}, {"weight_block_size", {32, 32}},
                                {"scale_fmt", "ue8m0"},           {"expert_dtype", "fp4"}};
  cfg["text_config"] = t;
  for (auto it = top.begin(); it != top.end(); ++it) cfg[it.key()] = it.value();  // a vision tower (random too)
  cfg["bos_token_id"] = 0;
  cfg["eos_token_id"] = 1;
  cfg["torch_dtype"] = "bfloat16";
  const std::string cfg_text = cfg.dump(2) + "\n";
  const io::DeepseekV41Config c = io::parse_deepseek_v41_config(nlohmann::json::parse(cfg_text), "config.json");
  if (fs::exists(out_dir) && !(fs::is_directory(out_dir) && fs::is_empty(out_dir)))
    fail(out_dir, ": already exists and is not an empty directory");
  fs::create_directories(out_dir);

  write_random_tensors(tensor_plan(c), c.weight_block, seed, (fs::path(out_dir) / "model.safetensors").string(),
                       progress, router_skew);
  std::ofstream(fs::path(out_dir) / "config.json") << cfg_text;
}

}  // namespace gannet::model::deepseek_v41
