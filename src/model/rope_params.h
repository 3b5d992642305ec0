// The rope table parameters of a parsed rope_scaling (io/rope_config.h), for every model.
#pragma once

#include "io/rope_config.h"
#include "kernels/cpu/rope.h"

namespace gannet::model {

inline kernels::RopeScalingParams rope_scaling_params(const io::RopeScaling& r) {
  kernels::RopeScalingParams s;
  switch (r.kind) {
    case io::RopeScaling::Kind::kNone: s.kind = kernels::RopeScalingKind::kNone; break;
    case io::RopeScaling::Kind::kLinear: s.kind = kernels::RopeScalingKind::kLinear; break;
    case io::RopeScaling::Kind::kLlama3: s.kind = kernels::RopeScalingKind::kLlama3; break;
    case io::RopeScaling::Kind::kYarn: s.kind = kernels::RopeScalingKind::kYarn; break;
  }
  s.factor = r.factor;
  s.low_freq_factor = r.low_freq_factor;
  s.high_freq_factor = r.high_freq_factor;
  s.original_max_position_embeddings = r.original_max_position_embeddings;
  s.beta_fast = r.beta_fast;
  s.beta_slow = r.beta_slow;
  s.mscale = r.mscale;
  s.mscale_all_dim = r.mscale_all_dim;
  s.attention_factor = r.attention_factor;
  s.truncate = r.truncate;
  return s;
}

}  // namespace gannet::model
