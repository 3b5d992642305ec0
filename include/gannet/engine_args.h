// Every engine knob with its default. Settable from CLI flags (--kv-cache-memory, ...)
// and GANNET_* environment variables (GANNET_KV_CACHE_MEMORY, ...); flags win.
#pragma once

#include <cstdint>
#include <string>

namespace gannet {

struct EngineArgs {
  std::string model;                   // Hugging Face model directory
  int threads = 0;                     // 0: all cores
  uint64_t kv_cache_memory = 0;        // bytes for KV blocks + state slots; 0: default share
  int64_t max_num_seqs = 256;          // sequences in one step
  int64_t max_num_batched_tokens = 2048;  // tokens in one step (decodes + prefill chunks)
  int block_size = 64;                 // tokens per KV block
  int64_t max_model_len = 0;           // 0: the model's max_position_embeddings
  // Image input (vision models): images one prompt may carry, and the largest image (width
  // x height, checked from its header before decoding). --limit-images-per-prompt N,
  // --max-image-pixels N.
  int64_t limit_images_per_prompt = 8;
  int64_t max_image_pixels = 89'478'485;
  bool enable_chunked_prefill = true;
  double watermark = 0.01;             // fraction of blocks kept free at admission
  // The executor runs on its own thread and the engine plans step N+1 while step N runs
  // (results are bit-identical either way). --async-scheduling on|off,
  // GANNET_ASYNC_SCHEDULING=on|off.
  bool async_scheduling = true;
  // Convert float linear weights at load: "" or "none" (keep as stored), "fp8" (E4M3 with
  // 128x128 f32 block scales) or "int8" (one f32 scale per output row).
  std::string quantize;
  // Where the weights' bytes live once loaded (io::WeightMemory): "auto" (the file mapping,
  // except what the kernel backs with 4 KiB pages, copied into the process's own memory on
  // 2 MiB pages; in an mpirun job the mapping, whose page cache ranks share), "map" (always
  // the file mapping) or "copy" (always copied). Results are the same; speed and memory
  // accounting differ. --weight-memory, GANNET_WEIGHT_MEMORY.
  std::string weight_memory = "auto";
  // Fake-quantize activations to FP8 before FP8/MXFP4 products, as the GPU kernels and the
  // DeepSeek-V4 reference do (ModelConfig::exact_activations). --exact-activations on|off,
  // GANNET_EXACT_ACTIVATIONS.
  bool exact_activations = false;
  // DeepSeek-V4.1 decoder bounded replay: in prefill, the layers after the last KV source
  // run only on each sequence's last yoco_keep_tokens prompt positions (an approximation
  // the model is trained for; prompt logprobs then need it off). --yoco-keep-tokens N,
  // --no-yoco-replay, GANNET_YOCO_KEEP_TOKENS, GANNET_YOCO_REPLAY=on|off. -1: the default
  // (140, on); set explicitly for a model without such layers, they are refused.
  int64_t yoco_keep_tokens = -1;
  int yoco_replay = -1;  // -1: default (on); 0: off; 1: on
  // DeepSeek-V4-Flash's KV / indexer fake quantizations (on, as the official reference;
  // off matches transformers). --no-kv-fake-quant, GANNET_KV_FAKE_QUANT=on|off; -1: default
  // (on); set explicitly for another architecture, refused.
  int kv_fake_quant = -1;
  // K/V element type of dense models: "auto" (f32), "f32" or "bf16" (half the bytes; values
  // rounded to bf16). DeepSeek models keep their own formats and refuse anything but auto.
  // --kv-cache-dtype, GANNET_KV_CACHE_DTYPE.
  std::string kv_cache_dtype = "auto";
  // Speculative decoding: "off", "ngram" (prompt lookup: drafts copied from earlier in the
  // sequence's own history) or "dspark" (DeepSeek-V4.1's drafter). Greedy and sampled
  // outputs are bit-identical to decoding without it (sampling/speculative.h).
  // --speculative, GANNET_SPECULATIVE.
  std::string speculative = "off";
  // Drafts verified per decode step; 0: the default (4) when speculation is on.
  // --num-speculative-tokens, GANNET_NUM_SPECULATIVE_TOKENS.
  int64_t num_speculative_tokens = 0;
  // "fixed" (verify every draft) or "varlen" (DSpark: choose per request from the drafter's
  // confidences). --speculative-verify, GANNET_SPECULATIVE_VERIFY.
  std::string speculative_verify = "fixed";
  // How sampled requests (temperature > 0) verify DSpark drafts: "exact" (drafts are the
  // drafter's argmax; each token is the one plain decoding samples, so outputs are
  // bit-identical to --speculative off) or "rejection" (drafts drawn from the drafter's
  // distribution and rejection-sampled against the target's: the same output
  // distribution, more drafts accepted, other tokens). Greedy requests always verify
  // exactly. --speculative-sampling, GANNET_SPECULATIVE_SAMPLING.
  std::string speculative_sampling = "exact";
  // N-gram drafting: suffix lengths looked up, longest first. --ngram-min, --ngram-max,
  // GANNET_NGRAM_MIN, GANNET_NGRAM_MAX.
  int ngram_min = 1;
  int ngram_max = 4;
  // Prefix caching: full KV blocks are kept by content hash after their sequence ends and
  // reused by later requests with the same prefix (bit-identical results). -1: the
  // default, on for models whose cache is all paged, off for those with per-sequence
  // state (DeepSeek-V4 / V4.1); 1 (--enable-prefix-caching) is refused for those; 0
  // (--no-prefix-caching) off. GANNET_PREFIX_CACHING=on|off.
  int enable_prefix_caching = -1;
  // The prefix cache's disk tier: blocks evicted from memory are written under this
  // directory (and read back on a hit), kept across restarts of the same model, up to
  // prefix_cache_disk_size bytes. --prefix-cache-dir, --prefix-cache-disk-size (default
  // 20GiB), GANNET_PREFIX_CACHE_DIR, GANNET_PREFIX_CACHE_DISK_SIZE.
  std::string prefix_cache_dir;
  uint64_t prefix_cache_disk_size = 0;  // 0: the default
  // Prefix-aware admission: a request whose next uncached block another running request
  // is computing waits for it, at most this many steps in a row while its cached run does
  // not grow; 0: plain first come first served. Only timing changes, never results.
  // --prefix-wait-steps, GANNET_PREFIX_WAIT_STEPS.
  int64_t prefix_wait_steps = 4;
  // State snapshots (models with per-sequence state: DeepSeek-V4 / V4.1): the state a
  // request has after the last full block of its prompt is kept in this many snapshot
  // slots (LRU), so a later hit on that block copies it instead of recomputing the
  // positions that rebuild it (the replay). Bit-identical either way. -1: the default,
  // four per --max-num-seqs when prefix caching is on, fewer if they would take more than
  // a quarter of the KV budget (they come on top of it, with a rolling slot per sequence
  // for decode snapshots); 0: off. --prefix-state-snapshots,
  // GANNET_PREFIX_STATE_SNAPSHOTS.
  int64_t prefix_state_snapshots = -1;
  // Scale-out (one engine per rank of an `mpirun` job; README "Several processes").
  // expert_parallel: -1 auto (on for MoE models when the job has several ranks), 0 off
  // (each rank holds every expert: pure data parallelism), 1 on. --expert-parallel.
  int expert_parallel = -1;
  int64_t ep_redundant_experts = 0;  // spare expert slots per rank (--ep-redundant-experts)
  int64_t eplb_interval = 0;         // forwards between EPLB rebalances, 0: off (--eplb-interval)
  int64_t eplb_window = 0;           // forwards of expert-load history, 0: the interval (--eplb-window)
  bool quiet = false;                  // no start-up report or progress bars

  // The drafts per step speculation runs with (0 when off).
  int64_t speculative_tokens() const {
    return speculative == "off" ? 0 : (num_speculative_tokens > 0 ? num_speculative_tokens : 4);
  }

  // Applies GANNET_<NAME> environment variables (names upper-cased, '-' as '_').
  void apply_environment();
  // Throws gannet::Error naming the knob.
  void validate() const;
  // One line of "name=value" pairs, printed at start-up.
  std::string describe() const;
};

// "on"/"off" (also 1/0, true/false) for the setting `name`; throws gannet::Error naming it.
bool parse_on_off(const std::string& name, const std::string& value);

// "4GiB", "512MiB", "1.5GB", "1000000" -> bytes. Throws gannet::Error on bad text.
uint64_t parse_memory_size(const std::string& text);

}  // namespace gannet
