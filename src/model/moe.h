// Mixture-of-experts feed-forward layer (DeepSeek-V3/V4 style; spec: deepseek-v4-architecture.md
// §5.7 and §9.5): a router scores every expert, each token runs its top_k routed experts
// plus the shared experts, and the outputs are summed with routing weights.
//
// Per token t (every step depends only on t's own row of x, so a token's bits do not depend
// on the batch, the thread count or the ISA):
//   1. l[e] = canonical dot of x[t] and router row e (packed_weight.h), then l[e] / gate_temp.
//   2. s[e] = sqrt(softplus_f32(l[e]))  (kSqrtSoftplus, log.h; softplus(z) = z for z > 20)
//           | softmax(l)[e]             (kSoftmax, softmax.h: canonical sum over all E)
//           | 1 / (1 + exp_f32(-l[e]))  (kSigmoid)
//   3. Selection: the top_k experts by s[e] + bias[e] (bias only here; 0 without one). Of
//      equal values the lower expert id wins, so the choice is a function of the values.
//   4. Weights from the unbiased s: with norm_topk_prob and top_k > 1,
//      w_e = s[e] / (sum + 1e-20f), sum = s[e_1] + s[e_2] + ... + s[e_k] added left to right
//      over the selected ids in increasing order; otherwise w_e = s[e]. Then
//      w_e = w_e * routed_scaling_factor.
//   5. Expert e (clamped SwiGLU; L = swiglu_limit, skipped when L is 0 or +inf):
//      g = w1·x, u = w3·x (canonical packed products), u = clamp(u, -L, L), g = min(g, L)
//      (NaN stays NaN), h = silu(g) * u exactly as kernels::silu_mul, h = h * w_e (routed
//      experts only: the weight is applied before the down projection, as the V4 reference),
//      optionally h = bf16(h) (round_hidden_bf16: the V4 reference casts h to bf16 before
//      w2; off by default because the rest of the engine keeps activations in f32),
//      out_e = w2·h (canonical packed product).
//   6. Combine, in f32, starting from the first term (no +0 start):
//        y = ((o_{e_1} + o_{e_2}) + ... + o_{e_k}) + o_shared_0 + o_shared_1 + ...
//      with e_1 < e_2 < ... < e_k the selected expert ids, shared experts in index order.
//
// Execution: tokens are grouped by expert; the gate/up projections (with the activation)
// run as one ThreadPool::parallel_for over (expert, output-column tile) work items of all
// active experts, the down projections as a second one, the combine as a third, plus the
// router's product: a fixed number of parallel loops per layer, however many experts are
// active. Work items go to threads by estimated cost; which thread computes a tile never
// changes its bits.
//
// No group-limited routing (n_group = 1), hash routing, capacity limit or token dropping.
#pragma once

#include <cstdint>
#include <vector>

#include "core/cpu_features.h"
#include "kernels/cpu/packed_weight.h"

namespace gannet {
class ThreadPool;
}

namespace gannet::model {

enum class MoeScoring { kSqrtSoftplus, kSoftmax, kSigmoid };
const char* moe_scoring_name(MoeScoring s);

struct MoeConfig {
  int64_t hidden = 0;      // model width: x and y rows
  int64_t n_experts = 0;   // routed experts (E)
  int64_t top_k = 0;       // experts per token, 1..n_experts
  int64_t n_shared = 0;    // shared experts, applied to every token with weight 1
  MoeScoring scoring = MoeScoring::kSqrtSoftplus;
  bool norm_topk_prob = true;          // renormalise the selected weights (when top_k > 1)
  float routed_scaling_factor = 1.0f;  // V4: 1.5
  float swiglu_limit = 0.0f;           // 0 or +inf: no clamp (V4: 10)
  float gate_temp = 1.0f;              // V4.1 divides the router logits by it; > 0
  bool round_hidden_bf16 = false;      // see step 5 above
  // > 0: the activation rows entering every expert product (x for w1/w3, h for w2) are
  // fake-quantized to FP8 E4M3 with power-of-two scales per block of this many values
  // (FQ8 of fake_quant.h), as FP8/FP4 GPU kernels and the DeepSeek reference do.
  int64_t act_quant_block = 0;
};

// One SwiGLU expert; any packed format (typically MXFP4 routed, FP8 shared).
struct MoeExpert {
  kernels::PackedWeight w1;  // gate [inter, hidden]
  kernels::PackedWeight w3;  // up   [inter, hidden]
  kernels::PackedWeight w2;  // down [hidden, inter]
};

// Views of the weights (not owned; typically the checkpoint's memory map).
struct MoeWeights {
  kernels::PackedWeight router;        // [n_experts, hidden], f32 or bf16 in checkpoints
  std::vector<float> selection_bias;   // [n_experts], or empty for none
  // [n_experts], or empty: the selection bias of the rows a forward marks `alt` instead
  // (DeepSeek-V4.1's image-span tokens select with bias_vl).
  std::vector<float> selection_bias_alt;
  std::vector<MoeExpert> experts;      // [n_experts]; one inter size for all of them
  // Expert parallelism at load: experts holds this rank's share only, these ids.
  std::vector<int32_t> expert_ids;
  std::vector<MoeExpert> shared;       // [n_shared]; one inter size, may differ from routed
};

class MoeLayer;
class ExpertParallel;

// Scratch of one layer's forward. Buffers grow to the largest batch seen and are reused,
// so after reserve() (or a first call with as many tokens) forward performs no heap
// allocation. Not shared between concurrent forwards.
class MoeWorkspace {
 public:
  // Sizes every buffer for batches of up to max_tokens tokens of `layer` (and any layer
  // with the same shapes).
  void reserve(const MoeLayer& layer, int64_t max_tokens);
  // Capacity of all buffers, bytes: stays constant once reserved for the batch sizes used.
  uint64_t capacity_bytes() const;

  // The routing of the last route() / forward(): per token, its top_k expert ids in
  // increasing order and their weights (step 4). [n_tokens, top_k]
  const int32_t* expert_ids() const { return ids_.data(); }
  const float* expert_weights() const { return weights_.data(); }

 private:
  friend class MoeLayer;
  struct Group {              // one expert's share of the batch
    const MoeExpert* w = nullptr;
    const float* x = nullptr; // [rows, hidden]: gathered token rows, or x itself (shared)
    int64_t rows = 0;         // tokens routed to it
    int64_t out_row = 0;      // its first row in out_
    int64_t hid_off = 0;      // its first float in gate_ / up_ ([rows, inter])
    bool routed = true;       // routed experts scale h by their token's weight
    int64_t xp_off = -1;      // this phase's input packed for the lane GEMM in xp_ (-1: not)
  };
  struct Item {               // columns [c0, c1) of one group's projection
    int32_t group = 0;
    int32_t c0 = 0, c1 = 0;
  };

  std::vector<float> logits_;        // [T, E] router logits, then scores
  std::vector<float> select_;        // [E] scores + bias of the token being routed
  std::vector<uint8_t> chosen_;      // [E] selection mask of the token being routed
  std::vector<int32_t> top_;         // [top_k] selection in progress (value order)
  std::vector<int32_t> ids_;         // [T, top_k] selected ids, increasing per token
  std::vector<float> weights_;       // [T, top_k] routing weights
  std::vector<int64_t> rows_;        // [T, top_k] row of (token, choice) in the routed groups
  std::vector<int64_t> count_;       // [E] tokens per expert, then next free row
  std::vector<float> row_weight_;    // [T * top_k] routing weight of each grouped row
  std::vector<float> xg_;            // [T * top_k, hidden] token rows grouped by expert
  std::vector<float> xq_;            // [T, hidden] x fake-quantized (act_quant_block only)
  std::vector<float> gate_, up_;     // per group [rows, inter]; gate_ becomes h
  std::vector<float> out_;           // [T * (top_k + n_shared), hidden] expert outputs
  std::vector<float> xp_;            // the phase's inputs of groups with many rows, lane-packed
  std::vector<int32_t> lane_groups_; // [E + n_shared] those groups
  std::vector<Group> groups_;        // [E + n_shared]
  std::vector<Item> items_;          // work items of the current phase
  std::vector<double> cost_;         // [items + 1] prefix sums of estimated cost
  // Expert parallelism (expert_parallel.h): per (token, choice) its destination rank and
  // row there; rows to send [rows, 2 + hidden] (slot, weight, x) and received; results.
  std::vector<int32_t> dest_;        // [T * top_k] rank
  std::vector<int64_t> dest_row_;    // [T * top_k] row in the send buffer
  std::vector<int64_t> occ_;         // [E] occurrences so far (replica choice)
  std::vector<int64_t> send_n_, recv_n_, send_b_, recv_b_;  // [ranks] rows, bytes
  std::vector<int64_t> send_off_;    // [ranks] next row of each destination's block
  std::vector<float> send_, recv_;   // rows in transit
  std::vector<float> back_;          // [received rows, hidden] results in received order
  std::vector<float> result_;        // [T * top_k, hidden] results back at the owner
  std::vector<int64_t> recv_out_;    // [received rows] row of each in out_
};

class MoeLayer {
 public:
  // Checks cfg and the weights' shapes; throws gannet::Error naming the field at fault.
  MoeLayer(const MoeConfig& cfg, MoeWeights weights);
  // Expert parallel: the routed experts live in ep's slots for MoE layer `ep_layer`
  // (weights.experts must be empty); forward then exchanges rows with the other ranks and
  // must be called by all of them together (n_tokens may be 0).
  MoeLayer(const MoeConfig& cfg, MoeWeights weights, ExpertParallel* ep, int64_t ep_layer);
  bool expert_parallel() const { return ep_ != nullptr; }

  const MoeConfig& config() const { return cfg_; }
  const MoeWeights& weights() const { return w_; }
  int64_t inter() const { return inter_; }                // routed experts' inter size
  int64_t shared_inter() const { return shared_inter_; }  // 0 without shared experts

  // y[T, hidden] = MoE(x[T, hidden]); pool may be nullptr. y must not alias x.
  // forced_ids [T, top_k], if given, replace step 3's selection (hash routing: DeepSeek-V4's
  // first layers pick experts by token id); the weights still come from the scores.
  // alt [T], if given, marks rows that select with selection_bias_alt (which must exist).
  void forward(const float* x, int64_t n_tokens, float* y, MoeWorkspace& ws, ThreadPool* pool,
               const int32_t* forced_ids = nullptr, const uint8_t* alt = nullptr) const;
  void forward_isa(Isa isa, const float* x, int64_t n_tokens, float* y, MoeWorkspace& ws, ThreadPool* pool,
                   const int32_t* forced_ids = nullptr, const uint8_t* alt = nullptr) const;

  // Steps 1-4 only: fills ws.expert_ids() / ws.expert_weights().
  void route_isa(Isa isa, const float* x, int64_t n_tokens, MoeWorkspace& ws, ThreadPool* pool,
                 const int32_t* forced_ids = nullptr, const uint8_t* alt = nullptr) const;

 private:
  void run_items(Isa isa, MoeWorkspace& ws, ThreadPool* pool, bool down) const;
  void forward_ep(Isa isa, const float* x, int64_t n_tokens, float* y, MoeWorkspace& ws, ThreadPool* pool,
                  const int32_t* forced_ids, const uint8_t* alt) const;
  void check_config();
  void combine(Isa isa, const float* routed, const int64_t* rows, const float* shared, int64_t T, float* y,
               ThreadPool* pool) const;

  MoeConfig cfg_;
  MoeWeights w_;
  int64_t inter_ = 0, shared_inter_ = 0;
  float limit_ = 0.0f;  // swiglu_limit, +inf when off
  ExpertParallel* ep_ = nullptr;
  int64_t ep_layer_ = -1;
};

}  // namespace gannet::model
