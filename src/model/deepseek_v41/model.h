// DeepSeek-V4.1-Flash forward pass (deepseek-v4-architecture.md §9; transformers'
// deepseek_v41 is the reference the goldens come from): single-pass mHC over hc residual
// streams, single-latent MQA with a sliding window plus CSA2 compressed entries (KV
// sources pool ratio-2 groups or project every token, index sources pick each query's
// top-k entries, Reuse layers take both from the latest source, the candidate source
// restricts later index sources to its top blocks), MoE, Engram.
//
// Activations are float32 between modules; the model's own fake quantizations are
// applied (window KV FQ8 whole vector / 32, compressed KV FQ4 with E4M3 scales / 16,
// indexer queries and keys FQ4 / 32); no activation quantization before FP8/FP4 products
// unless ModelConfig::exact_activations. Top-k ties go to the lower index.
//
// State per sequence (SeqState) is what a decode step needs of the past: each layer's
// window ring (the last sliding_window KV vectors), the KV sources' compressed entries
// and index keys and their open (incomplete) ratio-2 group, and the last tokens for the
// Engram n-grams. forward() over any split of a sequence into chunks gives the same
// bits as one call over all of it.
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

#include "io/checkpoint.h"
#include "io/model_config.h"
#include "kernels/cpu/rope.h"
#include "model/deepseek_v41/engram.h"
#include "model/deepseek_v41/weights.h"
#include "model/moe.h"

namespace gannet {
class ThreadPool;
}

namespace gannet::model::deepseek_v41 {

struct LayerState {
  std::vector<float> window;  // [sliding_window, head_dim]: position p in slot p % window
  // KV sources only.
  std::vector<float> comp_kv;    // [entries, head_dim] after RoPE and FQ4e
  std::vector<float> idx_k;      // [entries, index_head_dim] after RoPE and FQ4
  std::vector<float> open_kv;    // [open, head_dim] projections of the open group's tokens
  std::vector<float> open_gate;  // [open, head_dim]
  int64_t open = 0;
  int64_t entries = 0;
};

struct SeqState {
  int64_t pos = 0;  // tokens processed
  std::vector<LayerState> layers;
  std::vector<int64_t> recent;  // compressed ids of the last tokens (Engram), oldest first
};

class DeepseekV41 {
 public:
  DeepseekV41(const io::ModelConfig& cfg, const io::Checkpoint& ckpt);

  const io::DeepseekV41Config& config() const { return c_; }
  const Weights& weights() const { return w_; }
  const EngramLayout& engram_layout() const { return engram_; }
  SeqState new_state() const;

  // Runs tokens [n] at positions st.pos .. st.pos + n - 1 and advances st. logits, if not
  // null, receives [n, vocab_size] (every row).
  void forward(SeqState& st, const int32_t* tokens, int64_t n, float* logits, ThreadPool* pool) const;

 private:
  struct Shared;  // what index sources publish to the layers after them in one forward
  void attention(int64_t l, SeqState& st, const float* a, int64_t n, Shared& sh, float* out,
                 ThreadPool* pool) const;
  void compress(int64_t l, LayerState& ls, const float* a, int64_t n, ThreadPool* pool) const;
  void index(int64_t l, const SeqState& st, const float* a, const float* qr, int64_t n, Shared& sh,
             ThreadPool* pool) const;

  io::DeepseekV41Config c_;
  bool exact_activations_ = false;
  Weights w_;
  std::vector<MoeLayer> moe_;
  EngramLayout engram_;
  std::vector<int64_t> token_map_;  // token id -> compressed id (Engram)
  kernels::RopeTable rope_main_, rope_compress_;
};

}  // namespace gannet::model::deepseek_v41
