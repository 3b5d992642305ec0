// Content hashes of full KV blocks, for the prefix cache (block_manager.h).
//
// A block's hash chains its parent's (the block before it in the sequence), the extra key
// of whatever else decides its contents besides the tokens (0 today; LoRA adapters or
// multimodal inputs would set it) and its token ids: equal hashes mean equal prefixes up
// to and including the block. XXH3-128 (libxxhash) makes an accidental collision
// practically impossible; a hit still compares the block's tokens and parent hash, so a
// collision could only ever merge two blocks with the same tokens after different
// parents whose hashes collided as well.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>

namespace gannet::cache {

struct BlockHash {
  uint64_t lo = 0, hi = 0;
  bool operator==(const BlockHash& o) const { return lo == o.lo && hi == o.hi; }
  bool operator!=(const BlockHash& o) const { return !(*this == o); }
};

struct BlockHashHasher {
  size_t operator()(const BlockHash& h) const { return size_t(h.lo ^ (h.hi * 0x9e3779b97f4a7c15ull)); }
};

// The parent of a sequence's first block.
inline constexpr BlockHash kRootBlockHash{0x676e6e6574707278ull, 0x6669782d63616368ull};

// hash(parent, extra, tokens[0 .. n)): the tokens as little-endian int32.
BlockHash hash_block(const BlockHash& parent, uint64_t extra, const int32_t* tokens, int64_t n);

}  // namespace gannet::cache
