// Rotary position embedding: the frequency table (Hugging Face's float32 formulas for
// default, linear, llama3 and yarn scaling) and its application to q/k heads in place.
// Elementwise per (token, pair): no reduction, so every variant is trivially exact.
#pragma once

#include <cstdint>
#include <vector>

#include "core/cpu_features.h"

namespace gannet::kernels {

enum class RopeScalingKind { kNone, kLinear, kLlama3, kYarn };

// Fields as in config.json's rope_scaling; unused ones are ignored.
struct RopeScalingParams {
  RopeScalingKind kind = RopeScalingKind::kNone;
  // linear, llama3, yarn. (For yarn, transformers >= 4.5x replaces factor by
  // max_position_embeddings / original_max_position_embeddings when the latter is in
  // the config; that choice is the caller's.)
  double factor = 1.0;
  double low_freq_factor = 1.0, high_freq_factor = 4.0;  // llama3
  int64_t original_max_position_embeddings = 0;          // llama3, yarn
  double beta_fast = 32.0, beta_slow = 1.0;              // yarn
  double mscale = 0.0, mscale_all_dim = 0.0;             // yarn; 0 = unset
  double attention_factor = 0.0;  // yarn: multiplies cos and sin; 0 = derive as HF does
  bool truncate = true;           // yarn: floor/ceil the correction range
};

class RopeTable {
 public:
  RopeTable() = default;
  // rotary_dim: rotated channels per head (even; head_dim unless partial rotary).
  RopeTable(int rotary_dim, double theta, int64_t max_positions, const RopeScalingParams& scaling = {});

  int rotary_dim() const { return rotary_dim_; }
  int64_t max_positions() const { return max_positions_; }
  float attention_factor() const { return attention_factor_; }
  const std::vector<float>& inv_freq() const { return inv_freq_; }  // [rotary_dim / 2]

  // cos/sin of pos * inv_freq[i] (times attention_factor), i < rotary_dim / 2. Served from
  // a table for the first positions, computed the same way beyond it.
  void cos_sin(int64_t pos, float* cos, float* sin) const;  // cos, sin: [rotary_dim / 2]
  // Table rows, or nullptr when pos is past the table.
  const float* cos_row(int64_t pos) const;
  const float* sin_row(int64_t pos) const;

 private:
  void compute(int64_t pos, float* cos, float* sin) const;

  int rotary_dim_ = 0;
  int64_t max_positions_ = 0, table_positions_ = 0;
  float attention_factor_ = 1.0f;
  std::vector<float> inv_freq_;  // [rotary_dim / 2]
  std::vector<float> cos_, sin_;  // [table_positions, rotary_dim / 2]
};

// Rotates x [n_tokens, n_heads, head_dim] in place; token t uses positions[t] (< table
// max_positions). The rotated channels are [rotary_offset, rotary_offset + rotary_dim) of
// each head. Non-interleaved pairs channel i with i + rotary_dim/2 (HF rotate_half);
// interleaved pairs 2i with 2i+1. Pair i: (a, b) -> (a*cos - b*sin, b*cos + a*sin), each
// product rounded (no FMA). inverse rotates by -pos (conjugate).
void apply_rope(float* x, int64_t n_tokens, int n_heads, int head_dim, const int32_t* positions,
                const RopeTable& table, bool interleaved, int rotary_offset = 0, bool inverse = false);
void apply_rope_isa(Isa isa, float* x, int64_t n_tokens, int n_heads, int head_dim,
                    const int32_t* positions, const RopeTable& table, bool interleaved,
                    int rotary_offset = 0, bool inverse = false);

}  // namespace gannet::kernels
