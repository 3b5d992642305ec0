#include <cstdio>
#include <cmath>
#include <filesystem>
#include <sstream>
#include <optional>
#include <nlohmann/json.hpp>

#include "cli/commands.h"
#include "cli/flags.h"
#include "core/cpu_budget.h"
#include "core/cpu_features.h"
#include "core/progress_bar.h"
#include "io/checkpoint.h"
#include "io/model_config.h"
#include "gannet/engine_args.h"
#include "io/deepseek_v41_config.h"
#include "model/deepseek_v41/model.h"
#include "model/deepseek_v41/vision.h"
#include "model/deepseek_v4/tensor_plan.h"
#include "vision/image_processor.h"
#include "model/model.h"
#include "tokenizer/tokenizer.h"

namespace gannet::cli {

namespace {
const char* kInfoUsage =
    "usage: gannet info --model DIR [--quantize none|fp8|int8] [--memory SIZE] [--json]\n"
    "\n"
    "Prints the architecture, parameter count, bytes by dtype, KV-cache bytes per token and\n"
    "the CPU kernel path. The checkpoint is opened and validated, and the model is built, so\n"
    "a missing or mis-shaped tensor is reported here. 'read per token' is what one decode\n"
    "step streams (the linear weights and the output projection, scales included), by format;\n"
    "--quantize shows it after load-time conversion.\n"
    "\n"
    "DeepSeek-V4.1 needs only config.json (the weights are checked when present): parameters,\n"
    "weight bytes by dtype, bytes read per decode token (active experts only), KV-cache bytes\n"
    "per token in its compact forms and the fixed state bytes per sequence; --memory SIZE\n"
    "(e.g. 256GiB) adds how many tokens and full-context sequences fit beside the weights.\n"
    "DeepSeek-V4-Flash likewise needs only config.json (parameters, bytes, read per token, KV).\n"
    "With a vision tower (vision_config): its parameters and bytes, and for --image-size WxH\n"
    "(default 544x544) the image's patch grid, its tokens in the prompt and the FLOPs to encode it.\n";

// A directory with weights is checked by building the model (names, dtypes, shapes).
bool check_weights_if_present(const std::string& dir, const io::ModelConfig& cfg) {
  bool has_weights = false;
  for (const auto& e : std::filesystem::directory_iterator(dir))
    has_weights |= e.path().extension() == ".safetensors";
  if (has_weights) {
    io::Checkpoint ckpt(dir);
    (void)model::create_model(cfg, ckpt);
  }
  return has_weights;
}

// What the DeepSeek configs report from config.json alone.
struct ConfigSizes {
  int64_t params = 0;
  uint64_t weight_bytes = 0, read_bytes_per_token = 0;
  std::map<std::string, uint64_t> bytes_by_dtype;
  const kernels::CacheSpec* spec = nullptr;
  int64_t max_position_embeddings = 0;
};

nlohmann::ordered_json sizes_json(const std::string& dir, const io::ModelConfig& cfg, bool has_weights,
                                  const ConfigSizes& s) {
  nlohmann::ordered_json j;
  j["model"] = dir;
  j["architecture"] = cfg.architecture;
  j["weights_present"] = has_weights;
  j["num_parameters"] = s.params;
  j["weight_bytes"] = s.weight_bytes;
  j["bytes_by_dtype"] = s.bytes_by_dtype;
  j["read_bytes_per_token"] = s.read_bytes_per_token;
  j["kv_bytes_per_token"] = s.spec->bytes_per_token();
  j["state_bytes_per_seq"] = s.spec->state_bytes_per_seq;
  nlohmann::ordered_json groups = nlohmann::ordered_json::array();
  for (const auto& g : s.spec->groups)
    groups.push_back({{"name", g.name}, {"layers", g.layers}, {"bytes_per_entry", g.bytes_per_entry},
                      {"tokens_per_entry", g.tokens_per_entry}});
  j["kv_groups"] = groups;
  j["max_position_embeddings"] = s.max_position_embeddings;
  return j;
}

// weights by dtype, read per token, KV per token by group.
void print_sizes(const ConfigSizes& s) {
  std::printf("weights:            %s\n", format_bytes(s.weight_bytes).c_str());
  for (auto& [dt, b] : s.bytes_by_dtype) std::printf("  %-8s          %s\n", dt.c_str(), format_bytes(b).c_str());
  std::printf("read per token:     %s (active experts only)\n", format_bytes(s.read_bytes_per_token).c_str());
  std::printf("kv cache per token: %.1f bytes\n", s.spec->bytes_per_token());
  for (const auto& g : s.spec->groups)
    std::printf("  %s: %lld layers x %lld bytes per %lld tokens\n", g.name.c_str(), (long long)g.layers,
                (long long)g.bytes_per_entry, (long long)g.tokens_per_entry);
}

// DeepSeek-V4.1 from its config alone.
int info_deepseek_v41(const std::string& dir, const io::ModelConfig& cfg, const Flags& f) {
  const io::DeepseekV41Config& c = *cfg.deepseek_v41;
  const bool has_weights = check_weights_if_present(dir, cfg);
  if (!c.engram_layer_ids.empty()) {
    // The hash layout's primes must give engram_num_embeddings rows (throws naming it).
    std::vector<int64_t> identity(static_cast<size_t>(c.vocab_size));
    for (int64_t i = 0; i < c.vocab_size; ++i) identity[size_t(i)] = i;
    (void)model::deepseek_v41::make_engram_layout(c, identity);
  }
  const model::deepseek_v41::SizeSummary sz = model::deepseek_v41::size_summary(c);
  const model::deepseek_v41::CacheLayout lay = model::deepseek_v41::make_cache_layout(c);
  ConfigSizes sizes;
  sizes.params = sz.params;
  sizes.weight_bytes = sz.weight_bytes;
  sizes.read_bytes_per_token = sz.read_bytes_per_token;
  sizes.bytes_by_dtype = sz.bytes_by_dtype;
  sizes.spec = &lay.spec;
  sizes.max_position_embeddings = c.max_position_embeddings;
  const double kv_per_token = lay.spec.bytes_per_token();
  const int64_t state = lay.spec.state_bytes_per_seq;
  std::optional<uint64_t> memory;
  if (auto m = f.get("memory")) {
    try {
      memory = parse_memory_size(*m);
    } catch (const Error& e) {
      throw UsageError(std::string("--memory: ") + e.what());
    }
  }
  int64_t fit_tokens = -1, fit_seqs = -1;
  if (memory) {
    const double free = double(*memory) - double(sz.weight_bytes);
    fit_tokens = free > 0 ? int64_t(free / kv_per_token) : 0;
    const double per_seq = double(c.max_position_embeddings) * kv_per_token + double(state);
    fit_seqs = free > 0 ? int64_t(free / per_seq) : 0;
  }
  // The vision tower, and what one image of --image-size costs.
  struct {
    bool on = false;
    int w = 544, h = 544;
    vision::ImagePlan plan;
    double flops = 0;
  } img;
  if (c.vision.present) {
    img.on = true;
    if (auto s = f.get("image-size")) {
      char x = 0;
      std::istringstream in(*s);
      if (!(in >> img.w >> x >> img.h) || x != 'x' || img.w <= 0 || img.h <= 0 || !in.eof())
        throw UsageError("--image-size must be WIDTHxHEIGHT in pixels, e.g. 544x544");
    }
    img.plan = vision::plan_image(img.w, img.h, model::deepseek_v41::image_processor_config(c, dir));
    img.flops = 2 * model::deepseek_v41::vision_macs(c, img.plan.grid_h, img.plan.grid_w);
  } else if (f.has("image-size")) {
    throw UsageError("--image-size: " + dir + " has no vision tower (vision_config)");
  }
  if (f.has("json")) {
    nlohmann::ordered_json j = sizes_json(dir, cfg, has_weights, sizes);
    if (img.on) {
      j["vision"] = {{"num_parameters", sz.vision_params},
                     {"weight_bytes", sz.vision_bytes},
                     {"image_token_id", c.image_token_id},
                     {"image_size", {img.w, img.h}},
                     {"patch_grid", {img.plan.grid_h, img.plan.grid_w}},
                     {"tokens_per_image", img.plan.n_tokens},
                     {"flops_per_image", img.flops}};
    }
    if (memory) {
      j["memory"] = *memory;
      j["fit_tokens"] = fit_tokens;
      j["fit_full_context_sequences"] = fit_seqs;
    }
    std::printf("%s\n", j.dump().c_str());
    return 0;
  }
  std::printf("model:              %s%s\n", dir.c_str(), has_weights ? "" : " (config.json only)");
  std::printf("architecture:       %s\n", cfg.architecture.c_str());
  std::printf("parameters:         %lld (%.1f B; DSpark layers not counted)\n", (long long)sz.params,
              double(sz.params) / 1e9);
  std::printf("layers:             %lld, hidden %lld, heads %lld (dim %lld), experts %lld (top %lld, inter %lld), "
              "vocab %lld\n",
              (long long)c.num_hidden_layers, (long long)c.hidden_size, (long long)c.num_attention_heads,
              (long long)c.head_dim, (long long)c.n_routed_experts, (long long)c.num_experts_per_tok,
              (long long)c.moe_intermediate_size, (long long)c.vocab_size);
  print_sizes(sizes);
  std::printf("state per sequence: %s (window rings, open groups, Engram history)\n",
              format_bytes(uint64_t(state)).c_str());
  std::printf("context length:     %lld\n", (long long)c.max_position_embeddings);
  if (img.on) {
    std::printf("vision tower:       %lld parameters (%s), %lld layers, width %lld, patch %lld, image token %lld\n",
                (long long)sz.vision_params, format_bytes(sz.vision_bytes).c_str(), (long long)c.vision.num_hidden_layers,
                (long long)c.vision.hidden_size, (long long)c.vision.patch_size, (long long)c.image_token_id);
    std::printf("image %dx%d:       %dx%d patches -> %lld tokens in the prompt, %.1f GFLOP to encode\n", img.w, img.h,
                img.plan.grid_h, img.plan.grid_w, (long long)img.plan.n_tokens, img.flops / 1e9);
  }
  if (memory && *memory <= sz.weight_bytes)
    std::printf("in %s:  nothing: the weights alone need %s\n", format_bytes(*memory).c_str(),
                format_bytes(sz.weight_bytes).c_str());
  else if (memory)
    std::printf("in %s:  %lld tokens, or %lld sequences of the full context, beside the weights\n",
                format_bytes(*memory).c_str(), (long long)fit_tokens, (long long)fit_seqs);
  return 0;
}
// DeepSeek-V4-Flash from its config alone.
int info_deepseek_v4(const std::string& dir, const io::ModelConfig& cfg, const Flags& f) {
  const io::DeepseekV4Config& c = *cfg.deepseek_v4;
  const bool has_weights = check_weights_if_present(dir, cfg);
  const model::deepseek_v4::SizeSummary sz = model::deepseek_v4::size_summary(c);
  const model::deepseek_v4::CacheLayout lay = model::deepseek_v4::make_cache_layout(c);
  ConfigSizes sizes;
  sizes.params = sz.params;
  sizes.weight_bytes = sz.weight_bytes;
  sizes.read_bytes_per_token = sz.read_bytes_per_token;
  sizes.bytes_by_dtype = sz.bytes_by_dtype;
  sizes.spec = &lay.spec;
  sizes.max_position_embeddings = c.max_position_embeddings;
  const int64_t state = lay.spec.state_bytes_per_seq;
  if (f.has("memory")) throw UsageError("--memory is supported for DeepSeek-V4.1 configs");
  if (f.has("json")) {
    nlohmann::ordered_json j = sizes_json(dir, cfg, has_weights, sizes);
    std::printf("%s\n", j.dump().c_str());
    return 0;
  }
  std::printf("model:              %s%s\n", dir.c_str(), has_weights ? "" : " (config.json only)");
  std::printf("architecture:       %s\n", cfg.architecture.c_str());
  std::printf("parameters:         %lld (%.1f B; MTP layers not counted)\n", (long long)sz.params, double(sz.params) / 1e9);
  std::printf("layers:             %lld, hidden %lld, heads %lld (dim %lld), experts %lld (top %lld, inter %lld, "
              "%lld hash-routed layers), vocab %lld\n",
              (long long)c.num_hidden_layers, (long long)c.hidden_size, (long long)c.num_attention_heads,
              (long long)c.head_dim, (long long)c.n_routed_experts, (long long)c.num_experts_per_tok,
              (long long)c.moe_intermediate_size, (long long)c.num_hash_layers, (long long)c.vocab_size);
  print_sizes(sizes);
  std::printf("state per sequence: %s (window rings, compressor and indexer rings)\n", format_bytes(uint64_t(state)).c_str());
  std::printf("context length:     %lld\n", (long long)c.max_position_embeddings);
  return 0;
}

}  // namespace

int cmd_info(const Args& args) {
  Flags f(args, {"model", "quantize", "memory", "image-size"}, {"json", "help"});
  if (f.has("help")) {
    std::fputs(kInfoUsage, stdout);
    return 0;
  }
  const std::string dir = f.require("model");
  io::ModelConfig cfg = io::load_model_config(dir);
  if (auto q = f.get("quantize")) {
    try {
      cfg.quantize_at_load = io::parse_quantize_flag(*q);
    } catch (const Error& e) {
      throw UsageError(e.what());
    }
  }
  if (cfg.deepseek_v41) return info_deepseek_v41(dir, cfg, f);
  if (cfg.deepseek_v4) {
    if (f.has("image-size")) throw UsageError("--image-size: " + dir + " has no vision tower (vision_config)");
    return info_deepseek_v4(dir, cfg, f);
  }
  if (f.has("memory")) throw UsageError("--memory is supported for DeepSeek-V4.1 configs");
  if (f.has("image-size")) throw UsageError("--image-size: " + dir + " has no vision tower (vision_config)");
  io::Checkpoint ckpt(dir);
  auto model = model::create_model(cfg, ckpt);  // validates names and shapes
  const int64_t kv_bytes = int64_t(std::llround(model->cache_spec().bytes_per_token()));
  const auto by_dtype = ckpt.bytes_by_dtype();
  // A tokenizer that can produce ids the model has no row for makes some prompts fail.
  int64_t tokenizer_ids = -1;
  if (std::filesystem::exists(std::filesystem::path(dir) / "tokenizer.json")) {
    tokenizer_ids = int64_t(tokenizer::Tokenizer::from_dir(dir).vocab_size());
    if (tokenizer_ids > cfg.vocab_size)
      std::fprintf(stderr,
                   "warning: the tokenizer has ids up to %lld but vocab_size is %lld: text that tokenizes to an id "
                   ">= %lld will be rejected\n",
                   (long long)(tokenizer_ids - 1), (long long)cfg.vocab_size, (long long)cfg.vocab_size);
  }
  const std::string rope = std::string(io::rope_kind_name(cfg.rope_scaling.kind)) + ", theta " +
                           nlohmann::json(cfg.rope_theta).dump() + " (from " + cfg.rope_source + ")";
  std::string biases;
  if (cfg.attention_bias) biases += cfg.o_proj_bias ? "q/k/v/o" : "q/k/v";
  if (cfg.mlp_bias) biases += std::string(biases.empty() ? "" : ", ") + "mlp";
  if (biases.empty()) biases = "none";
  if (f.has("json")) {
    nlohmann::ordered_json j;
    j["model"] = dir;
    j["architecture"] = cfg.architecture;
    j["num_parameters"] = ckpt.total_elements();
    j["num_parameters_from_config"] = cfg.num_parameters();
    j["bytes_by_dtype"] = by_dtype;
    j["total_bytes"] = ckpt.total_bytes();
    j["quantization"] = io::quant_method_name(cfg.quantization.method);
    j["read_bytes_per_token"] = model->weight_bytes();
    j["read_bytes_by_format"] = model->weight_bytes_by_format();
    j["hidden_size"] = cfg.hidden_size;
    j["num_hidden_layers"] = cfg.num_hidden_layers;
    j["num_attention_heads"] = cfg.num_attention_heads;
    j["num_key_value_heads"] = cfg.num_key_value_heads;
    j["head_dim"] = cfg.head_dim;
    j["intermediate_size"] = cfg.intermediate_size;
    j["vocab_size"] = cfg.vocab_size;
    j["max_position_embeddings"] = cfg.max_position_embeddings;
    j["hidden_act"] = cfg.hidden_act;
    j["rope_type"] = io::rope_kind_name(cfg.rope_scaling.kind);
    j["rope_theta"] = cfg.rope_theta;
    j["rope_source"] = cfg.rope_source;
    j["attention_bias"] = cfg.attention_bias;
    j["o_proj_bias"] = cfg.o_proj_bias;
    j["mlp_bias"] = cfg.mlp_bias;
    j["tokenizer_vocab_size"] = tokenizer_ids;
    j["kv_bytes_per_token"] = kv_bytes;
    j["kernel_path"] = kernel_path_name();
    j["usable_cpus"] = usable_cpus();
    std::printf("%s\n", j.dump().c_str());
    return 0;
  }
  std::printf("model:              %s\n", dir.c_str());
  std::printf("architecture:       %s\n", cfg.architecture.c_str());
  std::printf("parameters:         %lld (%.3f B)\n", (long long)ckpt.total_elements(), double(ckpt.total_elements()) / 1e9);
  std::printf("layers:             %lld, hidden %lld, heads %lld (kv %lld, dim %lld), ffn %lld, vocab %lld\n",
              (long long)cfg.num_hidden_layers, (long long)cfg.hidden_size, (long long)cfg.num_attention_heads,
              (long long)cfg.num_key_value_heads, (long long)cfg.head_dim, (long long)cfg.intermediate_size,
              (long long)cfg.vocab_size);
  std::printf("activation:         %s; biases: %s\n", cfg.hidden_act.c_str(), biases.c_str());
  std::printf("rope:               %s\n", rope.c_str());
  std::printf("weights:            %s\n", format_bytes(ckpt.total_bytes()).c_str());
  for (auto& [dt, b] : by_dtype) std::printf("  %-8s          %s\n", dt.c_str(), format_bytes(b).c_str());
  std::printf("quantization:       %s (config.json)%s\n", io::quant_method_name(cfg.quantization.method),
              cfg.quantize_at_load == io::WeightQuantization::Method::kNone
                  ? ""
                  : (std::string("; converted at load to ") + io::quant_method_name(cfg.quantize_at_load)).c_str());
  std::printf("read per token:     %s\n", format_bytes(model->weight_bytes()).c_str());
  for (auto& [fm, b] : model->weight_bytes_by_format())
    std::printf("  %-8s          %s\n", fm.c_str(), format_bytes(b).c_str());
  {
    const kernels::CacheSpec spec = model->cache_spec();
    std::string groups;
    for (const auto& g : spec.groups)
      groups += (groups.empty() ? "" : ", ") + g.name + " " + kernels::cache_format_name(g.format);
    std::printf("kv cache per token: %lld bytes (%s, all layers)", (long long)kv_bytes, groups.c_str());
    if (spec.state_bytes_per_seq) std::printf(" + %s of state per sequence", format_bytes(uint64_t(spec.state_bytes_per_seq)).c_str());
    std::printf("\n");
  }
  std::printf("context length:     %lld\n", (long long)cfg.max_position_embeddings);
  std::printf("kernel path:        %s\n", kernel_path_name());
  std::printf("usable cpus:        %d (affinity mask and cgroup quota; the default --threads)\n", usable_cpus());
  return 0;
}

}  // namespace gannet::cli
