// Engram conditional memory (deepseek-v4-architecture.md §9.6): n-gram hashes of the
// compressed token history index FP8 tables; the looked-up rows are projected into one
// key per residual stream plus a shared value, and each stream adds the value through a
// sigmoid gate of its normalized agreement with its key.
#pragma once

#include <cstdint>
#include <vector>

#include "io/deepseek_v41_config.h"
#include "model/deepseek_v41/weights.h"

namespace gannet {
class ThreadPool;
}

namespace gannet::model::deepseek_v41 {

// The hash layout of every Engram layer: primes, table offsets and multipliers.
struct EngramLayout {
  int64_t max_ngram = 0, n_heads = 0, cols = 0;  // cols = (max_ngram - 1) * n_heads
  // Per Engram layer: primes [max_ngram - 1][n_heads] (flat), offsets [cols],
  // multipliers [max_ngram] (odd, from numpy's default_rng(10007 * layer_id)).
  std::vector<std::vector<int64_t>> primes, offsets, multipliers;
  std::vector<int64_t> rows;  // table rows each layer's layout needs (sum of its primes)
  int64_t pad_id = 0;         // compressed id filling slots with no history
};

// Per Engram layer, the hash primes [max_ngram - 1][n_heads] (flat): for each layer, order
// and head the next prime above engram_vocab_size - 1 not used before (in any layer).
std::vector<std::vector<int64_t>> engram_primes(const io::DeepseekV41Config& cfg);

// Checks the config's engram_num_embeddings against the primes. token_map maps token ids
// to compressed ids ([vocab_size]); `pad_id` is the raw pad token.
EngramLayout make_engram_layout(const io::DeepseekV41Config& cfg, const std::vector<int64_t>& token_map);

// Row ids of Engram layer `li` for the token whose compressed n-gram is ids[0] (itself),
// ids[1] (one back), ... with `avail` of them existing (1..max_ngram); out: [cols].
void engram_hash(const EngramLayout& lay, int64_t li, const int64_t* ids, int64_t avail, int64_t* out);

// X [n, hc, hidden] += gate * value, per token, from the rows `hash` [n, cols].
// act_quant: FQ8 the looked-up rows before the FP8 wkv product. gate_off [n], if given,
// marks rows whose gate is 0 (image-span positions: their rows are still looked up).
void engram_apply(const io::DeepseekV41Config& cfg, const EngramWeights& w, const int64_t* hash, float* X, int64_t n,
                  bool act_quant, ThreadPool* pool, const uint8_t* gate_off = nullptr);

}  // namespace gannet::model::deepseek_v41
