#include "kernels/cache_spec.h"

#include "core/error.h"

namespace gannet::kernels {

const char* cache_format_name(CacheFormat f) {
  switch (f) {
    case CacheFormat::kF32: return "f32";
    case CacheFormat::kBF16: return "bf16";
    case CacheFormat::kMixed: return "mixed";
  }
  return "?";
}

int64_t entries_per_block(const CacheGroup& g, int block_size) {
  return g.tokens_per_entry <= block_size ? block_size / g.tokens_per_entry : 1;
}

uint64_t CacheSpec::bytes_per_block(int block_size) const {
  uint64_t b = 0;
  for (const CacheGroup& g : groups)
    b += uint64_t(g.layers) * uint64_t(entries_per_block(g, block_size)) * uint64_t(g.bytes_per_entry);
  return b;
}

double CacheSpec::bytes_per_token() const {
  double b = 0;
  for (const CacheGroup& g : groups) b += double(g.layers) * double(g.bytes_per_entry) / double(g.tokens_per_entry);
  return b;
}

void CacheSpec::check_block_size(int block_size) const {
  for (const CacheGroup& g : groups)
    if (g.tokens_per_entry < 1 || (block_size % g.tokens_per_entry && g.tokens_per_entry % block_size))
      fail("--block-size ", block_size, " and ", g.tokens_per_entry, " (the positions per entry of the model's cache group '",
           g.name, "') must divide one another");
}

}  // namespace gannet::kernels
