// FLOPs and bytes of one model step of a dense decoder (Llama / Qwen2 / Qwen3), counted
// exactly as model/dense_decoder.cpp computes it, so benchmarks can print achieved GFLOP/s
// and GB/s against the machine's ceilings (DESIGN principle 7).
//
// What one step computes, and how it is counted. T = tokens in the step (all sequences),
// R = logit rows (one per sequence that wants logits), L = layers, h = hidden, f = ffn,
// q = heads * head_dim, kv = kv_heads * head_dim.
//
//   matmul_flops     2 * m * in * out per linear layer of m rows (a multiply-add = 2):
//                    per layer and token q, k, v, o, gate, up, down; lm_head for R rows.
//   attention_flops  for a query at position p (it attends to keys 0..p, p + 1 of them):
//                    2 * head_dim for q·k plus 2 * head_dim for p·v, per key, per query head.
//   softmax_flops    per (query head, key): 5 (scale, running max, subtract, exp, sum);
//                    per (query head, token): head_dim divides by the sum.
//   elementwise_flops, per element touched:
//                    RMSNorm 4 (square and add for the sum of squares, times scale, times
//                    weight; the per-row rsqrt is not counted): 2 per layer per token over h,
//                    Qwen3's q/k norms over q + kv, the final norm over h for R rows only;
//                    bias add 1 (q, k, v when attention_bias; o too for Llama, as the
//                    loader does); RoPE 3 (6 per rotated pair) over q + kv;
//                    SiLU(gate) * up 4 (exp, 1 +, divide, times up; the negation is free)
//                    over f; residual add 1, twice per layer over h.
//                    The embedding gather and the KV store move data and cost no FLOPs.
//   flops            matmul + attention + softmax + elementwise.
//
// Bytes, read or written from memory in one step:
//   weight_bytes     every layer's linear weights once (the step streams them once whatever
//                    the batch), the vocabulary projection once if R > 0 (the embedding
//                    matrix when tied; its gathered rows below are read at a different time
//                    and are counted too), norm weights and biases as the f32 copies the
//                    model holds (4 bytes each, whatever the checkpoint dtype), and the
//                    embedding gather, T rows of h elements.
//   kv_read_bytes    the DISTINCT cached positions each sequence's attention reads:
//                    K and V of context_before + num_tokens positions per layer. The kernel
//                    reads a prefill chunk's early keys once per query, but those re-reads
//                    hit cache; what memory supplies is each position once.
//   kv_write_bytes   K and V of the T new positions per layer.
//   activation_bytes 0: activations of a decode step are small and cache-resident, and a
//                    prefill is compute-bound, so a rough figure would only add noise.
//   moe_expert_bytes 0 for dense models. The hook for MoE models: there only the experts the
//                    step's tokens actually route to are read, which depends on routing;
//                    that estimate lands here, leaving weight_bytes for the dense part.
//
// DeepSeek-V4.1 (DeepseekV41ForCausalLM) has its own model, from the tensor plan of its
// config (model/deepseek_v41/weights.h):
//   matmul_flops     2 * params of every linear a token multiplies (attention, compressor
//                    and indexer projections of the layers that have them, router, shared
//                    experts, mHC projections, Engram wkv) per token, plus num_experts_per_tok
//                    routed experts per token, plus the head for R rows.
//   attention_flops  per query and head 4 * head_dim per key: its window (min(window, p+1))
//                    plus min(index_topk, visible entries) compressed entries in layers with
//                    a compressed branch; the indexer's 2 * index_head_dim per (query, index
//                    head, visible entry) at index-source layers.
//   softmax/elementwise: not separated (0).
//   weight_bytes     everything but the routed experts and Engram tables once, the head if
//                    R > 0, T embedding rows; moe_expert_bytes: per layer, the expected
//                    number of distinct experts T tokens route to (uniform routing:
//                    E * (1 - (1 - k/E)^T)) times one expert's bytes, plus the Engram rows
//                    looked up.
//   kv_read_bytes    per sequence and layer its window ring, per index source the index
//                    keys of every visible entry, per compressed layer the entries its
//                    queries select (at most all visible ones); kv_write_bytes: T positions
//                    of the compact cache (CacheSpec::bytes_per_token).
#pragma once

#include <cstdint>
#include <vector>

#include "io/model_config.h"

namespace gannet::engine {

// One model step: which sequences run, how many tokens each.
struct StepShape {
  struct Seq {
    int64_t num_tokens;      // tokens computed this step (>= 1)
    int64_t context_before;  // positions already cached before them (>= 0)
    bool wants_logits;       // one logit row (the last) for this sequence
  };
  std::vector<Seq> seqs;
};

// What one step costs; see the file comment for exactly what each field counts.
struct StepCost {
  double flops = 0;
  double matmul_flops = 0;       // linear layers, lm_head included
  double attention_flops = 0;    // q·k and p·v
  double softmax_flops = 0;      // scale, max, exp, sum, normalise
  double elementwise_flops = 0;  // norms, biases, RoPE, SiLU * up, residual adds
  double weight_bytes = 0;
  double kv_read_bytes = 0;
  double kv_write_bytes = 0;
  double activation_bytes = 0;   // not estimated (0)
  double moe_expert_bytes = 0;   // MoE experts touched; 0 for dense models
  double total_bytes() const;    // weight + moe expert + kv read + kv write + activation
};

class FlopsEstimator {
 public:
  // Throws gannet::Error when cfg is not a dense decoder architecture or its shapes are
  // not positive. weight_elem_bytes: 2 for bf16, 4 for f32 (f16 is widened to f32 at load).
  FlopsEstimator(const io::ModelConfig& cfg, double weight_elem_bytes, double kv_elem_bytes = 4);

  // A step with no sequences costs nothing (no forward pass runs).
  StepCost step(const StepShape& shape) const;
  // batch sequences, one token each with `context` cached positions before it, all with logits.
  StepCost decode_step(int64_t batch, int64_t context) const;
  // One sequence, the whole prompt in one step, logits for the last row only.
  StepCost prefill(int64_t prompt_len) const;
  // 2 * matmul weights one token multiplies (all layers plus lm_head); no attention.
  double flops_per_token_dense() const;
  // The bytes the loaded model really streams, when its linears are not all of one element
  // size (quantized or converted weights, scales included): all layers' linears together,
  // and the vocabulary projection. Replaces params x weight_elem_bytes for those two.
  void set_streamed_weight_bytes(double layer_linears, double lm_head);

 private:
  StepCost step_v41(const StepShape& shape) const;
  StepCost step_v4(const StepShape& shape) const;

  io::ModelConfig cfg_;
  double weight_elem_bytes_, kv_elem_bytes_;
  // DeepSeek-V4.1 (cfg_.deepseek_v41 set): per-token dense params and bytes, one routed
  // expert's params and bytes, Engram row bytes per token, cache bytes.
  double v41_dense_params_ = 0, v41_dense_bytes_ = 0, v41_expert_params_ = 0, v41_expert_bytes_ = 0;
  double v41_engram_bytes_ = 0, v41_head_bytes_ = 0, v41_embed_row_bytes_ = 0, v41_kv_token_bytes_ = 0;
  // DeepSeek-V4-Flash (cfg_.deepseek_v4 set): per-token dense params, one routed expert's
  // params and bytes (MXFP4 with E8M0 scales per 32, as released), cache bytes per token.
  double v4_dense_params_ = 0, v4_expert_params_ = 0, v4_expert_bytes_ = 0, v4_kv_token_bytes_ = 0;
  double layer_linear_bytes_ = -1, lm_head_bytes_ = -1;  // < 0: from the element size
};

}  // namespace gannet::engine
