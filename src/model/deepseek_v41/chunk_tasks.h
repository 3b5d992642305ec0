// When DeepSeek-V4 and V4.1 attend a step's chunks one per task instead of splitting each
// chunk's rows over the pool.
#pragma once

#include <algorithm>
#include <cstdint>
#include <vector>

#include "core/thread_pool.h"

namespace gannet::model::deepseek_v41 {

// Chunks of at most this many rows (decode, speculative verify) run one per task when a
// step has several.
inline constexpr int64_t kSmallChunkRows = 16;

// True when the pool has threads, there are several chunks, each of at most
// kSmallChunkRows rows, and of distinct sequences (a later chunk of one sequence would read
// the window ring and entries an earlier one writes). Chunk: a model's chunk type, with the
// row count n and the sequence's memory m.
template <typename Chunk>
bool one_task_per_chunk(const std::vector<Chunk>& chunks, const ThreadPool* pool) {
  if (!pool || pool->size() < 2 || chunks.size() < 2) return false;
  std::vector<const void*> seqs;
  for (const Chunk& ch : chunks) {
    if (ch.n > kSmallChunkRows) return false;
    seqs.push_back(ch.m);
  }
  std::sort(seqs.begin(), seqs.end());
  return std::adjacent_find(seqs.begin(), seqs.end()) == seqs.end();
}

}  // namespace gannet::model::deepseek_v41
