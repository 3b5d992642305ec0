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
// What a decode step needs of the past (SeqMem): each layer's window ring (the last
// sliding_window KV vectors), the KV sources' compressed entries and index keys (paged,
// per position) and their open (incomplete) ratio-2 group, and the last tokens for the
// Engram n-grams. Any split of a sequence into chunks gives the same bits as one call
// over all of it.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <span>
#include <vector>

#include "io/checkpoint.h"
#include "io/model_config.h"
#include "kernels/cache_spec.h"
#include "kernels/cpu/packed_matmul.h"
#include "kernels/cpu/rope.h"
#include "model/deepseek_v41/engram.h"
#include "model/deepseek_v41/vision.h"
#include "model/deepseek_v41/weights.h"
#include "model/expert_parallel.h"
#include "model/moe.h"

namespace gannet {
class ThreadPool;
}

namespace gannet::model::deepseek_v41 {

// Where one sequence's cache lives: its state slot and, for each KV source, the arena of
// its compressed entries (entry e: the compressed KV after RoPE as E2M1 codes with an
// E4M3 scale per 16, then the index key after RoPE as E2M1 codes with an E8M0 scale per
// 32: 288 + 68 bytes at V4.1-Flash's widths) with the sequence's block table. Window
// rings hold E4M3 codes with an E8M0 scale per 32 (528 bytes per position at 512). Everything in the state is indexed by position (window rings by p % window ring,
// the open group by p % open ring, the Engram history by p % history ring: CacheLayout)
// and every count is derived from positions, so a forked copy stays valid while its
// parent runs ahead, and a sequence may fall back to any kept length within its rings'
// spare room (speculative decoding's rejected drafts).
struct SeqMem {
  uint8_t* state = nullptr;
  const int32_t* block_table = nullptr;
  const kernels::CacheArena* const* entries = nullptr;  // [kv sources]
};

// A sequence with its own memory (tests, tools): capacity positions at most.
struct SeqState {
  std::vector<uint8_t> state;
  std::vector<std::vector<uint8_t>> arena_mem;  // per KV source
  std::vector<kernels::CacheArena> arenas;
  std::vector<const kernels::CacheArena*> arena_ptrs;
  std::vector<int32_t> table = {0};
  int64_t pos = 0;
  SeqMem mem() { return {state.data(), table.data(), arena_ptrs.data()}; }
};

// Where everything of one sequence lives, from the config alone: the paged groups (one
// per KV-source ratio, one arena per source) and the state slot's layout.
struct CacheLayout {
  kernels::CacheSpec spec;
  std::vector<int64_t> window_off, open_off;  // [layers] bytes into the slot; open_off -1: none
  int64_t history_off = 0, state_bytes = 0;
  int64_t win_bytes = 0, kv_bytes = 0, key_bytes = 0;  // cached bytes per vector
  bool win_packed = false, kv_packed = false, key_packed = false;
  std::vector<int64_t> source_index;                      // [layers]: KV source number, or -1
  std::vector<std::pair<int64_t, int64_t>> source_arena;  // [sources]: (group, layer in group)
  std::vector<int64_t> group_ratio;                       // [groups]
  // Ring lengths, in positions: the window (sliding_window + spec), each open group
  // (a multiple of its ratio holding the open group and spec positions after it) and the
  // Engram history (max_ngram + spec). With spec = 0 they are the minimum; with spec = K a
  // step may compute K positions past what is kept (rejected drafts) without touching
  // anything a later step at the kept length reads.
  int64_t window_ring = 0, history_ring = 0;
  std::vector<int64_t> open_ring;  // [layers], 0: none
  // DSpark drafting on: each stage's window ring (window_ring slots of win_bytes), which
  // holds the KV of the drafter's input at the sequence's positions. Empty: no drafter.
  std::vector<int64_t> dspark_off;  // [stages] bytes into the slot
};
CacheLayout make_cache_layout(const io::DeepseekV41Config& c, int64_t spec = 0, int64_t dspark_stages = 0);

class DeepseekV41 {
 public:
  DeepseekV41(const io::ModelConfig& cfg, const io::Checkpoint& ckpt);

  const io::DeepseekV41Config& config() const { return c_; }
  const Weights& weights() const { return w_; }
  const EngramLayout& engram_layout() const { return engram_; }

  // The cache this model needs: per KV-source ratio a paged group of entries, and the
  // state bytes per sequence.
  kernels::CacheSpec cache_spec() const { return lay_.spec; }
  // Which group and layer of cache_spec() holds KV source number i's entries.
  std::pair<int64_t, int64_t> source_arena(int64_t i) const { return lay_.source_arena[size_t(i)]; }

  SeqState new_state(int64_t capacity) const;
  // Runs tokens [n] at positions st.pos .. st.pos + n - 1 and advances st. logits, if not
  // null, receives [n, vocab_size] (every row).
  void forward(SeqState& st, const int32_t* tokens, int64_t n, float* logits, ThreadPool* pool,
               int64_t replay_from = 0, const float* const* embeds = nullptr) const;
  // The vision encoder, or null when the checkpoint has no vision_config.
  const VisionEncoder* vision() const { return vision_.get(); }
  // Tests: run the decoder layers on every row, with only the replay visibility rule (the
  // rows kept must then equal the skipping computation bit for bit).
  void set_replay_mask_only(bool on) { replay_mask_only_ = on; }
  int64_t last_kv_source() const { return last_src_; }
  // Expert parallelism (ModelConfig::ep_size > 1), or null.
  ExpertParallel* expert_parallel() const { return ep_.get(); }
  // A forward with no tokens: takes part in every MoE layer's exchange (expert_parallel.h).
  void forward_idle(ThreadPool* pool) const;
  // The same on any memory: tokens [n] at positions pos0.., the final normalized hidden
  // rows into hidden [n, hidden_size]. pos0 == 0 starts the sequence afresh.
  void forward_seq(const SeqMem& m, const int32_t* tokens, int64_t n, int64_t pos0, float* hidden,
                   ThreadPool* pool) const;
  // Several sequences in one pass: chunk i is rows [row0, row0 + n) of tokens / hidden, at
  // positions pos0.. of the sequence in memory m. Every per-token product runs over all
  // rows at once (each row's bits do not depend on the others); attention, compression
  // and indexing run per chunk.
  //
  // Decoder bounded replay (DeepInfer's compact prefill, an approximation DeepSeek trains
  // for): with replay_from > 0, the layers after the last KV source compute only the rows
  // at positions >= replay_from, and their attention windows see no position before it,
  // now and in every later step of that sequence. The hidden rows of skipped positions are
  // NaN. The KV sources' caches are unaffected.
  //
  // Prefix-cache replay: a sequence whose positions [0, write_from) come from cached
  // blocks recomputes [window_from, write_from) to rebuild its state (window rings, open
  // groups, Engram history) without writing their compressed entries, which the cache
  // already holds; no window reaches before window_from, and its state restarts there.
  // prefix_replay_start() says how far back that must begin to be exact.
  struct Chunk {
    const SeqMem* m = nullptr;
    int64_t pos0 = 0, n = 0, row0 = 0;
    int64_t replay_from = 0;
    int64_t window_from = 0, write_from = 0;
  };
  // The first position to recompute when [0, hit) is cached: every window ring read at or
  // after `hit` then holds exactly what a full computation leaves there. Each layer's
  // window carries inexactness W - 1 positions further, the Engram history its n-gram
  // length; with decoder bounded replay (replay_from > 0) the layers after the last KV
  // source start at replay_from in both computations, so only the layers up to it count,
  // and their rows must be exact by replay_from. -1: not worth it (nothing left cached).
  int64_t prefix_replay_start(int64_t hit, int64_t replay_from) const;
  //
  // capture, if not null, receives [rows, capture_width()]: for each row, the mean over the
  // hc streams of each DSpark target layer's input residual (after its Engram, before its
  // mHC mixes), in dspark_target_layer_ids order (NaN for rows bounded replay skipped).
  //
  // Image input: embeds [rows], if given, holds per row a hidden-size row that replaces
  // its token's embedding, or null. A row with one is an image-span position (START, an
  // aligner row, NEWLINE or END): its router selects with bias_vl, its Engram gate is 0
  // and its compressed id is DEAD (n-grams of later positions stop there).
  void forward_batch(const std::vector<Chunk>& chunks, const int32_t* tokens, int64_t rows, float* hidden,
                     ThreadPool* pool, float* capture = nullptr, const float* const* embeds = nullptr) const;
  // logits [rows, vocab] of hidden rows [rows, hidden_size].
  void logits(const float* hidden, int64_t rows, float* out, ThreadPool* pool) const;

  // DSpark drafting (deepseek-v4-architecture.md §9.8). has_dspark: the checkpoint carries
  // the drafter; dspark_enabled: the state slots hold its rings (ModelConfig::dspark).
  bool has_dspark() const { return w_.has_dspark; }
  bool dspark_enabled() const { return !lay_.dspark_off.empty(); }
  int64_t dspark_block() const { return c_.dspark_block_size; }
  int64_t capture_width() const { return int64_t(c_.dspark_target_layer_ids.size()) * c_.hidden_size; }
  struct DraftJob {
    const SeqMem* m = nullptr;
    // Rows of forward_batch's capture for positions seed_pos0 .. seed_pos0 + seed_n - 1:
    // each stage's ring takes the KV of the drafter's input there (the last window of them).
    const float* main_hidden = nullptr;  // [seed_n, capture_width()]
    int64_t seed_n = 0, seed_pos0 = 0;
    // Drafting: the rings hold positions up to p; token is x_{p+1}, the token the backbone
    // produced after p. token < 0: seed only. Ring positions before lo are not attended
    // (bounded replay left them out).
    int64_t p = -1, lo = 0;
    int32_t token = -1;
    int32_t* drafts = nullptr;      // [block]: x_{p+2} .. x_{p+block+1}, greedy on the corrected logits
    float* confidence = nullptr;    // [block]: sigmoid of the confidence head, per draft
    float* draft_logits = nullptr;  // optional [block, vocab]: the Markov-corrected logits
    // Sampled drafting: the draft is choose(i, corrected logits of block position i)
    // instead of their argmax (the next position's Markov bias follows it).
    const std::function<int32_t(int64_t, const float*)>* choose = nullptr;
  };
  // Seeds, then drafts, every job (jobs of distinct sequences); every per-token product
  // runs over all jobs' rows at once, so a job's bits do not depend on the others.
  void dspark(const std::vector<DraftJob>& jobs, ThreadPool* pool) const;

 private:
  uint8_t* dspark_ring(const SeqMem& m, int64_t stage) const { return m.state + lay_.dspark_off[size_t(stage)]; }
  // One drafter stage's attention for the block rows of every job: queries at positions
  // p+1 .. p+block see the ring's valid positions and all block positions.
  void dspark_attention(int64_t stage, const std::vector<DraftJob>& jobs, const int32_t* pos, const float* a,
                        float* out, ThreadPool* pool) const;

  struct Shared;  // what index sources publish to the layers after them in one forward
  uint8_t* window(const SeqMem& m, int64_t l) const;  // [sliding_window, win_bytes_]
  float* open_kv(const SeqMem& m, int64_t l) const;
  float* open_gate(const SeqMem& m, int64_t l) const;
  int64_t* history(const SeqMem& m) const;
  uint8_t* entry(const SeqMem& m, int64_t l_src, int64_t e) const;
  // Cached forms (packed E4M3 / E2M1 with their block scales where the width allows the
  // model's fake quantization, else f32): storing packs, loading unpacks, and
  // load(store(x)) is the fake-quantized x bit for bit.
  void store_window(uint8_t* slot, const float* kv) const;  // kv: D values, FQ8 applied or not
  void load_window(const uint8_t* slot, float* kv) const;
  void store_entry(uint8_t* e, const float* kv, const float* key) const;  // before FQ4e / FQ4
  void load_entry_kv(const uint8_t* e, float* kv) const;
  void load_entry_key(const uint8_t* e, float* key) const;
  // Layer l's attention for all rows: a [rows, hidden] -> out [rows, hidden].
  void attention(int64_t l, const std::vector<Chunk>& chunks, const int32_t* pos, const float* a, int64_t rows,
                 std::vector<Shared>& sh, float* out, ThreadPool* pool) const;
  // A KV source's groups closed by one chunk, from its rows of the compressor
  // projections kv and gate [n, head_dim] (gate unused at ratio 1).
  void compress(int64_t l, const Chunk& ch, const float* kv, const float* gate, ThreadPool* pool) const;
  // An index source's top-k per query of one chunk, from its rows of the indexer queries
  // q [n, heads, dim] (RoPE and FQ4 applied) and head weights w [n, heads]; with a pool,
  // its rows (or one row's entry ranges) are split over it.
  void index(int64_t l, const Chunk& ch, const float* q, const float* w, Shared& sh, ThreadPool* pool) const;

  // y = x w^T; with activation quantization on and w FP8 or MXFP4, x's rows are first
  // fake-quantized to E4M3 per 32 values (power-of-two scales), as the reference's GEMMs.
  void mm(const float* x, int64_t rows, const kernels::PackedWeight& w, float* y, ThreadPool* pool) const;
  // Several products of x (mm's semantics each) in one parallel region.
  void mm_many(const float* x, int64_t rows, std::span<const kernels::PackedProduct> ps, ThreadPool* pool) const;

  io::DeepseekV41Config c_;
  bool act_quant_ = false;  // ModelConfig::exact_activations (--act-quant fp8)
  bool replay_mask_only_ = false;
  int64_t last_src_ = -1;  // the last KV-source layer; later layers are the decoder
  Weights w_;
  std::unique_ptr<ExpertParallel> ep_;  // before moe_, which points into it
  std::vector<MoeLayer> moe_, dspark_moe_;
  EngramLayout engram_;
  std::vector<int64_t> token_map_;  // token id -> compressed id (Engram)
  kernels::RopeTable rope_main_, rope_compress_;
  CacheLayout lay_;
  // The vision tower (vision_config): weights and the encoder over them.
  std::unique_ptr<VisionWeights> vw_;
  std::unique_ptr<VisionEncoder> vision_;
};

}  // namespace gannet::model::deepseek_v41
