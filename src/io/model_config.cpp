#include "io/model_config.h"

#include <filesystem>
#include <fstream>
#include <climits>
#include <initializer_list>
#include <nlohmann/json.hpp>
#include <sstream>

#include "core/error.h"
#include "io/deepseek_v41_config.h"
#include "io/deepseek_v4_config.h"
#include "io/json_fields.h"

namespace gannet::io {

using nlohmann::json;
using namespace json_fields;

namespace {

std::vector<int64_t> get_id_list(const json& j, const char* key, const std::string& file) {
  auto it = j.find(key);
  if (it == j.end() || it->is_null()) return {};
  auto id = [&](const json& v) {
    if (!v.is_number_integer() || v.get<int64_t>() < 0 || (v.is_number_unsigned() && v.get<uint64_t>() > INT32_MAX) ||
        v.get<int64_t>() > INT32_MAX)
      fail(file, ": '", key, "' must be a token id or a list of token ids (non-negative integers), got ", v.dump());
    return v.get<int64_t>();
  };
  if (it->is_number()) return {id(*it)};
  std::vector<int64_t> out;
  if (it->is_array())
    for (const json& v : *it) out.push_back(id(v));
  else
    fail(file, ": '", key, "' must be an integer or a list of integers");
  return out;
}

HiddenAct parse_hidden_act(const json& j, std::string* name, const std::string& file) {
  auto act = get_string(j, "hidden_act", file);
  auto alt = get_string(j, "hidden_activation", file);  // Gemma's spelling
  if (act && alt && *act != *alt)
    fail(file, ": 'hidden_act' = \"", *act, "\" and 'hidden_activation' = \"", *alt, "\" disagree");
  *name = act ? *act : alt ? *alt : "silu";
  const char* key = act ? "hidden_act" : "hidden_activation";
  if (*name == "silu" || *name == "swish") return HiddenAct::kSilu;
  if (*name == "gelu") return HiddenAct::kGeluErf;
  if (*name == "gelu_pytorch_tanh" || *name == "gelu_new") return HiddenAct::kGeluTanh;
  fail(file, ": '", key, "' = \"", *name, "\" is not supported (silu, swish, gelu, gelu_pytorch_tanh, gelu_new)");
}

// Qwen2/Qwen3 sliding-window attention, resolved as transformers does: it is active only
// with use_sliding_window true, and then covers the layers that layer_types marks
// "sliding_attention" (or, without layer_types, layers >= max_window_layers). gannet's
// attention is full, so an active window is refused rather than ignored.
void check_sliding_window(const json& j, int64_t n_layers, const std::string& file) {
  std::vector<bool> sliding(size_t(n_layers), false);
  auto lt = j.find("layer_types");
  const bool has_types = lt != j.end() && !lt->is_null();
  if (has_types) {
    if (!lt->is_array() || int64_t(lt->size()) != n_layers)
      fail(file, ": 'layer_types' must be a list of ", n_layers, " layer types (one per layer)");
    for (size_t i = 0; i < lt->size(); ++i) {
      const json& t = (*lt)[i];
      if (!t.is_string() || (t != "full_attention" && t != "sliding_attention"))
        fail(file, ": 'layer_types[", i, "]' = ", t.dump(), " is not supported (full_attention, sliding_attention)");
      sliding[i] = t == "sliding_attention";
    }
  }
  const bool use = get_bool(j, "use_sliding_window", false, file);
  // transformers' default window is 4096 when the key is absent; an explicit null turns it off.
  const bool window_null = j.contains("sliding_window") && j["sliding_window"].is_null();
  const int64_t window = get_int(j, {"sliding_window"}, file);
  int64_t mwl = get_int(j, {"max_window_layers"}, file);
  if (mwl < 0) mwl = 28;
  if (!has_types)
    for (int64_t i = 0; i < n_layers; ++i) sliding[size_t(i)] = i >= mwl;
  if (!use || window_null) return;
  for (int64_t i = 0; i < n_layers; ++i)
    if (sliding[size_t(i)])
      fail(file, ": 'use_sliding_window' = true makes layer ", i, " (and maybe others) sliding-window attention",
           " with a window of ", window < 0 ? 4096 : window, " tokens, which gannet does not implement",
           has_types ? " (see 'layer_types')" : " (see 'max_window_layers')");
}

}  // namespace

// DeepSeek-V4 and V4.1 parse their own configs; the common fields are filled from them.
template <typename C>
static ModelConfig common_fields(const C& v, ModelConfig c) {
  c.hidden_size = v.hidden_size;
  c.intermediate_size = v.moe_intermediate_size;
  c.num_hidden_layers = v.num_hidden_layers;
  c.num_attention_heads = v.num_attention_heads;
  c.num_key_value_heads = 1;
  c.head_dim = v.head_dim;
  c.vocab_size = v.vocab_size;
  c.max_position_embeddings = v.max_position_embeddings;
  c.rms_norm_eps = v.rms_norm_eps;
  c.rope_theta = v.rope_theta;
  c.rope_scaling = v.compress_scaling;
  c.rope_source = "rope_scaling (compressed layers only)";
  c.quantization.method = WeightQuantization::Method::kFp8Block;
  c.quantization.block = v.weight_block;
  c.quantization.pow2_activation_scales = true;
  c.bos_token_id = v.bos_token_id;
  c.eos_token_ids = v.eos_token_ids;
  c.torch_dtype = "bfloat16";
  return c;
}

static ModelConfig from_deepseek_v41(const json& j, ModelConfig c, const std::string& file) {
  auto v = std::make_shared<const DeepseekV41Config>(parse_deepseek_v41_config(j, file));
  c = common_fields(*v, std::move(c));
  c.deepseek_v41 = std::move(v);
  return c;
}

static ModelConfig from_deepseek_v4(const json& j, ModelConfig c, const std::string& file) {
  auto v = std::make_shared<const DeepseekV4Config>(parse_deepseek_v4_config(j, file));
  c = common_fields(*v, std::move(c));
  c.deepseek_v4 = std::move(v);
  return c;
}

ModelConfig parse_model_config(const std::string& text, const std::string& file) {
  json j;
  try {
    j = json::parse(text);
  } catch (const json::exception& e) {
    fail(file, ": not valid JSON: ", e.what());
  }
  if (!j.is_object()) fail(file, ": expected a JSON object");
  ModelConfig c;
  auto arch = j.find("architectures");
  if (arch == j.end() || !arch->is_array() || arch->empty() || !(*arch)[0].is_string())
    fail(file, ": 'architectures' must be a non-empty list of names");
  c.architecture = (*arch)[0].get<std::string>();
  if (j.contains("model_type") && j["model_type"].is_string()) c.model_type = j["model_type"];
  if (c.architecture == "DeepseekV41ForCausalLM" || c.architecture == "DeepseekV41ForConditionalGeneration")
    return from_deepseek_v41(j, c, file);
  if (c.architecture == "DeepseekV4ForCausalLM") return from_deepseek_v4(j, c, file);
  // Limits far above any real model, low enough that products cannot overflow.
  c.hidden_size = get_int(j, {"hidden_size", "n_embd", "d_model"}, file, 1 << 20);
  c.intermediate_size = get_int(j, {"intermediate_size", "n_inner", "ffn_dim"}, file, 1 << 22);
  c.num_hidden_layers = get_int(j, {"num_hidden_layers", "n_layer", "n_layers"}, file, 4096);
  c.num_attention_heads = get_int(j, {"num_attention_heads", "n_head", "n_heads"}, file, 4096);
  c.num_key_value_heads = get_int(j, {"num_key_value_heads", "n_kv_heads", "num_kv_heads"}, file, 4096);
  c.head_dim = get_int(j, {"head_dim"}, file, 4096);
  c.vocab_size = get_int(j, {"vocab_size", "n_vocab"}, file, 1 << 24);
  c.max_position_embeddings = get_int(j, {"max_position_embeddings", "n_positions", "n_ctx"}, file, 1 << 24);
  struct Req { const char* name; int64_t v; };
  for (Req r : {Req{"hidden_size", c.hidden_size}, Req{"intermediate_size", c.intermediate_size},
                Req{"num_hidden_layers", c.num_hidden_layers},
                Req{"num_attention_heads", c.num_attention_heads}, Req{"vocab_size", c.vocab_size}})
    if (r.v <= 0) fail(file, ": '", r.name, "' is missing or not positive");
  if (c.num_key_value_heads < 0) c.num_key_value_heads = c.num_attention_heads;
  if (c.num_key_value_heads <= 0 || c.num_attention_heads % c.num_key_value_heads != 0)
    fail(file, ": num_attention_heads (", c.num_attention_heads,
         ") must be a positive multiple of num_key_value_heads (", c.num_key_value_heads, ")");
  const bool is_qwen2 = c.architecture == "Qwen2ForCausalLM";
  const bool is_qwen3 = c.architecture == "Qwen3ForCausalLM";
  if (c.head_dim < 0 && is_qwen3) c.head_dim = 128;  // transformers' Qwen3Config default
  if (c.head_dim < 0) {
    if (c.hidden_size % c.num_attention_heads != 0)
      fail(file, ": hidden_size is not divisible by num_attention_heads and head_dim is not given");
    c.head_dim = c.hidden_size / c.num_attention_heads;
  }
  if (c.head_dim <= 0 || c.head_dim % 2 != 0) fail(file, ": head_dim must be a positive even number");
  if (c.max_position_embeddings == 0) fail(file, ": 'max_position_embeddings' must be positive");
  // transformers' defaults when absent: Llama 2048, Qwen2/Qwen3 32768.
  if (c.max_position_embeddings < 0) c.max_position_embeddings = is_qwen2 || is_qwen3 ? 32768 : 2048;
  c.rms_norm_eps = get_double(j, "rms_norm_eps", 1e-6, file);
  if (!(c.rms_norm_eps > 0 && c.rms_norm_eps < 1)) fail(file, ": 'rms_norm_eps' must be in (0, 1)");
  RopeConfig rope = parse_rope_config(j, c.head_dim, c.max_position_embeddings, file);
  c.rope_theta = rope.theta;
  c.rope_scaling = rope.scaling;
  c.rope_source = rope.source;
  c.activation = parse_hidden_act(j, &c.hidden_act, file);
  c.tie_word_embeddings = get_bool(j, "tie_word_embeddings", false, file);
  // Qwen2 always has q/k/v biases and never an o_proj bias, whatever attention_bias says
  // (transformers' Qwen2 reads no such field). Llama and Qwen3 put it on q, k, v and o.
  c.attention_bias = is_qwen2 || get_bool(j, "attention_bias", false, file);
  c.o_proj_bias = c.attention_bias && !is_qwen2;
  c.mlp_bias = get_bool(j, "mlp_bias", false, file);
  if (c.mlp_bias && (is_qwen2 || is_qwen3))
    fail(file, ": 'mlp_bias' = true, but ", c.architecture, "'s MLP has no biases");
  c.qk_norm = is_qwen3;
  if (is_qwen2 || is_qwen3) check_sliding_window(j, c.num_hidden_layers, file);
  if (j.contains("quantization_config")) c.quantization = parse_quantization_config(j["quantization_config"], file);
  // transformers 5 writes 'dtype', 4.x 'torch_dtype'. gannet computes in float32 from the
  // weights as stored (what transformers does when loaded with dtype=float32), so the field
  // is a hint, but one that names no float type is an error.
  auto dt = get_string(j, "dtype", file);
  const char* dt_key = "dtype";
  if (!dt) dt = get_string(j, "torch_dtype", file), dt_key = "torch_dtype";
  if (dt) {
    if (*dt != "float32" && *dt != "bfloat16" && *dt != "float16" && *dt != "auto")
      fail(file, ": '", dt_key, "' = \"", *dt, "\" is not supported (float32, bfloat16, float16)");
    c.torch_dtype = *dt;
  }
  c.bos_token_id = get_int(j, {"bos_token_id"}, file);
  c.eos_token_ids = get_id_list(j, "eos_token_id", file);
  return c;
}

std::string read_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) fail(path, ": cannot open");
  std::ostringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

ModelConfig load_model_config(const std::string& model_dir) {
  std::string path = (std::filesystem::path(model_dir) / "config.json").string();
  if (!std::filesystem::exists(path)) fail(model_dir, ": no config.json (is this a Hugging Face model directory?)");
  ModelConfig c = parse_model_config(read_file(path), path);
  apply_generation_config(model_dir, c);
  return c;
}

void apply_generation_config(const std::string& model_dir, ModelConfig& cfg) {
  std::string path = (std::filesystem::path(model_dir) / "generation_config.json").string();
  if (!std::filesystem::exists(path)) return;
  json j;
  try {
    j = json::parse(read_file(path));
  } catch (const json::exception& e) {
    fail(path, ": not valid JSON: ", e.what());
  }
  if (!j.is_object()) fail(path, ": expected a JSON object");
  int64_t bos = get_int(j, {"bos_token_id"}, path);
  if (bos >= 0) cfg.bos_token_id = bos;
  auto eos = get_id_list(j, "eos_token_id", path);
  if (!eos.empty()) cfg.eos_token_ids = eos;
}

int64_t ModelConfig::num_parameters() const {
  const int64_t h = hidden_size, q = num_attention_heads * head_dim, kv = num_key_value_heads * head_dim;
  int64_t per_layer = h * q + 2 * h * kv + q * h   // q, k, v, o projections
                      + 3 * h * intermediate_size  // gate, up, down
                      + 2 * h;                     // two RMSNorms
  if (attention_bias) per_layer += q + 2 * kv;
  if (o_proj_bias) per_layer += h;
  if (mlp_bias) per_layer += 2 * intermediate_size + h;
  if (qk_norm) per_layer += 2 * head_dim;
  int64_t emb = vocab_size * h;
  return num_hidden_layers * per_layer + emb * (tie_word_embeddings ? 1 : 2) + h;
}

int64_t ModelConfig::kv_bytes_per_token(int64_t elem_bytes) const {
  return 2 * num_hidden_layers * num_key_value_heads * head_dim * elem_bytes;
}

}  // namespace gannet::io
