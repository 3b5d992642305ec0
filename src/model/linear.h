// A linear layer's weight as a kernels::PackedWeight plus an optional f32 bias. Stored
// formats: f32 and bf16 used in place from the memory map, f16 widened to f32 at load,
// FP8 block-scaled, MXFP4 and int8-per-row used in place (packed_weight_loader.h). A float
// weight can be quantized to fp8 or int8 at load (`--quantize`), into memory it owns.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "core/dtype.h"
#include "core/thread_pool.h"
#include "io/checkpoint.h"
#include "io/quant_config.h"
#include "kernels/cpu/packed_weight.h"

namespace gannet::model {

struct LinearLoad {
  int64_t fp8_block = 0;  // quantization_config's weight_block_size; 0: inferred from the scales
  // Convert a float weight at load (kNone: keep it as stored). Packed weights stay as stored.
  io::WeightQuantization::Method quantize = io::WeightQuantization::Method::kNone;
  // Exact activation mode (ModelConfig::exact_activations): FP8 and MXFP4 products first
  // fake-quantize each x row to E4M3 per block of the weight's block_k (fake_quant.h).
  bool exact_activations = false;
  bool pow2_activation_scales = false;
};

class Linear {
 public:
  Linear() = default;
  // Loads `name` (shape [out, in], with its scales if packed) and, when bias_name is not
  // empty, its bias [out].
  Linear(const io::Checkpoint& ckpt, const std::string& name, int64_t out, int64_t in,
         const std::string& bias_name = "", const LinearLoad& load = {});

  // y[m, out] = x[m, in] · Wᵀ (+ bias)
  void forward(const float* x, int64_t m, float* y, ThreadPool* pool) const;

  int64_t in() const { return w_.k; }
  int64_t out() const { return w_.n; }
  kernels::WeightFormat format() const { return w_.format; }
  const kernels::PackedWeight& weight() const { return w_; }
  // Bytes one forward pass streams: elements plus scales, exact for 4-bit formats.
  uint64_t bytes() const { return w_.bytes(); }
  // Row r of the weight as f32 (embedding lookup).
  void row_f32(int64_t r, float* dst) const;
  // Converts a float weight (f32, bf16, f16) to int8 per row or FP8 with 128x128 f32 block
  // scales (packed_quantize.h), held in memory this Linear owns; a packed weight is kept.
  void quantize(io::WeightQuantization::Method m, const std::string& name);

 private:
  kernels::PackedWeight w_;
  // Storage behind w_ when it is not the memory map (widened f16, quantized weights);
  // shared by copies (a tied lm_head is a copy of the embedding).
  std::shared_ptr<const void> owned_;
  std::vector<float> bias_;
  int64_t act_block_ = 0;  // > 0: exact activation mode, FQ8 per this many elements
  bool act_pow2_ = false;
};

// Loads a 1-D f32 copy of a norm weight or bias of length n (any float dtype).
std::vector<float> load_vector_f32(const io::Checkpoint& ckpt, const std::string& name, int64_t n);

}  // namespace gannet::model
