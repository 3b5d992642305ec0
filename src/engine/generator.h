// Runs one sequence at a time through a model: chunked prefill, then token-by-token
// decode with the sampler, stopping at EOS or max_tokens. (The continuous-batching
// Engine replaces this for many requests; this is the walking skeleton's loop.)
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "cache/cache_engine.h"
#include "core/thread_pool.h"
#include "gannet/sampling_params.h"
#include "model/model.h"
#include "sampling/sampler.h"

namespace gannet::engine {

struct GenerationResult {
  std::vector<int32_t> token_ids;
  std::string finish_reason;  // "stop" (EOS) or "length"
  uint64_t seed = 0;          // the seed used (given or drawn), to replay the run
  double prefill_seconds = 0, decode_seconds = 0;
};

class Generator {
 public:
  // max_chunk: most prompt tokens per forward call.
  Generator(model::Model& model, ThreadPool* pool, int64_t max_chunk = 512, int block_size = 64);

  // Throws gannet::Error for an empty prompt, ids outside the vocabulary, or a prompt
  // plus max_tokens longer than the model's context. on_token is called per new token.
  GenerationResult generate(const std::vector<int32_t>& prompt, const SamplingParams& params,
                            const std::function<void(int32_t)>& on_token = nullptr);

  // Logits [n_prompt, vocab] at every prompt position (for golden tests).
  std::vector<float> prompt_logits(const std::vector<int32_t>& prompt);

 private:
  void ensure_capacity(int64_t tokens);
  // Runs positions [start, start+n) of `ids`; fills logits for the rows in want_rows.
  void run(const int32_t* ids, int64_t start, int64_t n, bool all_logits, float* logits);

  model::Model& model_;
  ThreadPool* pool_;
  int64_t max_chunk_;
  int block_size_;
  std::unique_ptr<cache::CacheEngine> cache_;
  std::vector<int32_t> block_table_;
  sampling::Sampler sampler_;
  std::vector<float> logits_;  // [max_chunk, vocab] when all logits are wanted
  std::vector<int32_t> pos_, seq_, rows_;
};

}  // namespace gannet::engine
