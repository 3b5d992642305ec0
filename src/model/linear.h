// A linear layer's weight as stored in the checkpoint: f32 or bf16 used in place from the
// memory map (f16 is widened to f32 at load), plus an optional f32 bias.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "core/dtype.h"
#include "core/thread_pool.h"
#include "io/checkpoint.h"

namespace gannet::model {

class Linear {
 public:
  Linear() = default;
  // Loads `name` (shape [out, in]) and, when bias_name is not empty, its bias [out].
  Linear(const io::Checkpoint& ckpt, const std::string& name, int64_t out, int64_t in,
         const std::string& bias_name = "");

  // y[m, out] = x[m, in] · Wᵀ (+ bias)
  void forward(const float* x, int64_t m, float* y, ThreadPool* pool) const;

  int64_t in() const { return in_; }
  int64_t out() const { return out_; }
  DType dtype() const { return dtype_; }
  uint64_t bytes() const { return uint64_t(in_) * uint64_t(out_) * dtype_size(dtype_); }
  // Row r of the weight as f32 (embedding lookup).
  void row_f32(int64_t r, float* dst) const;

 private:
  int64_t in_ = 0, out_ = 0;
  DType dtype_ = DType::F32;
  const void* w_ = nullptr;
  // Widened f16 weights, shared by copies (a tied lm_head is a copy of the embedding).
  std::shared_ptr<const std::vector<float>> owned_;
  std::vector<float> bias_;
};

// Loads a 1-D f32 copy of a norm weight or bias of length n (any float dtype).
std::vector<float> load_vector_f32(const io::Checkpoint& ckpt, const std::string& name, int64_t n);

}  // namespace gannet::model
