// RopeTable: inverse frequencies as transformers computes them in float32
// (modeling_rope_utils.py), angles pos * inv_freq in float32, then cosf/sinf.
#include <algorithm>
#include <cmath>

#include "core/error.h"
#include "kernels/cpu/rope.h"

namespace gannet::kernels {

namespace {

// Positions served from the precomputed table; beyond, cos_sin() computes on the fly with
// the same float32 arithmetic, so the split does not change any bit.
constexpr int64_t kTablePositions = 32768;

// base ** (arange(0, dim, 2) / dim) in float32.
std::vector<float> pos_freqs(int dim, double theta) {
  std::vector<float> p(dim / 2);
  for (int i = 0; i < dim / 2; ++i) p[i] = std::pow(float(theta), float(2 * i) / float(dim));
  return p;
}

std::vector<float> llama3(std::vector<float> inv, const RopeScalingParams& s) {
  const float factor = float(s.factor);
  const double old_len = double(s.original_max_position_embeddings);
  const float low_wavelen = float(old_len / s.low_freq_factor);
  const float high_wavelen = float(old_len / s.high_freq_factor);
  for (float& f : inv) {
    const float wavelen = float(2.0 * M_PI) / f;
    const float scaled = wavelen > low_wavelen ? f / factor : f;
    const float smooth = (float(old_len) / wavelen - float(s.low_freq_factor)) /
                         float(s.high_freq_factor - s.low_freq_factor);
    const bool medium = !(wavelen < high_wavelen) && !(wavelen > low_wavelen);
    f = medium ? (1.0f - smooth) * scaled / factor + smooth * scaled : scaled;
  }
  return inv;
}

double yarn_mscale(double scale, double mscale) {
  return scale <= 1.0 ? 1.0 : 0.1 * mscale * std::log(scale) + 1.0;
}

std::vector<float> yarn(int dim, double theta, const RopeScalingParams& s, float* attention_factor) {
  const double factor = s.factor;
  if (s.attention_factor > 0) *attention_factor = float(s.attention_factor);
  else if (s.mscale != 0 && s.mscale_all_dim != 0)
    *attention_factor = float(yarn_mscale(factor, s.mscale) / yarn_mscale(factor, s.mscale_all_dim));
  else *attention_factor = float(yarn_mscale(factor, 1.0));

  const double orig = double(s.original_max_position_embeddings);
  auto correction_dim = [&](double rotations) {
    return (dim * std::log(orig / (rotations * 2 * M_PI))) / (2 * std::log(theta));
  };
  double low = correction_dim(s.beta_fast), high = correction_dim(s.beta_slow);
  if (s.truncate) low = std::floor(low), high = std::ceil(high);
  low = std::max(low, 0.0);
  high = std::min(high, double(dim - 1));
  if (low == high) high += 0.001;  // HF: prevent a zero-width ramp

  std::vector<float> p = pos_freqs(dim, theta), inv(dim / 2);
  for (int i = 0; i < dim / 2; ++i) {
    const float extrapolation = 1.0f / p[i];
    const float interpolation = 1.0f / (float(factor) * p[i]);
    const float ramp = std::clamp((float(i) - float(low)) / float(high - low), 0.0f, 1.0f);
    const float extrapolation_factor = 1.0f - ramp;
    inv[i] = interpolation * (1.0f - extrapolation_factor) + extrapolation * extrapolation_factor;
  }
  return inv;
}

}  // namespace

RopeTable::RopeTable(int rotary_dim, double theta, int64_t max_positions, const RopeScalingParams& s)
    : rotary_dim_(rotary_dim), max_positions_(max_positions) {
  GANNET_CHECK(rotary_dim > 0 && rotary_dim % 2 == 0, "rotary_dim=", rotary_dim);
  GANNET_CHECK(max_positions > 0 && theta > 0, "max_positions=", max_positions, " theta=", theta);
  const bool needs_original = s.kind == RopeScalingKind::kLlama3 || s.kind == RopeScalingKind::kYarn;
  GANNET_CHECK(!needs_original || s.original_max_position_embeddings > 0,
               "rope scaling needs original_max_position_embeddings");
  std::vector<float> p = pos_freqs(rotary_dim, theta);
  inv_freq_.resize(p.size());
  for (size_t i = 0; i < p.size(); ++i) inv_freq_[i] = 1.0f / p[i];
  switch (s.kind) {
    case RopeScalingKind::kNone: break;
    case RopeScalingKind::kLinear:
      for (float& f : inv_freq_) f = f / float(s.factor);
      break;
    case RopeScalingKind::kLlama3: inv_freq_ = llama3(inv_freq_, s); break;
    case RopeScalingKind::kYarn: inv_freq_ = yarn(rotary_dim, theta, s, &attention_factor_); break;
  }
  table_positions_ = std::min(max_positions, kTablePositions);
  const int64_t half = rotary_dim / 2;
  cos_.resize(table_positions_ * half);
  sin_.resize(table_positions_ * half);
  for (int64_t pos = 0; pos < table_positions_; ++pos)
    compute(pos, &cos_[pos * half], &sin_[pos * half]);
}

void RopeTable::cos_sin(int64_t pos, float* cos, float* sin) const {
  const int64_t half = rotary_dim_ / 2;
  if (pos < table_positions_) {
    std::copy_n(&cos_[pos * half], half, cos);
    std::copy_n(&sin_[pos * half], half, sin);
  } else {
    compute(pos, cos, sin);
  }
}

void RopeTable::compute(int64_t pos, float* cos, float* sin) const {
  const int64_t half = rotary_dim_ / 2;
  for (int64_t i = 0; i < half; ++i) {
    const float angle = float(pos) * inv_freq_[i];
    cos[i] = std::cos(angle) * attention_factor_;
    sin[i] = std::sin(angle) * attention_factor_;
  }
}

const float* RopeTable::cos_row(int64_t pos) const {
  return pos < table_positions_ ? &cos_[pos * (rotary_dim_ / 2)] : nullptr;
}
const float* RopeTable::sin_row(int64_t pos) const {
  return pos < table_positions_ ? &sin_[pos * (rotary_dim_ / 2)] : nullptr;
}

}  // namespace gannet::kernels
