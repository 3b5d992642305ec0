#include "model/random_checkpoint.h"

#include <cmath>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <vector>

#include "core/error.h"
#include "io/model_config.h"
#include "io/safetensors.h"
#include "kernels/cpu/packed_quantize.h"
#include "model/embedded_assets.h"
#include "model/presets.h"

namespace gannet::model {

namespace fs = std::filesystem;
using nlohmann::ordered_json;

namespace {

uint64_t splitmix64(uint64_t x) {
  x += 0x9e3779b97f4a7c15ull;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
  return x ^ (x >> 31);
}

uint64_t fnv1a(const std::string& s) {
  uint64_t h = 1469598103934665603ull;
  for (unsigned char c : s) h = (h ^ c) * 1099511628211ull;
  return h;
}

// Element i of a tensor: mean + std * (approximately standard normal), from a counter-
// based hash of (seed, tensor name, i), so values never depend on write order. The
// normal is an Irwin-Hall sum of four 16-bit uniforms: no libm, same bits everywhere.
struct Init {
  float mean, std;
};

float sample(uint64_t key, int64_t i, Init init) {
  uint64_t r = splitmix64(key + uint64_t(i));
  float s = 0;
  for (int j = 0; j < 4; ++j) s += float((r >> (16 * j)) & 0xffff) * (1.0f / 65536.0f);
  return init.mean + init.std * ((s - 2.0f) * 1.7320508f);
}

struct Spec {
  std::string name;
  std::vector<int64_t> shape;
  Init init;
};

std::vector<Spec> tensor_specs(const io::ModelConfig& c) {
  const int64_t h = c.hidden_size, hd = c.head_dim, f = c.intermediate_size;
  const int64_t q = c.num_attention_heads * hd, kv = c.num_key_value_heads * hd;
  // Variance-preserving scales (std 1/sqrt(fan_in)), so every layer visibly changes the
  // residual stream and tied logits have unit spread: golden tests then see each part of
  // the model (at std 0.02 the tiny model's output is mostly its input embedding).
  auto lin = [](int64_t fan_in) { return Init{0.0f, float(1.0 / std::sqrt(double(fan_in)))}; };
  const Init w = lin(h), norm{1.0f, 0.1f}, bias{0.0f, 0.1f};
  std::vector<Spec> s;
  s.push_back({"model.embed_tokens.weight", {c.vocab_size, h}, w});
  for (int64_t l = 0; l < c.num_hidden_layers; ++l) {
    std::string pre = "model.layers." + std::to_string(l) + ".";
    const std::string a = pre + "self_attn.", m = pre + "mlp.";
    s.push_back({pre + "input_layernorm.weight", {h}, norm});
    s.push_back({a + "q_proj.weight", {q, h}, w});
    s.push_back({a + "k_proj.weight", {kv, h}, w});
    s.push_back({a + "v_proj.weight", {kv, h}, w});
    if (c.attention_bias) {
      s.push_back({a + "q_proj.bias", {q}, bias});
      s.push_back({a + "k_proj.bias", {kv}, bias});
      s.push_back({a + "v_proj.bias", {kv}, bias});
    }
    if (c.qk_norm) {
      s.push_back({a + "q_norm.weight", {hd}, norm});
      s.push_back({a + "k_norm.weight", {hd}, norm});
    }
    s.push_back({a + "o_proj.weight", {h, q}, lin(q)});
    if (c.o_proj_bias) s.push_back({a + "o_proj.bias", {h}, bias});
    s.push_back({pre + "post_attention_layernorm.weight", {h}, norm});
    s.push_back({m + "gate_proj.weight", {f, h}, w});
    if (c.mlp_bias) s.push_back({m + "gate_proj.bias", {f}, bias});
    s.push_back({m + "up_proj.weight", {f, h}, w});
    if (c.mlp_bias) s.push_back({m + "up_proj.bias", {f}, bias});
    s.push_back({m + "down_proj.weight", {h, f}, lin(f)});
    if (c.mlp_bias) s.push_back({m + "down_proj.bias", {h}, bias});
  }
  s.push_back({"model.norm.weight", {h}, norm});
  if (!c.tie_word_embeddings) s.push_back({"lm_head.weight", {c.vocab_size, h}, w});
  return s;
}

ordered_json config_json(const Preset& p, const std::string& arch, DType dtype) {
  ordered_json c;
  c["architectures"] = {architecture_for(arch)};
  c["model_type"] = arch;
  c["hidden_size"] = p.hidden_size;
  c["intermediate_size"] = p.intermediate_size;
  c["num_hidden_layers"] = p.num_layers;
  c["num_attention_heads"] = p.num_heads;
  c["num_key_value_heads"] = p.num_kv_heads;
  c["head_dim"] = p.head_dim;
  c["hidden_act"] = "silu";
  c["max_position_embeddings"] = p.max_position_embeddings;
  c["vocab_size"] = p.vocab_size;
  c["tie_word_embeddings"] = p.tie_word_embeddings;
  c["bos_token_id"] = 0;
  c["eos_token_id"] = 1;
  c["torch_dtype"] = dtype == DType::BF16 ? "bfloat16" : dtype == DType::F16 ? "float16" : "float32";
  c["use_cache"] = true;
  c["attention_dropout"] = 0.0;
  if (arch == "llama") {
    // Llama-3.2 style: theta 500000 with llama3 frequency scaling.
    c["rms_norm_eps"] = 1e-5;
    c["rope_theta"] = 500000.0;
    c["rope_scaling"] = {{"rope_type", "llama3"}, {"factor", 32.0}, {"low_freq_factor", 1.0},
                         {"high_freq_factor", 4.0}, {"original_max_position_embeddings", 8192}};
    c["attention_bias"] = false;
    c["mlp_bias"] = false;
  } else if (arch == "qwen2") {
    // YaRN-scaled rope, so the golden tests cover that path too.
    c["rms_norm_eps"] = 1e-6;
    c["rope_theta"] = 1000000.0;
    c["rope_scaling"] = {{"rope_type", "yarn"}, {"factor", 4.0},
                         {"original_max_position_embeddings", p.max_position_embeddings / 4}};
    c["use_sliding_window"] = false;
    c["max_window_layers"] = p.num_layers;
  } else {
    c["rms_norm_eps"] = 1e-6;
    c["rope_theta"] = 1000000.0;
    c["attention_bias"] = false;
    c["use_sliding_window"] = false;
    c["max_window_layers"] = p.num_layers;
  }
  return c;
}

void write_text(const fs::path& path, std::string_view text) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out.write(text.data(), std::streamsize(text.size()));
  if (!out) fail(path.string(), ": write failed");
}

std::string shard_name(int i, int n) {
  char buf[64];
  std::snprintf(buf, sizeof buf, "model-%05d-of-%05d.safetensors", i, n);
  return buf;
}

}  // namespace

uint64_t random_tensor_key(uint64_t seed, const std::string& name) { return splitmix64(seed ^ fnv1a(name)); }
float random_tensor_value(uint64_t key, int64_t i, float mean, float std) { return sample(key, i, Init{mean, std}); }

void write_random_checkpoint(const RandomCheckpointOptions& opt, const std::string& out_dir,
                             const std::function<void(uint64_t, uint64_t)>& progress) {
  Preset p = find_preset(opt.preset);
  architecture_for(opt.arch);  // validates
  DType dtype = opt.dtype_override < 0 ? p.dtype : DType(opt.dtype_override);
  if (dtype != DType::F32 && dtype != DType::BF16 && dtype != DType::F16)
    fail("make-model writes f32, bf16 or f16 weights only");
  if (fs::exists(out_dir) && !(fs::is_directory(out_dir) && fs::is_empty(out_dir)))
    fail(out_dir, ": already exists and is not an empty directory");
  fs::create_directories(out_dir);

  ordered_json cfg_json = config_json(p, opt.arch, dtype);
  if (opt.weight_quant == "fp8") {
    cfg_json["quantization_config"] = {{"quant_method", "fp8"},
                                       {"activation_scheme", "dynamic"},
                                       {"weight_block_size", {128, 128}},
                                       {"modules_to_not_convert", {"lm_head"}}};
  } else if (opt.weight_quant == "int8") {
    ordered_json weights = {{"num_bits", 8}, {"type", "int"}, {"symmetric", true}, {"strategy", "channel"},
                            {"dynamic", false}};
    cfg_json["quantization_config"] = {
        {"quant_method", "compressed-tensors"},
        {"format", "int-quantized"},
        {"quantization_status", "compressed"},
        {"config_groups",
         {{"group_0", {{"targets", {"Linear"}}, {"weights", weights}, {"input_activations", nullptr}}}}},
        {"ignore", {"lm_head"}}};
  } else if (!opt.weight_quant.empty()) {
    fail("make-model: unknown weight quantization '", opt.weight_quant, "' (expected fp8 or int8)");
  }
  if (!opt.config_overrides.empty()) {
    ordered_json o;
    try {
      o = ordered_json::parse(opt.config_overrides);
    } catch (const std::exception& e) {
      fail("config overrides: not valid JSON: ", e.what());
    }
    if (!o.is_object()) fail("config overrides: expected a JSON object");
    for (auto it = o.begin(); it != o.end(); ++it) {
      if (it.value().is_null()) cfg_json.erase(it.key());
      else cfg_json[it.key()] = it.value();
    }
  }
  const std::string cfg_text = cfg_json.dump(2) + "\n";
  // The tensors are whatever the merged config describes, read by the same parser as a
  // user's checkpoint (so an override that gannet would refuse is refused here).
  const io::ModelConfig mc = io::parse_model_config(cfg_text, "config.json (preset + overrides)");
  const std::vector<Spec> specs = tensor_specs(mc);
  // What goes into the files: each spec as one float tensor, or (a quantized linear) its
  // codes and its scales, computed once from the same float values.
  using Fill = std::function<void(uint8_t*, int64_t, int64_t)>;
  struct Item {
    std::string name;
    DType dtype;
    std::vector<int64_t> shape;
    uint64_t bytes;
    Fill fill;  // (buf, first element, count)
  };
  std::vector<Item> items;
  const io::WeightQuantization::Method qm = mc.quantization.method;
  auto is_linear = [](const std::string& name) {
    const std::string suffix = "_proj.weight";
    return name.size() > suffix.size() && name.compare(name.size() - suffix.size(), suffix.size(), suffix) == 0;
  };
  for (const Spec& s : specs) {
    const uint64_t key = splitmix64(opt.seed ^ fnv1a(s.name));
    const Init init = s.init;
    int64_t n = 1;
    for (auto d : s.shape) n *= d;
    if (qm == io::WeightQuantization::Method::kNone || !is_linear(s.name)) {
      items.push_back({s.name, dtype, s.shape, uint64_t(n) * dtype_size(dtype), [=](uint8_t* buf, int64_t off, int64_t cnt) {
                         for (int64_t i = 0; i < cnt; ++i) {
                           const float v = sample(key, off + i, init);
                           if (dtype == DType::F32) std::memcpy(buf + 4 * i, &v, 4);
                           else {
                             const uint16_t h = dtype == DType::BF16 ? f32_to_bf16(v) : f32_to_f16(v);
                             std::memcpy(buf + 2 * i, &h, 2);
                           }
                         }
                       }});
      continue;
    }
    // Quantized on first use, shared by the two tensors it fills.
    const int64_t rows = s.shape[0], cols = s.shape[1];
    auto packed = std::make_shared<std::shared_ptr<kernels::OwnedPackedWeight>>();
    const int64_t block = mc.quantization.block;
    auto get = [=]() -> const kernels::OwnedPackedWeight& {
      if (!*packed) {
        auto row = [&](int64_t r, float* out) {
          for (int64_t c = 0; c < cols; ++c) out[c] = sample(key, r * cols + c, init);
        };
        *packed = qm == io::WeightQuantization::Method::kFp8Block ? kernels::quantize_fp8_block(rows, cols, block, row)
                                                                  : kernels::quantize_int8_row(rows, cols, row);
      }
      return **packed;
    };
    const bool fp8 = qm == io::WeightQuantization::Method::kFp8Block;
    items.push_back({s.name, fp8 ? DType::F8_E4M3 : DType::I8, s.shape, uint64_t(n),
                     [=](uint8_t* buf, int64_t off, int64_t cnt) { std::memcpy(buf, get().data.data() + off, size_t(cnt)); }});
    std::vector<int64_t> sshape = fp8 ? std::vector<int64_t>{(rows + block - 1) / block, (cols + block - 1) / block}
                                      : std::vector<int64_t>{rows, 1};
    const std::string sname = fp8 ? s.name + "_scale_inv" : s.name + "_scale";
    items.push_back({sname, DType::F32, sshape, uint64_t(sshape[0] * sshape[1]) * 4,
                     [=](uint8_t* buf, int64_t off, int64_t cnt) {
                       const auto& q = get();
                       std::memcpy(buf, q.scales.data() + off * 4, size_t(cnt) * 4);
                       // Both tensors are written: the float values are no longer needed.
                       if (off + cnt == sshape[0] * sshape[1]) packed->reset();
                     }});
  }
  uint64_t total = 0;
  for (const Item& it : items) total += it.bytes;
  // Group tensors into shards of at most shard_bytes (a tensor never splits).
  std::vector<std::vector<const Item*>> shards(1);
  uint64_t cur = 0;
  for (const Item& it : items) {
    if (opt.shard_bytes && cur > 0 && cur + it.bytes > opt.shard_bytes) {
      shards.emplace_back();
      cur = 0;
    }
    shards.back().push_back(&it);
    cur += it.bytes;
  }
  uint64_t done = 0;
  ordered_json weight_map;
  for (size_t si = 0; si < shards.size(); ++si) {
    io::SafetensorsWriter w;
    for (const Item* it : shards[si]) {
      const Fill fill = it->fill;
      const size_t esize = dtype_size(it->dtype);
      w.add(it->name, it->dtype, it->shape, [fill, esize, &done, &progress, total](uint8_t* buf, int64_t off, int64_t n) {
        fill(buf, off, n);
        done += uint64_t(n) * esize;
        if (progress) progress(done, total);
      });
    }
    std::string name = shards.size() == 1 ? "model.safetensors" : shard_name(int(si) + 1, int(shards.size()));
    for (const Item* it : shards[si]) weight_map[it->name] = name;
    w.write((fs::path(out_dir) / name).string());
  }
  if (shards.size() > 1) {
    ordered_json index;
    index["metadata"] = {{"total_size", total}};
    index["weight_map"] = weight_map;
    write_text(fs::path(out_dir) / "model.safetensors.index.json", index.dump(2) + "\n");
  }
  write_text(fs::path(out_dir) / "config.json", cfg_text);
  ordered_json gen;
  gen["bos_token_id"] = 0;
  gen["eos_token_id"] = 1;
  write_text(fs::path(out_dir) / "generation_config.json", gen.dump(2) + "\n");
  int n_files = 0;
  const EmbeddedFile* files = deepseek_v3_tokenizer_files(&n_files);
  for (int i = 0; i < n_files; ++i) write_text(fs::path(out_dir) / std::string(files[i].name), files[i].contents);
}

}  // namespace gannet::model
