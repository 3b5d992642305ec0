// A bounded, thread-safe map from a pre-tokenized piece to its BPE ids. Real text repeats
// its words, so most pieces skip the merge loop. Sharded so that threads encoding at once
// rarely wait on the same lock; a full shard is simply cleared (no LRU bookkeeping).
#pragma once

#include <array>
#include <functional>
#include <mutex>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "tokenizer/token_id.h"

namespace gannet::tokenizer {

class PieceCache {
 public:
  static constexpr size_t kShards = 16;
  static constexpr size_t kMaxEntriesPerShard = 4096;
  static constexpr size_t kMaxPieceBytes = 256;  // longer pieces are rare and not cached

  // Appends the cached ids of `piece` to `out`; false if it is not cached.
  bool lookup(std::string_view piece, std::vector<TokenId>& out) const {
    if (piece.size() > kMaxPieceBytes) return false;
    Shard& s = shard(piece);
    std::lock_guard lock(s.mutex);
    auto it = s.map.find(piece);
    if (it == s.map.end()) return false;
    out.insert(out.end(), it->second.begin(), it->second.end());
    return true;
  }

  void insert(std::string_view piece, const TokenId* ids, size_t n) const {
    if (piece.size() > kMaxPieceBytes) return;
    Shard& s = shard(piece);
    std::lock_guard lock(s.mutex);
    if (s.map.size() >= kMaxEntriesPerShard) s.map.clear();
    s.map.try_emplace(std::string(piece), ids, ids + n);
  }

 private:
  struct Hash {
    using is_transparent = void;
    size_t operator()(std::string_view s) const { return std::hash<std::string_view>()(s); }
  };
  struct Shard {
    std::mutex mutex;
    std::unordered_map<std::string, std::vector<TokenId>, Hash, std::equal_to<>> map;
  };

  Shard& shard(std::string_view piece) const {
    // The low bits pick the bucket inside a shard, so the shard uses high ones.
    return shards_[(Hash()(piece) >> 48) % kShards];
  }

  mutable std::array<Shard, kShards> shards_;
};

}  // namespace gannet::tokenizer
