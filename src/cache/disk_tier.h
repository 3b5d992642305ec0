// The prefix cache's disk tier: cached KV blocks evicted from memory are written to a
// directory (asynchronously, zstd-compressed when that saves at least an eighth), found
// again by content hash and read back into a free block on a later hit. The directory
// survives restarts of the same model.
//
// One file per block, named by a hash of the model identity and the block hash (so two
// models sharing a directory never meet). A file holds a header, then the block's bytes
// for every group and layer in CacheSpec order:
//   magic "GNTKVBL1", format version, header size, model identity (128-bit), block size,
//   block bytes, compression (0 none, 1 zstd), payload bytes, block hash, parent hash,
//   the block's token ids, XXH3-64 of the uncompressed block, XXH3-64 of the header.
// A file whose identity or version differs is skipped with one warning at start-up; a
// corrupt or truncated one (either checksum, or its size) is deleted when read, never
// used. Files over the size budget go least recently used first (access order is kept
// in memory; at start-up it is the files' modification order).
#pragma once

#include <condition_variable>
#include <cstdint>
#include <deque>
#include <list>
#include <mutex>
#include <string>
#include <string_view>
#include <thread>
#include <unordered_map>
#include <vector>

#include "cache/block_hash.h"
#include "cache/cache_engine.h"

namespace gannet::cache {

struct DiskTierStats {
  int64_t writes = 0;            // blocks written
  int64_t write_bytes = 0;       // file bytes written
  int64_t writes_dropped = 0;    // evictions not written (queue full, or I/O error)
  int64_t hits = 0;              // blocks read back
  int64_t misses = 0;            // lookups of a block not on disk
  int64_t corrupt = 0;           // files found corrupt or truncated, deleted
  int64_t removed = 0;           // files removed to stay within the budget
  int64_t foreign = 0;           // files of another model or format, ignored
  int64_t files = 0;             // files of this model now
  int64_t bytes = 0;             //   and their bytes
};

class DiskTier {
 public:
  // `identity`: what decides the K/V contents besides the tokens (architecture, config,
  // weights, cache format, numerics flags), hashed into the file names and headers.
  // Scans the directory (created if missing). Throws gannet::Error naming --prefix-cache-dir
  // when it cannot be created or written.
  DiskTier(const std::string& dir, uint64_t max_bytes, const BlockHash& identity, CacheEngine& cache);
  ~DiskTier();  // finishes the writes queued
  DiskTier(const DiskTier&) = delete;
  DiskTier& operator=(const DiskTier&) = delete;

  // Queues block `block` for writing (its bytes are copied now: the block may be reused
  // as soon as this returns). When the queue holds too much already it drops the block,
  // or with `wait` (saving the cache at shutdown) waits for room.
  void store(int32_t block, const BlockHash& hash, const BlockHash& parent, const int32_t* tokens,
             bool wait = false);
  // An eviction not written (its contents were not complete yet).
  void count_dropped() {
    std::lock_guard<std::mutex> lk(mu_);
    ++stats_.writes_dropped;
  }
  // Whether a file for `hash` is known (written or being written).
  bool contains(const BlockHash& hash);
  // Reads the block for `hash` into block `dst`, checking that its parent and tokens are
  // these. False when absent, different, corrupt (deleted) or unreadable.
  bool load(const BlockHash& hash, const BlockHash& parent, const int32_t* tokens, int32_t dst);
  // Waits until every queued write is on disk (tests; the destructor does it too).
  void flush();

  DiskTierStats stats();
  const std::string& dir() const { return dir_; }

 private:
  struct Job {
    BlockHash hash, parent;
    std::vector<int32_t> tokens;
    std::vector<uint8_t> data;
  };
  struct Entry {
    uint64_t bytes = 0;
    std::list<BlockHash>::iterator lru;
  };
  std::string path_of(const BlockHash& hash) const;
  void writer();
  void write_file(const Job& job);
  void touch(const BlockHash& hash);             // most recently used (lock held)
  void forget(BlockHash hash, bool delete_file);  // lock held; by value: callers pass lru_ entries
  void enforce_budget();                         // lock held
  void scan();

  std::string dir_;
  uint64_t max_bytes_;
  BlockHash identity_;
  CacheEngine& cache_;
  int block_size_;
  uint64_t block_bytes_;
  std::mutex mu_;
  std::condition_variable cv_, idle_cv_;
  std::deque<Job> queue_;
  uint64_t queued_bytes_ = 0;
  bool busy_ = false, stop_ = false;
  std::unordered_map<BlockHash, Entry, BlockHashHasher> files_;
  std::list<BlockHash> lru_;  // front: least recently used
  DiskTierStats stats_;
  std::vector<uint8_t> read_buf_, unpack_buf_;
  std::thread thread_;
};

// XXH3-128 of a text (the model identity's parts).
BlockHash hash_text(std::string_view text, const BlockHash& seed = kRootBlockHash);

}  // namespace gannet::cache
