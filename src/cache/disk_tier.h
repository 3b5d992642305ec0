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
//
// Reads for the scheduler happen off the engine thread: read_ahead() queues blocks for a
// reader thread, which checks each file as load() does and keeps its bytes in memory of
// its own until the scheduler takes them (take_read) into a block of the step it plans;
// the executor writes them into the arena before that step's forward pass.
#pragma once

#include <chrono>
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

  // Reads ahead, off the caller's thread: the block for `hash` (checked against `parent`
  // and `tokens`, as load() checks) is read into memory of the tier's own. Nothing when
  // it is already queued, read or failed, or when kMaxReadBytes of read blocks wait to be
  // taken. read_state() then says where it is; take_read() moves a read block's bytes out
  // (and forgets it), forget_read() drops a failed or unwanted one.
  enum class ReadState { kNone, kPending, kReady, kFailed };
  void read_ahead(const BlockHash& hash, const BlockHash& parent, const int32_t* tokens);
  ReadState read_state(const BlockHash& hash);
  bool take_read(const BlockHash& hash, std::vector<uint8_t>& data);
  void forget_read(const BlockHash& hash);
  // Reads queued or in progress; wait_reads() waits (at most `timeout`) until one of them
  // is done, returning at once when none is pending.
  int64_t reads_pending();
  void wait_reads(std::chrono::milliseconds timeout);

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
  // The checked bytes of the block for `hash` (block_bytes_ of them, in `read_buf` or
  // `unpack_buf`), or null: absent (counted as a miss), different or corrupt (deleted).
  const uint8_t* read_file(const BlockHash& hash, const BlockHash& parent, const int32_t* tokens,
                           std::vector<uint8_t>& read_buf, std::vector<uint8_t>& unpack_buf);
  void writer();
  void reader();
  struct Read {
    ReadState state = ReadState::kPending;
    BlockHash parent;
    std::vector<int32_t> tokens;
    std::vector<uint8_t> data;
  };
  std::unordered_map<BlockHash, Read, BlockHashHasher> reads_;  // guarded by mu_
  std::deque<BlockHash> read_queue_;
  std::deque<BlockHash> ready_order_;  // reads completed, oldest first (some taken since)
  int64_t reads_pending_ = 0;  // queued or being read
  uint64_t read_bytes_ = 0;    // bytes of read blocks not yet taken
  std::condition_variable read_cv_, read_done_cv_;
  std::vector<uint8_t> ahead_buf_, ahead_unpack_;  // the reader thread's
  std::thread reader_;
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
