#include "cache/cache_engine.h"

#include <sys/mman.h>

#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "core/error.h"
#include "core/progress_bar.h"

namespace gannet::cache {

int64_t CacheEngine::blocks_for_budget(const model::CacheSpec& spec, uint64_t bytes, int block_size,
                                       int64_t num_state_slots) {
  const uint64_t state = uint64_t(num_state_slots) * uint64_t(spec.state_bytes_per_seq);
  if (bytes <= state) return 0;
  const uint64_t per_block = uint64_t(spec.bytes_per_token()) * uint64_t(block_size);
  return int64_t((bytes - state) / per_block);
}

CacheEngine::CacheEngine(const model::CacheSpec& spec, int64_t num_blocks, int block_size, int64_t num_state_slots)
    : spec_(spec), num_blocks_(num_blocks), block_size_(block_size), num_slots_(num_state_slots) {
  GANNET_CHECK(spec.kv_dtype == DType::F32, "only f32 KV caches exist so far");
  if (num_blocks < 1 || block_size < 1) fail("KV cache needs at least one block of at least one token");
  const int64_t row = spec.num_kv_heads * spec.head_dim;  // floats per token per layer
  const int64_t arena = num_blocks * block_size * row;     // floats per layer per K or V
  const uint64_t kv_bytes = uint64_t(2 * spec.num_layers * arena) * sizeof(float);
  const uint64_t state_bytes = uint64_t(num_state_slots) * uint64_t(spec.state_bytes_per_seq);
  bytes_ = kv_bytes + state_bytes;
  const size_t map_bytes = bytes_ ? bytes_ : 1;
  void* p = ::mmap(nullptr, map_bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (p == MAP_FAILED) fail("cannot reserve ", format_bytes(bytes_), " for the KV cache: ", std::strerror(errno));
  // Commit every page now, so a budget the machine cannot hold fails here with an error
  // instead of hours later when the last blocks are first written.
  if (::madvise(p, map_bytes, MADV_POPULATE_WRITE) != 0) {
    const int e = errno;
    if (e == EINVAL) {  // kernels before 5.14: touch each page instead
      const long page = ::sysconf(_SC_PAGESIZE);
      volatile uint8_t* b = static_cast<uint8_t*>(p);
      for (size_t off = 0; off < map_bytes; off += size_t(page)) b[off] = 0;
    } else {
      ::munmap(p, map_bytes);
      fail("cannot commit ", format_bytes(bytes_), " of memory for the KV cache: ", std::strerror(e));
    }
  }
  kv_ = static_cast<float*>(p);
  state_ = reinterpret_cast<uint8_t*>(p) + kv_bytes;
  for (int64_t l = 0; l < spec.num_layers; ++l) {
    kernels::KvCacheLayerMut v;
    v.k = kv_ + (2 * l) * arena;
    v.v = kv_ + (2 * l + 1) * arena;
    v.block_stride = block_size * row;
    v.slot_stride = row;
    v.block_size = block_size;
    views_.layers.push_back(v);
  }
}

CacheEngine::~CacheEngine() {
  if (kv_) ::munmap(kv_, bytes_ ? bytes_ : 1);
}

void CacheEngine::copy_blocks(const std::vector<BlockCopy>& copies) {
  for (const BlockCopy& c : copies) {
    GANNET_CHECK(c.src >= 0 && c.src < num_blocks_ && c.dst >= 0 && c.dst < num_blocks_);
    for (const auto& l : views_.layers) {
      const size_t n = size_t(l.block_stride) * sizeof(float);
      std::memcpy(l.k + c.dst * l.block_stride, l.k + c.src * l.block_stride, n);
      std::memcpy(l.v + c.dst * l.block_stride, l.v + c.src * l.block_stride, n);
    }
  }
}

void CacheEngine::copy_state(int32_t src, int32_t dst) {
  GANNET_CHECK(src >= 0 && src < num_slots_ && dst >= 0 && dst < num_slots_);
  const size_t n = size_t(spec_.state_bytes_per_seq);
  if (n) std::memcpy(state_ + size_t(dst) * n, state_ + size_t(src) * n, n);
}

}  // namespace gannet::cache
