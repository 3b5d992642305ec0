#include "cache/disk_tier.h"

#define XXH_STATIC_LINKING_ONLY
#include <xxhash.h>
#include <zstd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>

#include "core/error.h"

namespace fs = std::filesystem;

namespace gannet::cache {

namespace {

constexpr char kMagic[8] = {'G', 'N', 'T', 'K', 'V', 'B', 'L', '1'};
constexpr uint32_t kVersion = 1;
constexpr uint64_t kMaxQueuedBytes = uint64_t(256) << 20;  // evictions waiting to be written
constexpr uint64_t kMaxReadBytes = uint64_t(256) << 20;    // blocks read ahead, not yet taken

// The fixed part of the header; the block's token ids and the header checksum follow.
struct Header {
  char magic[8];
  uint32_t version;
  uint32_t header_bytes;  // sizeof(Header) + 4 * block_size + 8
  uint64_t identity_lo, identity_hi;
  uint32_t block_size;
  uint32_t compression;  // 0: none, 1: zstd
  uint64_t block_bytes;
  uint64_t payload_bytes;
  uint64_t hash_lo, hash_hi, parent_lo, parent_hi;
  uint64_t data_checksum;  // XXH3-64 of the uncompressed block
};
static_assert(sizeof(Header) == 96);

std::string hex(const BlockHash& h) {
  char buf[33];
  std::snprintf(buf, sizeof buf, "%016llx%016llx", (unsigned long long)h.hi, (unsigned long long)h.lo);
  return buf;
}

}  // namespace

BlockHash hash_text(std::string_view text, const BlockHash& seed) {
  XXH3_state_t st;
  XXH3_INITSTATE(&st);
  XXH3_128bits_reset(&st);
  const uint64_t head[2] = {seed.lo, seed.hi};
  XXH3_128bits_update(&st, head, sizeof head);
  XXH3_128bits_update(&st, text.data(), text.size());
  const XXH128_hash_t h = XXH3_128bits_digest(&st);
  return BlockHash{h.low64, h.high64};
}

DiskTier::DiskTier(const std::string& dir, uint64_t max_bytes, const BlockHash& identity, CacheEngine& cache)
    : dir_(dir), max_bytes_(max_bytes), identity_(identity), cache_(cache), block_size_(cache.block_size()),
      block_bytes_(cache.block_bytes()) {
  std::error_code ec;
  fs::create_directories(dir_, ec);
  if (ec || !fs::is_directory(dir_))
    fail("--prefix-cache-dir ", dir_, ": cannot create the directory", ec ? ": " + ec.message() : std::string());
  const fs::path probe = fs::path(dir_) / ".gannet-write-test";
  {
    std::ofstream f(probe);
    if (!(f << "x")) fail("--prefix-cache-dir ", dir_, ": cannot write there");
  }
  fs::remove(probe, ec);
  scan();
  thread_ = std::thread([this] { writer(); });
  reader_ = std::thread([this] { reader(); });
}

DiskTier::~DiskTier() {
  {
    std::lock_guard<std::mutex> lk(mu_);
    stop_ = true;
  }
  cv_.notify_all();
  read_cv_.notify_all();
  reader_.join();
  thread_.join();
}

std::string DiskTier::path_of(const BlockHash& hash) const {
  // Named by (identity, hash): two models' blocks with the same tokens never share a file.
  const std::string name = hex(hash_text(std::string(reinterpret_cast<const char*>(&hash), sizeof hash), identity_));
  return (fs::path(dir_) / name.substr(0, 2) / (name + ".kvb")).string();
}

void DiskTier::scan() {
  // Read every file's header: ours are indexed (by modification time, oldest first, as
  // the LRU order), others counted and left alone.
  struct Found {
    fs::file_time_type mtime;
    BlockHash hash;
    uint64_t bytes;
  };
  std::vector<Found> found;
  std::error_code ec;
  for (auto it = fs::recursive_directory_iterator(dir_, ec); !ec && it != fs::recursive_directory_iterator();
       it.increment(ec)) {
    if (!it->is_regular_file() || it->path().extension() != ".kvb") continue;
    Header h{};
    std::ifstream f(it->path(), std::ios::binary);
    if (!f.read(reinterpret_cast<char*>(&h), sizeof h) || std::memcmp(h.magic, kMagic, 8) != 0) {
      ++stats_.foreign;
      continue;
    }
    if (h.version != kVersion || h.identity_lo != identity_.lo || h.identity_hi != identity_.hi ||
        h.block_size != uint32_t(block_size_) || h.block_bytes != block_bytes_) {
      ++stats_.foreign;
      continue;
    }
    const BlockHash hash{h.hash_lo, h.hash_hi};
    if (path_of(hash) != it->path().string()) {  // renamed or copied in: not trusted
      ++stats_.foreign;
      continue;
    }
    found.push_back({it->last_write_time(ec), hash, uint64_t(it->file_size(ec))});
  }
  std::sort(found.begin(), found.end(), [](const Found& a, const Found& b) { return a.mtime < b.mtime; });
  for (const Found& f : found) {
    lru_.push_back(f.hash);
    files_[f.hash] = Entry{f.bytes, std::prev(lru_.end())};
    ++stats_.files;
    stats_.bytes += int64_t(f.bytes);
  }
  if (stats_.foreign)
    std::fprintf(stderr,
                 "gannet: warning: --prefix-cache-dir %s: %lld files written by another model, engine "
                 "configuration or format version are ignored\n",
                 dir_.c_str(), (long long)stats_.foreign);
  enforce_budget();
}

void DiskTier::touch(const BlockHash& hash) {
  auto it = files_.find(hash);
  if (it == files_.end()) return;
  lru_.splice(lru_.end(), lru_, it->second.lru);
}

void DiskTier::forget(const BlockHash hash, bool delete_file) {  // a copy: it may name lru_.front()
  auto it = files_.find(hash);
  if (it == files_.end()) return;
  stats_.bytes -= int64_t(it->second.bytes);
  --stats_.files;
  lru_.erase(it->second.lru);
  files_.erase(it);
  if (delete_file) {
    std::error_code ec;
    fs::remove(path_of(hash), ec);
  }
}

void DiskTier::enforce_budget() {
  while (uint64_t(stats_.bytes) > max_bytes_ && !lru_.empty()) {
    forget(lru_.front(), true);
    ++stats_.removed;
  }
}

void DiskTier::store(int32_t block, const BlockHash& hash, const BlockHash& parent, const int32_t* tokens,
                     bool wait) {
  std::unique_lock<std::mutex> lk(mu_);
  if (files_.count(hash)) {  // already on disk: it is recently used again
    touch(hash);
    return;
  }
  const uint64_t max_queued = std::max<uint64_t>(kMaxQueuedBytes, 4 * block_bytes_);  // room for a few blocks
  if (queued_bytes_ + block_bytes_ > max_queued) {
    if (!wait) {
      ++stats_.writes_dropped;
      return;
    }
    idle_cv_.wait(lk, [&] { return queued_bytes_ + block_bytes_ <= max_queued; });  // woken after each write
  }
  Job job;
  job.hash = hash;
  job.parent = parent;
  job.tokens.assign(tokens, tokens + block_size_);
  job.data.resize(block_bytes_);
  lk.unlock();
  cache_.read_block(block, job.data.data());  // the block is reused once this returns
  lk.lock();
  queued_bytes_ += block_bytes_;
  // Known at once, so a lookup right after the eviction finds it (load waits for it).
  lru_.push_back(hash);
  files_[hash] = Entry{0, std::prev(lru_.end())};
  ++stats_.files;
  queue_.push_back(std::move(job));
  cv_.notify_one();
}

void DiskTier::writer() {
  std::unique_lock<std::mutex> lk(mu_);
  for (;;) {
    cv_.wait(lk, [&] { return stop_ || !queue_.empty(); });
    if (queue_.empty()) break;  // stop_, and nothing left
    Job job = std::move(queue_.front());
    queue_.pop_front();
    busy_ = true;
    lk.unlock();
    write_file(job);
    lk.lock();
    queued_bytes_ -= block_bytes_;
    busy_ = false;
    idle_cv_.notify_all();  // flush() and a load() waiting for this file
  }
  idle_cv_.notify_all();
}

void DiskTier::write_file(const Job& job) {
  Header h{};
  std::memcpy(h.magic, kMagic, 8);
  h.version = kVersion;
  h.header_bytes = uint32_t(sizeof(Header) + 4 * size_t(block_size_) + 8);
  h.identity_lo = identity_.lo;
  h.identity_hi = identity_.hi;
  h.block_size = uint32_t(block_size_);
  h.block_bytes = block_bytes_;
  h.hash_lo = job.hash.lo;
  h.hash_hi = job.hash.hi;
  h.parent_lo = job.parent.lo;
  h.parent_hi = job.parent.hi;
  h.data_checksum = XXH3_64bits(job.data.data(), job.data.size());
  // Compressed when that saves at least an eighth (K/V of random-looking floats rarely do).
  std::vector<uint8_t> packed(ZSTD_compressBound(job.data.size()));
  const size_t z = ZSTD_compress(packed.data(), packed.size(), job.data.data(), job.data.size(), 1);
  const bool use_z = !ZSTD_isError(z) && z <= job.data.size() - job.data.size() / 8;
  h.compression = use_z ? 1 : 0;
  h.payload_bytes = use_z ? z : job.data.size();
  std::vector<uint8_t> head(h.header_bytes);
  std::memcpy(head.data(), &h, sizeof h);
  std::memcpy(head.data() + sizeof h, job.tokens.data(), 4 * size_t(block_size_));
  const uint64_t hc = XXH3_64bits(head.data(), head.size() - 8);
  std::memcpy(head.data() + head.size() - 8, &hc, 8);
  const std::string path = path_of(job.hash);
  const std::string tmp = path + ".tmp";
  std::error_code ec;
  fs::create_directories(fs::path(path).parent_path(), ec);
  bool ok = false;
  {
    std::ofstream f(tmp, std::ios::binary | std::ios::trunc);
    ok = bool(f.write(reinterpret_cast<const char*>(head.data()), std::streamsize(head.size()))) &&
         bool(f.write(reinterpret_cast<const char*>(use_z ? packed.data() : job.data.data()),
                      std::streamsize(h.payload_bytes)));
    f.close();
    ok = ok && !f.fail();
  }
  if (ok) {
    fs::rename(tmp, path, ec);  // a reader sees the whole file or none
    ok = !ec;
  }
  std::lock_guard<std::mutex> lk(mu_);
  auto it = files_.find(job.hash);
  if (!ok) {
    fs::remove(tmp, ec);
    ++stats_.writes_dropped;
    if (it != files_.end()) forget(job.hash, false);
    return;
  }
  if (it == files_.end()) {  // forgotten meanwhile (budget): the file goes too
    fs::remove(path, ec);
    return;
  }
  const uint64_t bytes = head.size() + h.payload_bytes;
  it->second.bytes = bytes;
  stats_.bytes += int64_t(bytes);
  ++stats_.writes;
  stats_.write_bytes += int64_t(bytes);
  enforce_budget();
}

bool DiskTier::contains(const BlockHash& hash) {
  std::lock_guard<std::mutex> lk(mu_);
  return files_.count(hash) > 0;
}

void DiskTier::flush() {
  std::unique_lock<std::mutex> lk(mu_);
  idle_cv_.wait(lk, [&] { return queue_.empty() && !busy_; });
}

const uint8_t* DiskTier::read_file(const BlockHash& hash, const BlockHash& parent, const int32_t* tokens,
                                   std::vector<uint8_t>& read_buf, std::vector<uint8_t>& unpack_buf) {
  {
    std::unique_lock<std::mutex> lk(mu_);
    auto it = files_.find(hash);
    if (it == files_.end()) {
      ++stats_.misses;
      return nullptr;
    }
    // Written a moment ago and still queued: wait for the writer (rare; short).
    idle_cv_.wait(lk, [&] { return files_.count(hash) == 0 || files_.at(hash).bytes > 0 || (queue_.empty() && !busy_); });
    if (!files_.count(hash) || files_.at(hash).bytes == 0) {
      ++stats_.misses;
      return nullptr;
    }
  }
  const std::string path = path_of(hash);
  auto drop_corrupt = [&]() -> const uint8_t* {
    std::lock_guard<std::mutex> lk(mu_);
    forget(hash, true);
    ++stats_.corrupt;
    return nullptr;
  };
  std::ifstream f(path, std::ios::binary | std::ios::ate);
  if (!f) {
    std::lock_guard<std::mutex> lk(mu_);
    forget(hash, false);  // gone from under us
    ++stats_.misses;
    return nullptr;
  }
  const uint64_t size = uint64_t(f.tellg());
  const size_t head_bytes = sizeof(Header) + 4 * size_t(block_size_) + 8;
  if (size < head_bytes) return drop_corrupt();
  read_buf.resize(size);
  f.seekg(0);
  if (!f.read(reinterpret_cast<char*>(read_buf.data()), std::streamsize(size))) return drop_corrupt();
  Header h;
  std::memcpy(&h, read_buf.data(), sizeof h);
  uint64_t hc;
  std::memcpy(&hc, read_buf.data() + head_bytes - 8, 8);
  if (std::memcmp(h.magic, kMagic, 8) != 0 || h.header_bytes != head_bytes ||
      XXH3_64bits(read_buf.data(), head_bytes - 8) != hc)
    return drop_corrupt();
  if (h.version != kVersion || h.identity_lo != identity_.lo || h.identity_hi != identity_.hi ||
      h.block_size != uint32_t(block_size_) || h.block_bytes != block_bytes_ || h.hash_lo != hash.lo ||
      h.hash_hi != hash.hi || size != head_bytes + h.payload_bytes || h.compression > 1)
    return drop_corrupt();
  // The hash matched; the contents must too (as for a block in memory).
  if (h.parent_lo != parent.lo || h.parent_hi != parent.hi ||
      std::memcmp(read_buf.data() + sizeof h, tokens, 4 * size_t(block_size_)) != 0) {
    std::lock_guard<std::mutex> lk(mu_);
    ++stats_.misses;
    return nullptr;
  }
  const uint8_t* payload = read_buf.data() + head_bytes;
  const uint8_t* data = payload;
  if (h.compression == 1) {
    unpack_buf.resize(block_bytes_);
    const size_t n = ZSTD_decompress(unpack_buf.data(), unpack_buf.size(), payload, h.payload_bytes);
    if (ZSTD_isError(n) || n != block_bytes_) return drop_corrupt();
    data = unpack_buf.data();
  } else if (h.payload_bytes != block_bytes_) {
    return drop_corrupt();
  }
  if (XXH3_64bits(data, block_bytes_) != h.data_checksum) return drop_corrupt();
  std::lock_guard<std::mutex> lk(mu_);
  ++stats_.hits;
  touch(hash);
  return data;
}


bool DiskTier::load(const BlockHash& hash, const BlockHash& parent, const int32_t* tokens, int32_t dst) {
  const uint8_t* data = read_file(hash, parent, tokens, read_buf_, unpack_buf_);
  if (!data) return false;
  cache_.write_block(dst, data);
  return true;
}

void DiskTier::read_ahead(const BlockHash& hash, const BlockHash& parent, const int32_t* tokens) {
  std::lock_guard<std::mutex> lk(mu_);
  if (reads_.count(hash)) return;
  // Blocks read but never taken (their requests computed them after all) make room, oldest
  // first.
  while (read_bytes_ + uint64_t(reads_pending_ + 1) * block_bytes_ > kMaxReadBytes && !ready_order_.empty()) {
    auto it = reads_.find(ready_order_.front());
    ready_order_.pop_front();
    if (it != reads_.end() && it->second.state == ReadState::kReady) {
      read_bytes_ -= block_bytes_;
      reads_.erase(it);
    }
  }
  if (read_bytes_ + uint64_t(reads_pending_ + 1) * block_bytes_ > kMaxReadBytes) return;
  Read& r = reads_[hash];
  r.parent = parent;
  r.tokens.assign(tokens, tokens + block_size_);
  read_queue_.push_back(hash);
  ++reads_pending_;
  read_cv_.notify_one();
}

DiskTier::ReadState DiskTier::read_state(const BlockHash& hash) {
  std::lock_guard<std::mutex> lk(mu_);
  auto it = reads_.find(hash);
  return it == reads_.end() ? ReadState::kNone : it->second.state;
}

bool DiskTier::take_read(const BlockHash& hash, std::vector<uint8_t>& data) {
  std::lock_guard<std::mutex> lk(mu_);
  auto it = reads_.find(hash);
  if (it == reads_.end() || it->second.state != ReadState::kReady) return false;
  data = std::move(it->second.data);
  read_bytes_ -= block_bytes_;
  reads_.erase(it);
  return true;
}

void DiskTier::forget_read(const BlockHash& hash) {
  std::lock_guard<std::mutex> lk(mu_);
  auto it = reads_.find(hash);
  if (it == reads_.end() || it->second.state == ReadState::kPending) return;
  if (it->second.state == ReadState::kReady) read_bytes_ -= block_bytes_;
  reads_.erase(it);
}

int64_t DiskTier::reads_pending() {
  std::lock_guard<std::mutex> lk(mu_);
  return reads_pending_;
}

void DiskTier::wait_reads(std::chrono::milliseconds timeout) {
  std::unique_lock<std::mutex> lk(mu_);
  if (reads_pending_ == 0) return;
  const int64_t before = reads_pending_;
  read_done_cv_.wait_for(lk, timeout, [&] { return reads_pending_ < before; });
}

void DiskTier::reader() {
  std::unique_lock<std::mutex> lk(mu_);
  for (;;) {
    read_cv_.wait(lk, [&] { return stop_ || !read_queue_.empty(); });
    if (stop_) break;
    const BlockHash hash = read_queue_.front();
    read_queue_.pop_front();
    const BlockHash parent = reads_.at(hash).parent;
    const std::vector<int32_t> tokens = std::move(reads_.at(hash).tokens);
    lk.unlock();
    const uint8_t* data = read_file(hash, parent, tokens.data(), ahead_buf_, ahead_unpack_);
    std::vector<uint8_t> copy;
    if (data) copy.assign(data, data + block_bytes_);
    lk.lock();
    Read& r = reads_.at(hash);
    r.state = data ? ReadState::kReady : ReadState::kFailed;
    if (data) {
      r.data = std::move(copy);
      read_bytes_ += block_bytes_;
      ready_order_.push_back(hash);
      if (ready_order_.size() > 4096 + 2 * reads_.size()) {  // mostly taken since: compact
        std::deque<BlockHash> keep;
        for (const BlockHash& k : ready_order_) {
          auto e = reads_.find(k);
          if (e != reads_.end() && e->second.state == ReadState::kReady) keep.push_back(k);
        }
        ready_order_.swap(keep);
      }
    }
    --reads_pending_;
    read_done_cv_.notify_all();
  }
}

DiskTierStats DiskTier::stats() {
  std::lock_guard<std::mutex> lk(mu_);
  return stats_;
}

}  // namespace gannet::cache
