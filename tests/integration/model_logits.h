// Logits of a model at every prompt position, computed by the model directly (no engine)
// in chunks of `chunk` tokens over a paged cache: golden and config tests compare them.
#pragma once

#include <cstdint>
#include <vector>

#include "cache/cache_engine.h"
#include "core/thread_pool.h"
#include "model/model.h"

namespace gannet::test_support {

// [n, vocab] for prompt of n tokens.
inline std::vector<float> prompt_logits(model::Model& m, const std::vector<int32_t>& prompt, int64_t chunk,
                                        ThreadPool* pool) {
  const int64_t n = int64_t(prompt.size()), v = m.config().vocab_size;
  const int block = 16;
  cache::CacheEngine cache(m.cache_spec(), (n + block - 1) / block, block);
  std::vector<int32_t> table(size_t((n + block - 1) / block));
  for (size_t b = 0; b < table.size(); ++b) table[b] = int32_t(b);
  kernels::AttentionSeq seq{table.data(), 0};
  m.reserve(chunk, chunk);
  std::vector<float> out(size_t(n * v));
  std::vector<int32_t> pos(static_cast<size_t>(chunk)), tok_seq(static_cast<size_t>(chunk), 0),
      rows(static_cast<size_t>(chunk));
  for (int64_t s = 0; s < n; s += chunk) {
    const int64_t c = std::min(chunk, n - s);
    for (int64_t i = 0; i < c; ++i) {
      pos[size_t(i)] = int32_t(s + i);
      rows[size_t(i)] = int32_t(i);
    }
    model::Batch b;
    b.n_tokens = c;
    b.token_ids = prompt.data() + s;
    b.positions = pos.data();
    b.token_seq = tok_seq.data();
    b.n_seqs = 1;
    b.seqs = &seq;
    b.n_logits = c;
    b.logit_rows = rows.data();
    m.forward(b, cache.views(), out.data() + s * v, pool);
  }
  return out;
}

}  // namespace gannet::test_support
