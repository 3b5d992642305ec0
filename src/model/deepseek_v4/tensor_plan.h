// DeepSeek-V4-Flash from its config alone: every backbone tensor as the released checkpoint
// stores it (the loader's names, dtypes and shapes), what a decode token reads, the cache
// per token and the state per sequence; and random-weight checkpoints in those formats
// (`gannet make-model --arch deepseek_v4 --preset tiny|small`).
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include "io/deepseek_v4_config.h"
#include "kernels/cache_spec.h"
#include "model/deepseek_v41/weights.h"

namespace gannet::model::deepseek_v4 {

using deepseek_v41::TensorPlan;

// The backbone (no mtp.* drafter): FP8 E4M3 linears with E8M0 weight_block tiles, MXFP4
// routed experts, BF16 norms / embeddings / compressors, F32 mHC, sinks, gate biases and
// compressor position biases (ape), I64 hash-routing tables.
std::vector<TensorPlan> tensor_plan(const io::DeepseekV4Config& c);

struct SizeSummary {
  int64_t params = 0;
  uint64_t weight_bytes = 0;
  std::map<std::string, uint64_t> bytes_by_dtype;
  uint64_t read_bytes_per_token = 0;  // active experts, one embedding row, one routing-table row
};
SizeSummary size_summary(const io::DeepseekV4Config& c);

// The cache: per compression ratio a paged group of f32 entries (ratio-4 entries carry the
// index key), and the state slot (window rings, compressor and indexer rings) with each
// layer's offsets. spec_tokens: ring room for rejected drafts.
struct CacheLayout {
  kernels::CacheSpec spec;
  std::vector<int64_t> win_off, ring_off, iring_off, comp_index;  // [layers] bytes / -1
  std::vector<std::pair<int64_t, int64_t>> arena;                  // [compressed layers]: (group, layer in group)
};
CacheLayout make_cache_layout(const io::DeepseekV4Config& c, int64_t spec_tokens = 0);

// preset: tiny (the shapes of tests/golden/deepseek-v4-tiny) or small (~1.3 B parameters,
// mostly MXFP4 experts); config_overrides: a JSON object merged into the config.
void write_random_deepseek_v4(const std::string& preset, uint64_t seed, const std::string& config_overrides,
                              const std::string& out_dir, const std::function<void(uint64_t, uint64_t)>& progress = nullptr);

}  // namespace gannet::model::deepseek_v4
