// Random-weight DeepSeek-V4.1 checkpoints for tests and benchmarks (`gannet make-model
// --arch deepseek_v41 --preset tiny|small`), byte-identical for equal inputs.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "model/deepseek_v41/weights.h"

namespace gannet::model::deepseek_v41 {

// preset: tiny (deepseek-v4-architecture.md §10.2 without DSpark) or small (~1.3 B
// parameters, MXFP4 experts). config_overrides: a JSON object merged into text_config.
// router_skew > 0 adds router_skew * (E - 1 - e) / (E - 1) to the backbone's selection
// bias of expert e (a skewed router, for expert load balancing).
void write_random_deepseek_v41(const std::string& preset, uint64_t seed, const std::string& config_overrides,
                               const std::string& out_dir,
                               const std::function<void(uint64_t, uint64_t)>& progress = nullptr,
                               float router_skew = 0.0f);

// Writes every tensor of `plan` with random values, seeded by its name, to one safetensors
// file: FP8 E4M3 weights with E8M0 scales on fp8_block x fp8_block tiles (or per 32 for
// Engram tables), MXFP4 routed experts, plain BF16 / F32 tensors, and integer tables of
// distinct values per row (TensorPlan::int_range). Shared by DeepSeek-V4 and V4.1.
void write_random_tensors(const std::vector<TensorPlan>& plan, int64_t fp8_block, uint64_t seed, const std::string& path,
                          const std::function<void(uint64_t, uint64_t)>& progress = nullptr, float router_skew = 0.0f);

}  // namespace gannet::model::deepseek_v41
