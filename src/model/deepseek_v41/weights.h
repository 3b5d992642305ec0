// DeepSeek-V4.1 weights as the raw released checkpoint names them (deepseek-v4-architecture.md
// §9.7), held packed over the memory map: FP8 E4M3 linears with E8M0 block scales, MXFP4
// routed experts, FP8 Engram tables with one E8M0 scale per 32 channels. Small tensors
// (norm weights, mHC parameters, sinks, gate biases) are copied to f32.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "core/dtype.h"
#include "io/checkpoint.h"
#include "io/deepseek_v41_config.h"
#include "kernels/cpu/packed_weight.h"
#include "model/moe.h"

namespace gannet::model {
class ExpertParallel;
}

namespace gannet::model::deepseek_v41 {

struct MhcSite {
  kernels::PackedWeight fn;  // [(2 + hc) * hc, hc * hidden] f32
  std::vector<float> base;   // [(2 + hc) * hc]
  std::vector<float> scale;  // [3]
};

struct EngramWeights {
  kernels::PackedWeight table;  // [rows, head_dim] FP8, scales [rows, head_dim / 32] E8M0
  kernels::PackedWeight wkv;    // [(hc + 1) * hidden, n_cols * head_dim]
  std::vector<float> lambda;    // [hc, hidden]: q_weight * k_weight (only the product is used)
};

struct LayerWeights {
  MhcSite hc_attn, hc_ffn;
  std::vector<float> attn_norm, ffn_norm;  // [hidden]
  kernels::PackedWeight wq_a, wq_b, wkv, wo_a, wo_b;
  std::vector<float> q_norm, kv_norm, attn_sink;
  // KV sources: the compressor and the indexer's key path.
  kernels::PackedWeight comp_wkv, comp_wgate;  // wgate only at ratio > 1
  std::vector<float> comp_norm;
  kernels::PackedWeight idx_wk;
  std::vector<float> idx_k_norm;
  // Index sources: the indexer's query path.
  kernels::PackedWeight idx_wq_b, idx_weights_proj;
  MoeWeights moe;
  bool has_engram = false;
  EngramWeights engram;
};

// The DSpark drafter (deepseek-v4-architecture.md §9.8): num_nextn_predict_layers
// window-only stages (`mtp.{k}`, dspark_n_routed_experts experts each), the projection of
// the captured target-layer residuals on stage 0, and the last stage's norm, Markov head
// and confidence head.
struct DsparkWeights {
  std::vector<LayerWeights> stages;
  kernels::PackedWeight main_proj;            // [hidden, targets * hidden] FP8
  std::vector<float> main_norm;               // [hidden]
  std::vector<float> norm;                    // [hidden]
  kernels::PackedWeight markov_w1, markov_w2;  // [vocab, markov_rank] each
  std::vector<float> confidence;              // [hidden + markov_rank]
};

struct Weights {
  kernels::PackedWeight embed;  // [vocab, hidden] bf16
  kernels::PackedWeight head;   // [vocab, hidden]
  std::vector<float> norm;      // [hidden]
  std::vector<LayerWeights> layers;
  int64_t mtp_tensors = 0;      // DSpark tensors present
  bool has_dspark = false;      // every DSpark tensor the config implies was loaded
  DsparkWeights dspark;
};

// Every tensor the config implies, with its dtype and shape as the released checkpoint
// stores it: the backbone, then the DSpark drafter's (`dspark`) when
// num_nextn_predict_layers > 0, then the vision tower's (`vision`, BF16) when the config
// has a vision_config.
struct TensorPlan {
  std::string name;
  DType dtype;
  std::vector<int64_t> shape;
  int64_t params = 0;  // weights' elements (two per byte of packed FP4); 0 for scales
  uint64_t bytes = 0;
  bool routed_expert = false, engram_table = false, dspark = false;
  bool vision = false;  // the vision tower, aligner and image delimiters (vision_config)
  int64_t int_range = 0;  // integer tables (I64 / I32): each row's values distinct, below this
};
std::vector<TensorPlan> tensor_plan(const io::DeepseekV41Config& cfg);

// Appends plan entries as the released DeepSeek checkpoints store them (V4 and V4.1): a
// plain tensor; an FP8 E4M3 linear with E8M0 scales on block x block tiles; an MXFP4
// routed expert (two codes a byte) with an E8M0 scale per 32.
struct TensorPlanBuilder {
  std::vector<TensorPlan>& out;
  int64_t block;
  TensorPlan* add(const std::string& name, DType dt, std::vector<int64_t> shape, bool is_scale = false);
  void fp8(const std::string& stem, int64_t n, int64_t k);
  void fp4(const std::string& stem, int64_t n, int64_t k);
};

// A small tensor of `shape` (F32, BF16 or F16 storage) as f32; errors name the tensor.
std::vector<float> load_f32(const io::Checkpoint& ckpt, const std::string& name, const std::vector<int64_t>& shape);

// Loads and checks every tensor: names (every missing or unexpected tensor is reported
// in one error), dtypes, shapes and scale shapes. The DSpark tensors are optional as a
// whole (checkpoints converted without them still serve without speculation); when some
// are present, all must be.
// With ep, the backbone's MoE layers load only the routed experts ep->loads_expert()
// names (MoeWeights::expert_ids); the drafter's stay whole.
Weights load_weights(const io::DeepseekV41Config& cfg, const io::Checkpoint& ckpt, const ExpertParallel* ep = nullptr);

}  // namespace gannet::model::deepseek_v41

namespace gannet::model::deepseek_v41 {

// What the config alone says about the model's size (gannet info, capacity planning).
struct SizeSummary {
  int64_t params = 0;                          // backbone (DSpark tensors not included)
  int64_t dspark_params = 0;                   // the drafter's
  int64_t vision_params = 0;                   // the vision tower's, aligner's and delimiters'
  uint64_t vision_bytes = 0;
  uint64_t weight_bytes = 0;                   // scales included
  std::map<std::string, uint64_t> bytes_by_dtype;
  // One decode token: everything but the routed experts and Engram tables, plus
  // num_experts_per_tok experts per layer, one embedding row and the looked-up Engram rows.
  uint64_t read_bytes_per_token = 0;
};
SizeSummary size_summary(const io::DeepseekV41Config& cfg);

}  // namespace gannet::model::deepseek_v41
