// The cache contract between models and the cache layer (DESIGN §4: cache and model are
// peers, so it lives below both). A model declares what it keeps per token and per
// sequence; the cache engine turns that into memory and hands back views.
//
// Paged groups: entries of bytes_per_entry bytes, one per tokens_per_entry consecutive
// positions (1 for K/V rows; 2 for DeepSeek-V4.1's ratio-2 compressed entries), in one
// arena per layer that owns them. A block of block_size positions holds
// block_size / tokens_per_entry entries of every group and layer, at the block's id in
// the sequence's block table, so blocks are shared, copied and freed as a unit.
// State: state_bytes_per_seq bytes per sequence in its state slot (V4.1: window rings,
// open compressor groups, Engram history), reset by the model when a sequence starts
// at position 0, copied on fork.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace gannet::kernels {

enum class CacheFormat : uint8_t { kF32, kBF16, kMixed };
const char* cache_format_name(CacheFormat f);

struct CacheGroup {
  std::string name;             // "k", "v", "compressed-kv (ratio 2)", ...
  int64_t layers = 0;           // arenas: one per layer that owns such entries
  int64_t bytes_per_entry = 0;  // entries holding floats keep them 4-byte aligned
  int64_t tokens_per_entry = 1;
  CacheFormat format = CacheFormat::kF32;
};

struct CacheSpec {
  std::vector<CacheGroup> groups;
  int64_t state_bytes_per_seq = 0;  // a multiple of 8

  // Bytes of one block over every group and layer; block_size and each group's
  // tokens_per_entry must divide one another (check_block_size).
  uint64_t bytes_per_block(int block_size) const;
  // Paged bytes per position, averaged over a group's entry (V4.1 ratio 2: half an entry).
  double bytes_per_token() const;
  // Throws gannet::Error naming --block-size when a group cannot tile it.
  void check_block_size(int block_size) const;
};

// Entries of group g one block holds: block_size / tokens_per_entry, or 1 for entries
// longer than a block.
int64_t entries_per_block(const CacheGroup& g, int block_size);

// One layer's arena of one group.
struct CacheArena {
  uint8_t* base = nullptr;
  int64_t block_stride = 0;  // bytes per block
  int64_t entry_stride = 0;  // bytes per entry
  int64_t tokens_per_entry = 1;
  int block_size = 0;

  // Entry e of the sequence with this block table (positions e * tokens_per_entry ..). An
  // entry longer than a block (tokens_per_entry a multiple of block_size) lives in the
  // block of its last position, alone.
  uint8_t* entry(const int32_t* block_table, int64_t e) const {
    const int64_t last = e * tokens_per_entry + tokens_per_entry - 1;
    const int64_t slot = tokens_per_entry <= block_size ? (last % block_size) / tokens_per_entry : 0;
    return base + int64_t(block_table[last / block_size]) * block_stride + slot * entry_stride;
  }
};

struct CacheViews {
  std::vector<std::vector<CacheArena>> groups;  // [group][layer], in CacheSpec order
  uint8_t* state = nullptr;                     // [num_state_slots, state_stride]
  int64_t state_stride = 0;
  int64_t num_state_slots = 0;

  uint8_t* state_slot(int32_t slot) const { return state + int64_t(slot) * state_stride; }
};

}  // namespace gannet::kernels
