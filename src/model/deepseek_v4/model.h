// DeepSeek-V4-Flash forward pass (deepseek-v4-architecture.md §5-§8; transformers'
// deepseek_v4 is the reference of tests/golden/deepseek-v4-tiny): mHC with a hyper head,
// single-latent MQA with per-head q normalization over a sliding window plus, per layer,
// its own compressed entries (ratio 4: overlapping compressor and a Lightning indexer
// picking the top-k; other ratios: non-overlapping, every visible entry attended), MoE with
// hash routing in the first layers. Activations in float32. The V4 fake quantizations
// (window and compressed KV FQ8 over the rope-free channels in blocks of 64; indexer
// Hadamard + FQ4 / 32) are on by default, as the official reference; kv_fake_quant = false
// (--no-kv-fake-quant) leaves them out, as transformers does. Shares mHC and MoE with V4.1.
//
// The sequence state (SeqState) is indexed by position (window rings by p % window, open
// groups by p % ring_slots), entries and index keys grow per layer; any split of a sequence
// into calls gives the same bits, and a sequence may fall back to any kept length within
// the rings' spare room (ModelConfig::speculative_tokens: rejected drafts).
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

#include "io/checkpoint.h"
#include "io/deepseek_v4_config.h"
#include "io/model_config.h"
#include "kernels/cache_spec.h"
#include "kernels/cpu/packed_weight.h"
#include "kernels/cpu/rope.h"
#include "model/deepseek_v41/weights.h"
#include "model/expert_parallel.h"
#include "model/moe.h"

namespace gannet {
class ThreadPool;
}

namespace gannet::model::deepseek_v4 {

struct Compressor {  // wkv, wgate [width * (overlap ? 2 : 1), hidden], ape, norm [width]
  kernels::PackedWeight wkv, wgate;
  std::vector<float> ape, norm;
  int64_t width = 0;
  bool overlap = false;
};

struct Layer {
  deepseek_v41::MhcSite hc_attn, hc_ffn;
  std::vector<float> attn_norm, ffn_norm, q_norm, kv_norm, sink;
  kernels::PackedWeight wq_a, wq_b, wkv, wo_a, wo_b;
  int64_t ratio = 0;
  Compressor comp, idx_comp;                      // idx_comp: CSA (ratio 4) only
  kernels::PackedWeight idx_wq_b, idx_weights;    // CSA only
  std::vector<int32_t> tid2eid;                   // hash layers: [vocab, top_k]
};

// One sequence's cache: its state slot (window rings and open-group rings, by position)
// and, per compressed layer, the arena of its entries (D floats, then index_head_dim floats
// of index key at ratio-4 layers) with the sequence's block table.
struct SeqMem {
  uint8_t* state = nullptr;
  const int32_t* block_table = nullptr;
  const kernels::CacheArena* const* arenas = nullptr;  // [compressed layers]
};

// A sequence with its own memory (tests, tools).
struct SeqState {
  int64_t pos = 0;
  std::vector<uint8_t> state;
  std::vector<std::vector<uint8_t>> mem;
  std::vector<kernels::CacheArena> arenas;
  std::vector<const kernels::CacheArena*> ptrs;
  std::vector<int32_t> table = {0};
  SeqMem view() { return {state.data(), table.data(), ptrs.data()}; }
};

class DeepseekV4 {
 public:
  DeepseekV4(const io::ModelConfig& cfg, const io::Checkpoint& ckpt);
  const io::DeepseekV4Config& config() const { return c_; }
  SeqState new_state(int64_t capacity = 512) const;
  // tokens [n] at positions st.pos.. ; logits [n, vocab] if not null.
  void forward(SeqState& st, const int32_t* tokens, int64_t n, float* logits, ThreadPool* pool) const;
  // The same on any memory; pos0 == 0 starts afresh. hidden [n, hidden_size].
  void forward_mem(const SeqMem& m, const int32_t* tokens, int64_t n, int64_t pos0, float* hidden,
                   ThreadPool* pool) const;
  // Several sequences in one pass: chunk i is rows [row0, row0 + n) of tokens / hidden, at
  // positions pos0.. of the sequence in memory m. Every per-token product (projections,
  // compressor and indexer inputs, MoE, mHC) runs over all rows at once, each row's bits
  // independent of the others; compression, selection and attention run per chunk.
  //
  // Prefix-cache replay: a sequence whose positions [0, write_from) come from cached
  // blocks recomputes [window_from, write_from) to rebuild its state slot (window rings,
  // open compressor and indexer groups) without writing the compressed entries and index
  // keys the cache already holds; no window reaches before window_from, and the state
  // restarts there. prefix_replay_start() says how far back that must begin to be exact.
  struct Chunk {
    const SeqMem* m = nullptr;
    int64_t pos0 = 0, n = 0, row0 = 0;
    int64_t window_from = 0, write_from = 0;
  };
  void forward_batch(const std::vector<Chunk>& chunks, const int32_t* tokens, int64_t rows, float* hidden,
                     ThreadPool* pool) const;
  void logits(const float* hidden, int64_t rows, float* out, ThreadPool* pool) const;
  // The first position to recompute when [0, hit) is cached, so that every ring read at or
  // after `hit` holds what a full computation leaves there: layer l's input is exact
  // l (W - 1) positions after the replay's start (each window reaches W - 1 back), and it
  // must be exact over its window ring's last W - 1 positions and over the positions of its
  // open compressor groups (the previous group too where they overlap). -1: nothing left
  // worth caching.
  int64_t prefix_replay_start(int64_t hit) const;
  int64_t mtp_tensors() const { return mtp_tensors_; }
  // The cache: per compression ratio a paged group of entries, and the state bytes.
  const kernels::CacheSpec& cache_spec() const { return spec_; }
  // Group and layer-in-group of compressed layer number i (layers with ratio > 0, in order).
  std::pair<int64_t, int64_t> arena_of(int64_t i) const { return arena_[size_t(i)]; }
  int64_t compressed_layers() const { return int64_t(arena_.size()); }
  // Expert parallelism (ModelConfig::ep_size > 1), or null; a forward with no tokens takes
  // part in every MoE layer's exchange (expert_parallel.h).
  ExpertParallel* expert_parallel() const { return ep_.get(); }
  void forward_idle(ThreadPool* pool) const;

 private:
  // One layer's attention for the rows of every chunk (pos [rows]: each row's position).
  void attention(int64_t l, const std::vector<Chunk>& chunks, const int32_t* pos, const float* a, int64_t rows,
                 float* out, ThreadPool* pool) const;
  // Closes the groups of `ratio` positions ending in these n rows, given their compressor
  // projections kv / gate [n, width * (overlap ? 2 : 1)] (gate gets the position biases);
  // returns the groups [g, width] (normalized, RoPE at the group's first position); *first:
  // the first group's index.
  std::vector<float> compress(const Compressor& cp, int64_t ratio, const float* kv, float* gate, int64_t n,
                              int64_t pos0, float* ring_kv, float* ring_gate, int64_t* first) const;
  float* entry(const SeqMem& m, int64_t l, int64_t e) const {
    return reinterpret_cast<float*>(m.arenas[comp_index_[size_t(l)]]->entry(m.block_table, e));
  }

  io::DeepseekV4Config c_;
  bool fake_quant_ = true;
  // Speculative decoding: rings hold this many positions more than a step keeps, so the
  // rejected drafts a step computes never overwrite what the next step reads.
  int64_t spec_tokens_ = 0;
  int64_t ring_slots(bool overlap, int64_t ratio) const { return (overlap ? 2 * ratio : ratio) + spec_tokens_; }
  kernels::PackedWeight embed_, head_;
  std::vector<float> norm_;
  deepseek_v41::MhcSite hc_head_;
  std::vector<Layer> layers_;
  std::unique_ptr<ExpertParallel> ep_;  // before moe_, which points into it
  std::vector<MoeLayer> moe_;
  kernels::RopeTable rope_main_, rope_compress_;
  int64_t mtp_tensors_ = 0;
  // State slot layout (bytes) per layer: window ring, compressor rings, indexer rings.
  std::vector<int64_t> win_off_, ring_off_, iring_off_, comp_index_;
  std::vector<std::pair<int64_t, int64_t>> arena_;
  kernels::CacheSpec spec_;
};

}  // namespace gannet::model::deepseek_v4
