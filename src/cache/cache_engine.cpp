#include "cache/cache_engine.h"

#include <sys/mman.h>

#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "core/error.h"
#include "core/progress_bar.h"

namespace gannet::cache {

int64_t CacheEngine::blocks_for_budget(const kernels::CacheSpec& spec, uint64_t bytes, int block_size,
                                       int64_t num_state_slots) {
  const uint64_t state = uint64_t(num_state_slots) * uint64_t(spec.state_bytes_per_seq);
  if (bytes <= state) return 0;
  const uint64_t per_block = spec.bytes_per_block(block_size);
  if (per_block == 0) return int64_t(1) << 20;  // nothing paged: blocks cost nothing
  return int64_t((bytes - state) / per_block);
}

CacheEngine::CacheEngine(const kernels::CacheSpec& spec, int64_t num_blocks, int block_size, int64_t num_state_slots)
    : spec_(spec), num_blocks_(num_blocks), block_size_(block_size), num_slots_(num_state_slots) {
  if (num_blocks < 1 || block_size < 1) fail("KV cache needs at least one block of at least one token");
  spec.check_block_size(block_size);
  for (const kernels::CacheGroup& g : spec.groups)
    GANNET_CHECK(g.bytes_per_entry > 0 && g.layers >= 0, "cache group '", g.name, "'");
  GANNET_CHECK(spec.state_bytes_per_seq % 8 == 0, "state bytes ", spec.state_bytes_per_seq);
  const uint64_t paged = uint64_t(num_blocks) * spec.bytes_per_block(block_size);
  const uint64_t state_bytes = uint64_t(num_state_slots) * uint64_t(spec.state_bytes_per_seq);
  bytes_ = paged + state_bytes;
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
  mem_ = static_cast<uint8_t*>(p);
  uint8_t* at = mem_;
  for (const kernels::CacheGroup& g : spec.groups) {
    std::vector<kernels::CacheArena>& layers = views_.groups.emplace_back();
    const int64_t block_bytes = kernels::entries_per_block(g, block_size) * g.bytes_per_entry;
    for (int64_t l = 0; l < g.layers; ++l) {
      kernels::CacheArena a;
      a.base = at;
      a.block_stride = block_bytes;
      a.entry_stride = g.bytes_per_entry;
      a.tokens_per_entry = g.tokens_per_entry;
      a.block_size = block_size;
      layers.push_back(a);
      at += num_blocks * block_bytes;
    }
  }
  state_ = mem_ + paged;
  views_.state = state_;
  views_.state_stride = spec.state_bytes_per_seq;
  views_.num_state_slots = num_state_slots;
}

CacheEngine::~CacheEngine() {
  if (mem_) ::munmap(mem_, bytes_ ? bytes_ : 1);
}

void CacheEngine::copy_blocks(const std::vector<BlockCopy>& copies) {
  for (const BlockCopy& c : copies) {
    GANNET_CHECK(c.src >= 0 && c.src < num_blocks_ && c.dst >= 0 && c.dst < num_blocks_);
    for (const auto& g : views_.groups)
      for (const kernels::CacheArena& a : g)
        std::memcpy(a.base + c.dst * a.block_stride, a.base + c.src * a.block_stride, size_t(a.block_stride));
  }
}

void CacheEngine::read_block(int32_t block, uint8_t* out) const {
  GANNET_CHECK(block >= 0 && block < num_blocks_);
  for (const auto& g : views_.groups)
    for (const kernels::CacheArena& a : g) {
      std::memcpy(out, a.base + block * a.block_stride, size_t(a.block_stride));
      out += a.block_stride;
    }
}

void CacheEngine::write_block(int32_t block, const uint8_t* in) {
  GANNET_CHECK(block >= 0 && block < num_blocks_);
  for (const auto& g : views_.groups)
    for (const kernels::CacheArena& a : g) {
      std::memcpy(a.base + block * a.block_stride, in, size_t(a.block_stride));
      in += a.block_stride;
    }
}

void CacheEngine::copy_state(int32_t src, int32_t dst) {
  GANNET_CHECK(src >= 0 && src < num_slots_ && dst >= 0 && dst < num_slots_);
  const size_t n = size_t(spec_.state_bytes_per_seq);
  if (n) std::memcpy(state_ + size_t(dst) * n, state_ + size_t(src) * n, n);
}

}  // namespace gannet::cache
