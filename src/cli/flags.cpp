#include "cli/flags.h"

#include <cerrno>
#include <cmath>
#include <cstdlib>

namespace gannet::cli {

Flags::Flags(const std::vector<std::string>& args, std::set<std::string> value_flags,
             std::set<std::string> bool_flags) {
  for (size_t i = 0; i < args.size(); ++i) {
    const std::string& a = args[i];
    if (a.rfind("--", 0) != 0) throw UsageError("unexpected argument '" + a + "'");
    std::string name = a.substr(2), value;
    bool inline_value = false;
    if (auto eq = name.find('='); eq != std::string::npos) {
      value = name.substr(eq + 1);
      name = name.substr(0, eq);
      inline_value = true;
    }
    if (value_flags.count(name)) {
      if (!inline_value) {
        if (i + 1 >= args.size()) throw UsageError("--" + name + " needs a value");
        value = args[++i];
      }
    } else if (bool_flags.count(name)) {
      if (inline_value) throw UsageError("--" + name + " takes no value");
      value = "1";
    } else {
      throw UsageError("unknown flag --" + name);
    }
    if (values_.count(name)) throw UsageError("--" + name + " given more than once");
    values_[name] = value;
  }
}

std::optional<std::string> Flags::get(const std::string& name) const {
  auto it = values_.find(name);
  if (it == values_.end()) return std::nullopt;
  return it->second;
}

std::string Flags::require(const std::string& name) const {
  auto v = get(name);
  if (!v) throw UsageError("--" + name + " is required");
  return *v;
}

std::string Flags::get_or(const std::string& name, const std::string& def) const {
  return get(name).value_or(def);
}

int64_t Flags::get_int(const std::string& name, int64_t def) const {
  auto v = get(name);
  return v ? parse_int("--" + name, *v) : def;
}

int64_t Flags::get_int_in(const std::string& name, int64_t def, int64_t lo, int64_t hi) const {
  const int64_t v = get_int(name, def);
  if (has(name) && (v < lo || v > hi))
    throw UsageError("--" + name + " must be in [" + std::to_string(lo) + ", " + std::to_string(hi) + "], got " +
                     std::to_string(v));
  return v;
}

double Flags::get_double(const std::string& name, double def) const {
  auto v = get(name);
  return v ? parse_double("--" + name, *v) : def;
}

int64_t parse_int(const std::string& flag, const std::string& text) {
  errno = 0;
  char* end = nullptr;
  long long v = std::strtoll(text.c_str(), &end, 10);
  if (text.empty() || *end != '\0' || errno == ERANGE)
    throw UsageError(flag + " expects an integer, got '" + text + "'");
  return v;
}

double parse_double(const std::string& flag, const std::string& text) {
  errno = 0;
  char* end = nullptr;
  double v = std::strtod(text.c_str(), &end);
  if (text.empty() || *end != '\0' || errno == ERANGE || !std::isfinite(v))
    throw UsageError(flag + " expects a number, got '" + text + "'");
  return v;
}

void apply_speculative_flags(const Flags& f, EngineArgs& ea) {
  if (auto v = f.get("speculative")) ea.speculative = *v;
  ea.num_speculative_tokens = f.get_int_in("num-speculative-tokens", ea.num_speculative_tokens, 1, 16);
  if (auto v = f.get("speculative-verify")) ea.speculative_verify = *v;
  if (auto v = f.get("speculative-sampling")) ea.speculative_sampling = *v;
  ea.ngram_min = int(f.get_int_in("ngram-min", ea.ngram_min, 1, 64));
  ea.ngram_max = int(f.get_int_in("ngram-max", ea.ngram_max, 1, 64));
}

void apply_engine_flags(const Flags& f, EngineArgs& ea) {
  try {
    ea.apply_environment();
    ea.threads = int(f.get_int_in("threads", ea.threads, 1, 1024));
    if (auto m = f.get("kv-cache-memory")) {
      ea.kv_cache_memory = parse_memory_size(*m);
      if (ea.kv_cache_memory == 0) throw UsageError("--kv-cache-memory must be more than 0 bytes");
    }
    ea.max_num_seqs = f.get_int_in("max-num-seqs", ea.max_num_seqs, 1, 1 << 20);
    ea.max_num_batched_tokens = f.get_int_in("max-num-batched-tokens", ea.max_num_batched_tokens, 1, 1 << 24);
    ea.block_size = int(f.get_int_in("block-size", ea.block_size, 1, 4096));
    ea.max_model_len = f.get_int_in("max-model-len", ea.max_model_len, 1, 1 << 24);
    ea.limit_images_per_prompt = f.get_int_in("limit-images-per-prompt", ea.limit_images_per_prompt, 0, 1 << 16);
    ea.max_image_pixels = f.get_int_in("max-image-pixels", ea.max_image_pixels, 1, int64_t(1) << 40);
    if (auto a = f.get("async-scheduling")) ea.async_scheduling = parse_on_off("--async-scheduling", *a);
    if (auto q = f.get("quantize")) ea.quantize = *q;
    if (auto w = f.get("weight-memory")) ea.weight_memory = *w;
    if (auto a = f.get("exact-activations")) ea.exact_activations = parse_on_off("--exact-activations", *a);
    if (f.has("yoco-keep-tokens")) ea.yoco_keep_tokens = f.get_int_in("yoco-keep-tokens", 140, 1, 1 << 24);
    if (f.has("no-yoco-replay")) ea.yoco_replay = 0;
    if (f.has("no-kv-fake-quant")) ea.kv_fake_quant = 0;
    if (f.has("enable-prefix-caching") && f.has("no-prefix-caching"))
      throw UsageError("--enable-prefix-caching and --no-prefix-caching contradict each other");
    if (f.has("enable-prefix-caching")) ea.enable_prefix_caching = 1;
    if (f.has("no-prefix-caching")) ea.enable_prefix_caching = 0;
    if (auto d = f.get("prefix-cache-dir")) {
      if (d->empty()) throw UsageError("--prefix-cache-dir is empty");
      ea.prefix_cache_dir = *d;
    }
    if (auto m = f.get("prefix-cache-disk-size")) {
      ea.prefix_cache_disk_size = parse_memory_size(*m);
      if (ea.prefix_cache_disk_size == 0) throw UsageError("--prefix-cache-disk-size must be more than 0 bytes");
    }
    ea.prefix_wait_steps = f.get_int_in("prefix-wait-steps", ea.prefix_wait_steps, 0, 1 << 20);
    ea.prefix_state_snapshots = f.get_int_in("prefix-state-snapshots", ea.prefix_state_snapshots, 0, 1 << 20);
    if (auto v = f.get("kv-cache-dtype")) ea.kv_cache_dtype = *v;
    if (auto a = f.get("expert-parallel")) ea.expert_parallel = parse_on_off("--expert-parallel", *a) ? 1 : 0;
    ea.ep_redundant_experts = f.get_int_in("ep-redundant-experts", ea.ep_redundant_experts, 0, 1 << 16);
    ea.eplb_interval = f.get_int_in("eplb-interval", ea.eplb_interval, 0, int64_t(1) << 40);
    ea.eplb_window = f.get_int_in("eplb-window", ea.eplb_window, 0, int64_t(1) << 40);
    apply_speculative_flags(f, ea);
    if (auto a = f.get("act-quant")) {
      if (*a != "none" && *a != "fp8") throw UsageError("--act-quant must be none or fp8, got '" + *a + "'");
      const bool on = *a == "fp8";
      if (f.has("exact-activations") && on != ea.exact_activations)
        throw UsageError("--act-quant " + *a + " and --exact-activations disagree");
      ea.exact_activations = on;
    }
    ea.validate();
  } catch (const UsageError&) {
    throw;
  } catch (const Error& e) {
    throw UsageError(e.what());
  }
}

}  // namespace gannet::cli
