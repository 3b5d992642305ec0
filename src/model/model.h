// The model interface every architecture implements, and the registry that maps
// config.json's architectures[0] to an implementation (DESIGN.md section 4).
//
// Models know batches, positions and cache views only — never requests (principle 3).
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "core/thread_pool.h"
#include "io/checkpoint.h"
#include "io/model_config.h"
#include "kernels/cpu/attention.h"
#include "kernels/cache_spec.h"

namespace gannet::model {

class ExpertParallel;

// One forward step over a flattened batch of tokens from one or more sequences.
struct Batch {
  int64_t n_tokens = 0;
  const int32_t* token_ids = nullptr;  // [n_tokens]
  const int32_t* positions = nullptr;  // [n_tokens] absolute position in its sequence
  const int32_t* token_seq = nullptr;  // [n_tokens] index into seqs
  int32_t n_seqs = 0;
  const kernels::AttentionSeq* seqs = nullptr;  // [n_seqs] block tables and state slots
  // Rows of the batch whose logits are wanted (e.g. the last token of each sequence).
  int64_t n_logits = 0;
  const int32_t* logit_rows = nullptr;  // [n_logits]
  // Image input (vision models only; null otherwise): per token, a hidden-size row that
  // replaces its token embedding, for image-span positions, or null.
  const float* const* embeds = nullptr;  // [n_tokens]
};

using kernels::CacheSpec;
using kernels::CacheViews;

// Speculative drafting by a model's own drafter (DeepSeek-V4.1's DSpark): after a forward,
// each job seeds the drafter with rows of that forward and, with a token, drafts the next
// block of the sequence.
struct DraftJob {
  int32_t seq = -1;          // index into the last forward's Batch::seqs (its state slot)
  int64_t row0 = 0, n = 0;   // rows of the last forward at positions pos0 .. pos0 + n - 1
  int64_t pos0 = 0;          //   that the sequence keeps (a verify step's accepted ones)
  int32_t token = -1;        // the token after position pos0 + n - 1; < 0: seed only
  int32_t* drafts = nullptr;       // [draft_block()]
  float* confidence = nullptr;     // [draft_block()]: each draft's acceptance probability
  // Sampled drafting: draft i is choose(i, logits) of the drafter's logits for it (greedy
  // argmax when null), which are also copied to draft_logits [draft_block(), vocab] if set.
  const std::function<int32_t(int64_t, const float*)>* choose = nullptr;
  float* draft_logits = nullptr;
};

class Model {
 public:
  virtual ~Model() = default;
  virtual const io::ModelConfig& config() const = 0;
  virtual CacheSpec cache_spec() const = 0;
  // Scratch buffers are sized once for up to `max_tokens` rows per forward call and
  // `max_logits` logit rows (principle 6: no allocation in forward).
  virtual void reserve(int64_t max_tokens, int64_t max_logits) = 0;
  // Writes this batch's K/V into the cache and fills logits [n_logits, vocab_size].
  virtual void forward(const Batch& batch, const CacheViews& cache, float* logits, ThreadPool* pool) = 0;
  // Vision models: the positions an image of this patch grid spans in the prompt (-1: the
  // model takes no images), and its span's embedding rows [span, hidden] from its patches
  // [grid_h * grid_w, 3 * patch^2]. An image's rows depend on its own pixels only.
  virtual int64_t image_span_tokens(int64_t grid_h, int64_t grid_w) const {
    (void)grid_h, (void)grid_w;
    return -1;
  }
  virtual std::vector<float> encode_image(const float* pixels, int64_t grid_h, int64_t grid_w, ThreadPool* pool) const;
  // Weight bytes read by one forward pass (for bandwidth figures).
  virtual uint64_t weight_bytes() const = 0;
  // The same bytes split by storage format ("bf16", "fp8-block", "int8-row", ...).
  virtual std::map<std::string, uint64_t> weight_bytes_by_format() const = 0;
  // Of weight_bytes(): the vocabulary projection's (read only for rows that need logits).
  virtual uint64_t output_weight_bytes() const = 0;
  // Prefix caching: with positions [0, hit) of a sequence in cached blocks, the first
  // position to compute so that its per-sequence state comes out exactly as a full
  // computation leaves it (AttentionSeq::window_from / cached_until); replay_from is its
  // decoder bounded replay start (0: none). A model whose cache is all paged needs no
  // replay (hit); -1: this model cannot use the hit.
  virtual int64_t prefix_replay_start(int64_t hit, int64_t replay_from) const {
    (void)replay_from;
    return cache_spec().state_bytes_per_seq == 0 ? hit : -1;
  }
  // State snapshots: whether the per-sequence state another sequence had after computing
  // positions [0, at) of the same tokens (with every position computed, or replayed as
  // prefix_replay_start says) is exactly the state a sequence whose decoder bounded
  // replay starts at replay_from (0: none) would have there; both computations use the
  // same replay_from rule (engine-wide). false: hits always replay.
  virtual bool state_restorable(int64_t at, int64_t replay_from) const {
    (void)at, (void)replay_from;
    return false;
  }
  // Expert parallelism (ModelConfig::ep_size > 1): the model's expert placement and
  // exchanges, or null. Every rank runs the same sequence of forwards; a rank with nothing
  // to compute runs forward_idle(), which takes part in every exchange with no tokens.
  virtual ExpertParallel* expert_parallel() { return nullptr; }
  virtual void forward_idle(ThreadPool* pool) { (void)pool; }
  // The model's own drafter: drafts per step (0: none, or not enabled by
  // ModelConfig::dspark), and the drafting after a forward (jobs of distinct sequences).
  virtual int64_t draft_block() const { return 0; }
  virtual void draft(const Batch& last, const DraftJob* jobs, int64_t n_jobs, const CacheViews& cache,
                     ThreadPool* pool) {
    (void)last, (void)jobs, (void)n_jobs, (void)cache, (void)pool;
  }
};

using ModelFactory =
    std::function<std::unique_ptr<Model>(const io::ModelConfig&, const io::Checkpoint&)>;

// Registers a factory under an architecture name (LlamaForCausalLM, ...).
void register_model(const std::string& architecture, ModelFactory factory);
bool is_registered(const std::string& architecture);
std::vector<std::string> registered_architectures();

// Builds the model for cfg.architecture; throws gannet::Error naming the architecture and
// listing the supported ones when it is unknown, or naming a tensor that is missing or
// has the wrong shape.
std::unique_ptr<Model> create_model(const io::ModelConfig& cfg, const io::Checkpoint& ckpt);

}  // namespace gannet::model
