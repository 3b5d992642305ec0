// Random-weight DeepSeek-V4.1 checkpoints for tests and benchmarks (`gannet make-model
// --arch deepseek_v41 --preset tiny|small`), byte-identical for equal inputs.
#pragma once

#include <cstdint>
#include <functional>
#include <string>

namespace gannet::model::deepseek_v41 {

// preset: tiny (deepseek-v4-architecture.md §10.2 without DSpark) or small (~1.3 B
// parameters, MXFP4 experts). config_overrides: a JSON object merged into text_config.
// router_skew > 0 adds router_skew * (E - 1 - e) / (E - 1) to the backbone's selection
// bias of expert e (a skewed router, for expert load balancing).
void write_random_deepseek_v41(const std::string& preset, uint64_t seed, const std::string& config_overrides,
                               const std::string& out_dir,
                               const std::function<void(uint64_t, uint64_t)>& progress = nullptr,
                               float router_skew = 0.0f);

}  // namespace gannet::model::deepseek_v41
