#include "io/model_config.h"

#include <filesystem>
#include <fstream>
#include <climits>
#include <initializer_list>
#include <nlohmann/json.hpp>
#include <sstream>

#include "core/error.h"

namespace gannet::io {

using nlohmann::json;

namespace {

// First present key among spellings, as a non-negative integer; -1 when absent. Present
// values must lie in [0, max]: config values size allocations before any tensor is read.
int64_t get_int(const json& j, std::initializer_list<const char*> keys, const std::string& file,
                int64_t max = int64_t(1) << 40) {
  for (const char* k : keys) {
    auto it = j.find(k);
    if (it == j.end() || it->is_null()) continue;
    if (!it->is_number_integer()) fail(file, ": '", k, "' must be an integer");
    if (it->is_number_unsigned() ? it->get<uint64_t>() > uint64_t(max) : (it->get<int64_t>() < 0 || it->get<int64_t>() > max))
      fail(file, ": '", k, "' = ", it->dump(), " is outside [0, ", max, "]");
    return it->get<int64_t>();
  }
  return -1;
}

double get_double(const json& j, const char* key, double def, const std::string& file) {
  auto it = j.find(key);
  if (it == j.end() || it->is_null()) return def;
  if (!it->is_number()) fail(file, ": '", key, "' must be a number");
  return it->get<double>();
}

bool get_bool(const json& j, const char* key, bool def, const std::string& file) {
  auto it = j.find(key);
  if (it == j.end() || it->is_null()) return def;
  if (!it->is_boolean()) fail(file, ": '", key, "' must be true or false");
  return it->get<bool>();
}

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

RopeScaling parse_rope_scaling(const json& j, const std::string& file) {
  RopeScaling r;
  auto it = j.find("rope_scaling");
  if (it == j.end() || it->is_null()) return r;
  if (!it->is_object()) fail(file, ": 'rope_scaling' must be an object");
  const json& s = *it;
  std::string type;
  for (const char* k : {"rope_type", "type"})
    if (s.contains(k) && s[k].is_string()) {
      type = s[k].get<std::string>();
      break;
    }
  if (type == "default" || type.empty()) return r;
  if (type == "linear") r.kind = RopeScaling::Kind::kLinear;
  else if (type == "llama3") r.kind = RopeScaling::Kind::kLlama3;
  else if (type == "yarn") r.kind = RopeScaling::Kind::kYarn;
  else fail(file, ": rope_scaling type '", type, "' is not supported (default, linear, llama3, yarn)");
  r.factor = get_double(s, "factor", 1.0, file);
  if (r.factor <= 0) fail(file, ": rope_scaling.factor must be > 0");
  r.low_freq_factor = get_double(s, "low_freq_factor", 1.0, file);
  r.high_freq_factor = get_double(s, "high_freq_factor", 4.0, file);
  r.original_max_position_embeddings = get_int(s, {"original_max_position_embeddings"}, file);
  r.beta_fast = get_double(s, "beta_fast", 32.0, file);
  r.beta_slow = get_double(s, "beta_slow", 1.0, file);
  r.mscale = get_double(s, "mscale", 0.0, file);
  r.mscale_all_dim = get_double(s, "mscale_all_dim", 0.0, file);
  r.attention_factor = get_double(s, "attention_factor", 0.0, file);
  if (r.kind == RopeScaling::Kind::kLlama3 && r.original_max_position_embeddings <= 0)
    fail(file, ": llama3 rope_scaling needs original_max_position_embeddings");
  return r;
}

}  // namespace

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
  if (c.head_dim < 0) {
    if (c.hidden_size % c.num_attention_heads != 0)
      fail(file, ": hidden_size is not divisible by num_attention_heads and head_dim is not given");
    c.head_dim = c.hidden_size / c.num_attention_heads;
  }
  if (c.head_dim <= 0 || c.head_dim % 2 != 0) fail(file, ": head_dim must be a positive even number");
  if (c.max_position_embeddings == 0) fail(file, ": 'max_position_embeddings' must be positive");
  if (c.max_position_embeddings < 0) c.max_position_embeddings = 2048;
  c.rms_norm_eps = get_double(j, "rms_norm_eps", 1e-6, file);
  if (!(c.rms_norm_eps > 0 && c.rms_norm_eps < 1)) fail(file, ": 'rms_norm_eps' must be in (0, 1)");
  c.rope_theta = get_double(j, "rope_theta", 10000.0, file);
  if (c.rope_theta <= 0) fail(file, ": rope_theta must be > 0");
  c.rope_scaling = parse_rope_scaling(j, file);
  c.tie_word_embeddings = get_bool(j, "tie_word_embeddings", false, file);
  // Qwen2 always has q/k/v biases, whatever attention_bias says (as in transformers).
  const bool is_qwen2 = c.architecture == "Qwen2ForCausalLM";
  c.attention_bias = is_qwen2 || get_bool(j, "attention_bias", false, file);
  if (get_bool(j, "mlp_bias", false, file)) fail(file, ": mlp_bias = true is not supported");
  c.qk_norm = c.architecture == "Qwen3ForCausalLM";
  if (j.contains("torch_dtype") && j["torch_dtype"].is_string()) c.torch_dtype = j["torch_dtype"];
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
  if (qk_norm) per_layer += 2 * head_dim;
  int64_t emb = vocab_size * h;
  return num_hidden_layers * per_layer + emb * (tie_word_embeddings ? 1 : 2) + h;
}

int64_t ModelConfig::kv_bytes_per_token(int64_t elem_bytes) const {
  return 2 * num_hidden_layers * num_key_value_heads * head_dim * elem_bytes;
}

}  // namespace gannet::io
