// Rotary-embedding fields of config.json, resolved as transformers 5 resolves them:
// `rope_parameters` (what transformers 5 writes) or the legacy `rope_theta` +
// `rope_scaling` (transformers 4), `partial_rotary_factor`, and the top-level
// `original_max_position_embeddings`. Every type and field either shapes the table or is
// refused with an error naming it.
#pragma once

#include <cstdint>
#include <nlohmann/json_fwd.hpp>
#include <string>

namespace gannet::io {

struct RopeScaling {
  enum class Kind { kNone, kLinear, kLlama3, kYarn } kind = Kind::kNone;
  double factor = 1.0;                                   // linear, llama3, yarn
  double low_freq_factor = 1.0, high_freq_factor = 4.0;  // llama3
  int64_t original_max_position_embeddings = 0;          // llama3, yarn: always resolved (> 0)
  double beta_fast = 32.0, beta_slow = 1.0;              // yarn
  double mscale = 0.0, mscale_all_dim = 0.0;             // yarn (0 = unset)
  double attention_factor = 0.0;                         // yarn (0 = derive from factor and mscales)
  bool truncate = true;                                  // yarn: floor/ceil the correction range
};

struct RopeConfig {
  double theta = 10000.0;
  RopeScaling scaling;
  std::string source;  // "rope_parameters", "rope_scaling" or "rope_theta" / "default": for `info`
};

// `j` is the whole config object. head_dim and max_position_embeddings must already be
// resolved (the rotary width and yarn's default original length depend on them).
RopeConfig parse_rope_config(const nlohmann::json& j, int64_t head_dim, int64_t max_position_embeddings,
                             const std::string& file);

const char* rope_kind_name(RopeScaling::Kind k);

}  // namespace gannet::io
