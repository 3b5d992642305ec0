#include "gannet/engine_args.h"

#include <cctype>
#include <cmath>
#include <cstdlib>
#include <sstream>

#include "core/error.h"
#include "io/checkpoint.h"
#include "io/quant_config.h"

namespace gannet {

uint64_t parse_memory_size(const std::string& text) {
  size_t i = 0;
  while (i < text.size() && (std::isdigit(static_cast<unsigned char>(text[i])) || text[i] == '.')) ++i;
  const std::string num = text.substr(0, i);
  std::string unit = text.substr(i);
  while (!unit.empty() && unit.front() == ' ') unit.erase(unit.begin());
  char* end = nullptr;
  const double v = std::strtod(num.c_str(), &end);
  if (num.empty() || *end != '\0' || !std::isfinite(v) || v < 0 || v > 1e18)
    fail("memory size '", text, "' is not a number with an optional unit (e.g. 4GiB, 512MiB, 2GB)");
  double mult = 1;
  std::string u;
  for (char c : unit) u += char(std::tolower(static_cast<unsigned char>(c)));
  if (u.empty() || u == "b") mult = 1;
  else if (u == "k" || u == "kb") mult = 1e3;
  else if (u == "m" || u == "mb") mult = 1e6;
  else if (u == "g" || u == "gb") mult = 1e9;
  else if (u == "t" || u == "tb") mult = 1e12;
  else if (u == "kib") mult = 1024.0;
  else if (u == "mib") mult = 1024.0 * 1024;
  else if (u == "gib") mult = 1024.0 * 1024 * 1024;
  else if (u == "tib") mult = 1024.0 * 1024 * 1024 * 1024;
  else fail("memory size '", text, "' has an unknown unit '", unit, "' (use B, KB, MB, GB, KiB, MiB, GiB)");
  if (v * mult > 1.8e19) fail("memory size '", text, "' is too large");
  return uint64_t(v * mult);
}

bool parse_on_off(const std::string& name, const std::string& v) {
  if (v == "on" || v == "1" || v == "true") return true;
  if (v == "off" || v == "0" || v == "false") return false;
  fail(name, " must be on or off, got '", v, "'");
}

void EngineArgs::apply_environment() {
  auto env = [](const char* name) -> const char* {
    const char* v = std::getenv(name);
    return v && *v ? v : nullptr;
  };
  auto to_int = [](const char* name, const char* v) {
    char* end = nullptr;
    long long x = std::strtoll(v, &end, 10);
    if (*end != '\0') fail(name, "='", v, "' is not an integer");
    return int64_t(x);
  };
  if (auto v = env("GANNET_THREADS")) threads = int(to_int("GANNET_THREADS", v));
  if (auto v = env("GANNET_KV_CACHE_MEMORY")) kv_cache_memory = parse_memory_size(v);
  if (auto v = env("GANNET_MAX_NUM_SEQS")) max_num_seqs = to_int("GANNET_MAX_NUM_SEQS", v);
  if (auto v = env("GANNET_MAX_NUM_BATCHED_TOKENS")) max_num_batched_tokens = to_int("GANNET_MAX_NUM_BATCHED_TOKENS", v);
  if (auto v = env("GANNET_BLOCK_SIZE")) block_size = int(to_int("GANNET_BLOCK_SIZE", v));
  if (auto v = env("GANNET_MAX_MODEL_LEN")) max_model_len = to_int("GANNET_MAX_MODEL_LEN", v);
  if (auto v = env("GANNET_QUANTIZE")) quantize = v;
  if (auto v = env("GANNET_WEIGHT_MEMORY")) weight_memory = v;
  if (auto v = env("GANNET_EXACT_ACTIVATIONS")) exact_activations = parse_on_off("GANNET_EXACT_ACTIVATIONS", v);
  if (auto v = env("GANNET_ASYNC_SCHEDULING")) async_scheduling = parse_on_off("GANNET_ASYNC_SCHEDULING", v);
  if (auto v = env("GANNET_YOCO_KEEP_TOKENS")) yoco_keep_tokens = to_int("GANNET_YOCO_KEEP_TOKENS", v);
  if (auto v = env("GANNET_YOCO_REPLAY")) yoco_replay = parse_on_off("GANNET_YOCO_REPLAY", v) ? 1 : 0;
  if (auto v = env("GANNET_KV_FAKE_QUANT")) kv_fake_quant = parse_on_off("GANNET_KV_FAKE_QUANT", v) ? 1 : 0;
  if (auto v = env("GANNET_KV_CACHE_DTYPE")) kv_cache_dtype = v;
  if (auto v = env("GANNET_PREFIX_CACHING")) enable_prefix_caching = parse_on_off("GANNET_PREFIX_CACHING", v) ? 1 : 0;
  if (auto v = env("GANNET_PREFIX_CACHE_DIR")) prefix_cache_dir = v;
  if (auto v = env("GANNET_PREFIX_CACHE_DISK_SIZE")) prefix_cache_disk_size = parse_memory_size(v);
  if (auto v = env("GANNET_PREFIX_WAIT_STEPS")) prefix_wait_steps = to_int("GANNET_PREFIX_WAIT_STEPS", v);
  if (auto v = env("GANNET_PREFIX_STATE_SNAPSHOTS"))
    prefix_state_snapshots = to_int("GANNET_PREFIX_STATE_SNAPSHOTS", v);
  if (auto v = env("GANNET_SPECULATIVE")) speculative = v;
  if (auto v = env("GANNET_NUM_SPECULATIVE_TOKENS")) num_speculative_tokens = to_int("GANNET_NUM_SPECULATIVE_TOKENS", v);
  if (auto v = env("GANNET_SPECULATIVE_VERIFY")) speculative_verify = v;
  if (auto v = env("GANNET_SPECULATIVE_SAMPLING")) speculative_sampling = v;
  if (auto v = env("GANNET_NGRAM_MIN")) ngram_min = int(to_int("GANNET_NGRAM_MIN", v));
  if (auto v = env("GANNET_NGRAM_MAX")) ngram_max = int(to_int("GANNET_NGRAM_MAX", v));
  if (auto v = env("GANNET_EXPERT_PARALLEL")) expert_parallel = parse_on_off("GANNET_EXPERT_PARALLEL", v) ? 1 : 0;
  if (auto v = env("GANNET_EP_REDUNDANT_EXPERTS")) ep_redundant_experts = to_int("GANNET_EP_REDUNDANT_EXPERTS", v);
  if (auto v = env("GANNET_EPLB_INTERVAL")) eplb_interval = to_int("GANNET_EPLB_INTERVAL", v);
  if (auto v = env("GANNET_EPLB_WINDOW")) eplb_window = to_int("GANNET_EPLB_WINDOW", v);
}

void EngineArgs::validate() const {
  if (model.empty()) fail("no model directory given");
  if (threads < 0) fail("--threads must be >= 1, got ", threads);
  if (max_num_seqs < 1) fail("--max-num-seqs must be >= 1, got ", max_num_seqs);
  if (max_num_batched_tokens < 1) fail("--max-num-batched-tokens must be >= 1, got ", max_num_batched_tokens);
  if (block_size < 1 || block_size > 4096) fail("--block-size must be in [1, 4096], got ", block_size);
  if (max_model_len < 0) fail("--max-model-len must be >= 1, got ", max_model_len);
  if (limit_images_per_prompt < 0) fail("--limit-images-per-prompt must be >= 0, got ", limit_images_per_prompt);
  if (max_image_pixels < 1) fail("--max-image-pixels must be >= 1, got ", max_image_pixels);
  io::parse_quantize_flag(quantize);
  io::parse_weight_memory(weight_memory);
  if (!(watermark >= 0 && watermark < 1)) fail("watermark must be in [0, 1), got ", watermark);
  if (kv_cache_dtype != "auto" && kv_cache_dtype != "f32" && kv_cache_dtype != "bf16")
    fail("--kv-cache-dtype must be auto, f32 or bf16, got '", kv_cache_dtype, "'");
  if (yoco_keep_tokens != -1 && yoco_keep_tokens < 1)
    fail("--yoco-keep-tokens must be >= 1, got ", yoco_keep_tokens);
  if (speculative != "off" && speculative != "ngram" && speculative != "dspark")
    fail("--speculative must be off, ngram or dspark, got '", speculative, "'");
  if (num_speculative_tokens < 0 || num_speculative_tokens > 16)
    fail("--num-speculative-tokens must be in [1, 16], got ", num_speculative_tokens);
  if (num_speculative_tokens > 0 && speculative == "off")
    fail("--num-speculative-tokens ", num_speculative_tokens, " needs --speculative ngram or dspark");
  if (speculative_verify != "fixed" && speculative_verify != "varlen")
    fail("--speculative-verify must be fixed or varlen, got '", speculative_verify, "'");
  if (speculative_sampling != "exact" && speculative_sampling != "rejection")
    fail("--speculative-sampling must be exact or rejection, got '", speculative_sampling, "'");
  if (speculative_sampling == "rejection" && speculative != "dspark")
    fail("--speculative-sampling rejection samples drafts from the drafter's distribution; it needs --speculative "
         "dspark (n-gram drafts have none: their exact verification is already rejection sampling of a point mass)");
  if (speculative_sampling == "rejection" && speculative_verify == "varlen")
    fail("--speculative-sampling rejection with --speculative-verify varlen: rejection-sampled tokens depend on "
         "how many drafts are verified, which varlen chooses from step timings; use fixed (or exact sampling)");
  if (speculative_verify == "varlen" && speculative != "dspark")
    fail("--speculative-verify varlen schedules by DSpark's confidences; it needs --speculative dspark (got ",
         speculative, ")");
  if (prefix_cache_disk_size > 0 && prefix_cache_dir.empty())
    fail("--prefix-cache-disk-size needs --prefix-cache-dir (the directory it sizes)");
  if (!prefix_cache_dir.empty() && enable_prefix_caching == 0)
    fail("--prefix-cache-dir is the prefix cache's disk tier; it cannot be used with --no-prefix-caching");
  if (prefix_wait_steps < 0) fail("--prefix-wait-steps must be >= 0 (0: never wait), got ", prefix_wait_steps);
  if (prefix_state_snapshots < -1)
    fail("--prefix-state-snapshots must be >= 0 (0: off), got ", prefix_state_snapshots);
  if (prefix_state_snapshots > 0 && enable_prefix_caching == 0)
    fail("--prefix-state-snapshots keeps states for prefix-cache hits; it cannot be used with --no-prefix-caching");
  if (ep_redundant_experts < 0) fail("--ep-redundant-experts must be >= 0, got ", ep_redundant_experts);
  if (eplb_interval < 0) fail("--eplb-interval must be >= 0 (0: off), got ", eplb_interval);
  if (eplb_window < 0) fail("--eplb-window must be >= 0 (0: the interval), got ", eplb_window);
  if (expert_parallel == 0 && (ep_redundant_experts > 0 || eplb_interval > 0 || eplb_window > 0))
    fail("--ep-redundant-experts / --eplb-interval / --eplb-window place experts across ranks; they need expert "
         "parallelism (not --expert-parallel off)");
  if (eplb_window > 0 && eplb_interval == 0) fail("--eplb-window needs --eplb-interval (the rebalance it feeds)");
  if (ep_redundant_experts > 0 && eplb_interval == 0)
    fail("--ep-redundant-experts: the spare slots are filled by EPLB's rebalances; give --eplb-interval too");
  if (ngram_min < 1 || ngram_max < ngram_min || ngram_max > 64)
    fail("--ngram-min / --ngram-max must satisfy 1 <= min <= max <= 64, got ", ngram_min, " and ", ngram_max);
}

std::string EngineArgs::describe() const {
  std::ostringstream os;
  os << "threads=" << (threads > 0 ? std::to_string(threads) : std::string("all"))
     << " kv_cache_memory=" << (kv_cache_memory ? std::to_string(kv_cache_memory) : std::string("auto"))
     << " max_num_seqs=" << max_num_seqs << " max_num_batched_tokens=" << max_num_batched_tokens
     << " block_size=" << block_size << " max_model_len=" << (max_model_len ? std::to_string(max_model_len) : std::string("model"))
     << " chunked_prefill=" << (enable_chunked_prefill ? "on" : "off") << " watermark=" << watermark
     << " limit_images_per_prompt=" << limit_images_per_prompt << " max_image_pixels=" << max_image_pixels
     << " async_scheduling=" << (async_scheduling ? "on" : "off")
     << " quantize=" << (quantize.empty() ? std::string("none") : quantize)
     << " exact_activations=" << (exact_activations ? "on" : "off");
  if (kv_fake_quant != -1) os << " kv_fake_quant=" << (kv_fake_quant ? "on" : "off");
  if (kv_cache_dtype != "auto") os << " kv_cache_dtype=" << kv_cache_dtype;
  if (weight_memory != "auto") os << " weight_memory=" << weight_memory;
  if (enable_prefix_caching != -1) os << " prefix_caching=" << (enable_prefix_caching ? "on" : "off");
  if (!prefix_cache_dir.empty())
    os << " prefix_cache_dir=" << prefix_cache_dir << " prefix_cache_disk_size="
       << (prefix_cache_disk_size ? prefix_cache_disk_size : uint64_t(20) << 30);
  if (expert_parallel != -1) os << " expert_parallel=" << (expert_parallel ? "on" : "off");
  if (ep_redundant_experts) os << " ep_redundant_experts=" << ep_redundant_experts;
  if (eplb_interval) os << " eplb_interval=" << eplb_interval << " eplb_window=" << (eplb_window ? eplb_window : eplb_interval);
  if (speculative != "off")
    os << " speculative=" << speculative << " num_speculative_tokens=" << speculative_tokens()
       << " speculative_verify=" << speculative_verify << " speculative_sampling=" << speculative_sampling
       << (speculative == "ngram" ? " ngram=" + std::to_string(ngram_min) + ".." + std::to_string(ngram_max) : "");
  if (yoco_replay != -1 || yoco_keep_tokens != -1)
    os << " yoco_replay=" << (yoco_replay == 0 ? "off" : "on")
       << " yoco_keep_tokens=" << (yoco_keep_tokens > 0 ? yoco_keep_tokens : 140);
  return os.str();
}

}  // namespace gannet
