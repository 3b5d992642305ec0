// Engine-level benchmarks: decode sweep over batch sizes (steady-state window), prefill
// at given prompt lengths, and end-to-end offline throughput. Each returns a Report
// whose rows put the measured rates next to the roofline's limits.
#pragma once

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "bench/report.h"
#include "bench/roofline.h"
#include "core/collective.h"
#include "gannet/sampling_params.h"

namespace gannet::bench {

struct EngineBenchOptions {
  std::string model;
  int threads = 0;               // 0: all cores
  uint64_t kv_cache_memory = 0;  // 0: sized from the bench's own needs
  bool quiet_progress = false;
  bool async_scheduling = true;  // EngineArgs::async_scheduling
  std::string quantize;          // EngineArgs::quantize
  std::string weight_memory = "auto";  // EngineArgs::weight_memory
  // EngineArgs::speculative, num_speculative_tokens, speculative_verify, ngram_min / ngram_max.
  std::string speculative = "off", speculative_verify = "fixed", speculative_sampling = "exact";
  // decode: draft each request's greedy continuation (from a first, unmeasured pass), so
  // every draft is accepted: the speculation machinery's ceiling.
  bool force_accept = false;
  int64_t num_speculative_tokens = 0;
  int ngram_min = 1, ngram_max = 4;
  // EngineArgs::enable_prefix_caching (-1: the engine's default). Decode and prefill run
  // their prompts more than once and always compute them in full (0).
  int prefix_caching = -1;
  std::string prefix_cache_dir;  // EngineArgs::prefix_cache_dir (throughput only)
  int64_t prefix_wait_steps = -1;  // EngineArgs::prefix_wait_steps (-1: its default; throughput only)
  int64_t prefix_state_snapshots = -1;  // EngineArgs::prefix_state_snapshots (-1: its default)
};

struct DecodeOptions : EngineBenchOptions {
  std::vector<int64_t> batch_sizes{1, 2, 4, 8, 16, 32, 64};
  int64_t input_len = 128;
  int64_t output_len = 32;
  double trim = 0.1;  // fraction of decode steps dropped at each end of the window
  // Prompts: "random" ids, or "repeat" (a random 16-token segment repeated to input_len:
  // text that n-gram drafting can copy from).
  std::string prompts = "random";
};

struct PrefillOptions : EngineBenchOptions {
  std::vector<int64_t> lengths{128, 512, 2048};
  int repeats = 3;
};

struct ThroughputOptions : EngineBenchOptions {
  int64_t num_prompts = 64;
  int64_t input_len = 128;
  int64_t output_len = 64;
  // When above input_len / output_len: request i gets lengths spread evenly over
  // [input_len, input_len_max] and [output_len, output_len_max] (a fixed permutation).
  int64_t input_len_max = 0;
  int64_t output_len_max = 0;
  // When not empty: the requests (text prompt, params) instead of synthetic ones.
  std::vector<std::pair<std::string, SamplingParams>> dataset;
  // Sequences per step; 0: all requests, up to 256 (a server's concurrency is matched by
  // giving its client count).
  int64_t max_num_seqs = 0;
  // Synthetic requests: every prompt starts with the same shared_prefix_len tokens (a
  // system prompt) before its own input_len.
  int64_t shared_prefix_len = 0;
  // > 1: multi-turn chat replay. num_prompts conversations of `turns` requests; turn t's
  // prompt is turn t-1's prompt, a recorded answer (output_len tokens, not the model's)
  // and a new user message (input_len tokens), sent when turn t-1 has finished.
  int64_t turns = 1;
  // One rank of an mpirun job (null: a job of its own): every rank runs this bench with
  // its share of the requests (by queued tokens) and rank 0 reports the whole job, with
  // expert parallelism's figures when it is on. EngineArgs::expert_parallel and EPLB's.
  Collective* group = nullptr;
  int expert_parallel = -1;
  int64_t ep_redundant_experts = 0, eplb_interval = 0, eplb_window = 0;
};

Report run_decode_bench(const DecodeOptions& o, const Roofline& roofline);
Report run_prefill_bench(const PrefillOptions& o, const Roofline& roofline);
Report run_throughput_bench(const ThroughputOptions& o, const Roofline& roofline);

}  // namespace gannet::bench
