// Paged attention: every ISA variant bit-identical to the scalar reference, the reference
// close to double precision, and DESIGN principle 1: a token's output is the same alone,
// in a mixed batch, in one prefill call, token by token or in chunks, on 1 or 2 threads.
// labels: exact
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <numeric>
#include <random>
#include <vector>

#include "core/cpu_features.h"
#include "core/dtype.h"
#include "core/thread_pool.h"
#include "kernels/cpu/attention.h"

namespace gannet::kernels {
namespace {

std::vector<Isa> all_isas() {
  std::vector<Isa> out;
  for (Isa isa : {Isa::kScalar, Isa::kAvx2, Isa::kAvx512})
    if (isa_supported(isa)) out.push_back(isa);
  return out;
}

std::vector<float> random_f32(size_t n, uint32_t seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> nd(0.0f, 1.0f);
  std::vector<float> v(n);
  for (auto& x : v) x = nd(rng);
  return v;
}

// A K/V arena of n_blocks blocks; slots are padded by 3 floats so strides are not the
// packed ones. Sequences get shuffled, interleaved block ids.
struct Cache {
  int n_kv_heads, head_dim, block_size;
  int64_t slot_stride, block_stride;
  std::vector<float> k, v;               // [n_blocks, block_size, slot_stride]
  std::vector<std::vector<int32_t>> tables;
  std::vector<AttentionSeq> seqs;

  Cache(int n_kv, int hd, int bs, const std::vector<int>& seq_lens, uint32_t seed)
      : n_kv_heads(n_kv), head_dim(hd), block_size(bs) {
    slot_stride = int64_t(n_kv) * hd + 3;
    block_stride = bs * slot_stride;
    int total = 0;
    for (int len : seq_lens) total += (len + bs - 1) / bs;
    std::vector<int32_t> ids(total);
    std::iota(ids.begin(), ids.end(), 0);
    std::shuffle(ids.begin(), ids.end(), std::mt19937(seed));
    size_t next = 0;
    for (int len : seq_lens) {
      tables.emplace_back(ids.begin() + next, ids.begin() + next + (len + bs - 1) / bs);
      next += (len + bs - 1) / bs;
    }
    for (auto& t : tables) seqs.push_back({t.data()});
    k.assign(total * block_stride, NAN);  // unwritten slots would poison the output
    v.assign(total * block_stride, NAN);
  }
  KvCacheLayerMut view() { return {k.data(), v.data(), block_stride, slot_stride, block_size}; }
};

// One sequence's per-position K/V rows [len, n_kv * hd] and queries [len, n_heads * hd].
struct SeqData {
  std::vector<float> k, v, q;
};

SeqData make_seq(int len, int n_heads, int n_kv, int hd, uint32_t seed) {
  return {random_f32(size_t(len) * n_kv * hd, seed), random_f32(size_t(len) * n_kv * hd, seed + 1),
          random_f32(size_t(len) * n_heads * hd, seed + 2)};
}

void store_all(Cache& c, const std::vector<SeqData>& data, const std::vector<int>& lens) {
  for (size_t s = 0; s < lens.size(); ++s)
    for (int p = 0; p < lens[s]; ++p) {
      const int32_t seq = int32_t(s), pos = p;
      const int64_t row = int64_t(c.n_kv_heads) * c.head_dim;
      kv_store(data[s].k.data() + p * row, data[s].v.data() + p * row, 1, c.seqs.data(), &seq, &pos,
               c.n_kv_heads, c.head_dim, c.view());
    }
}

TEST(KernelsAttention, ReferenceMatchesDouble) {
  const int n_heads = 4, n_kv = 2, hd = 40, len = 37;
  Cache c(n_kv, hd, 8, {len}, 1);
  std::vector<SeqData> d = {make_seq(len, n_heads, n_kv, hd, 10)};
  store_all(c, d, {len});
  std::vector<int32_t> seq(len, 0), pos(len);
  std::iota(pos.begin(), pos.end(), 0);
  std::vector<float> out(size_t(len) * n_heads * hd);
  const float scale = 1.0f / std::sqrt(float(hd));
  attention_isa(Isa::kScalar, d[0].q.data(), len, n_heads, n_kv, hd, scale, seq.data(), pos.data(),
                c.seqs.data(), as_const(c.view()), out.data(), nullptr);
  for (int t = 0; t < len; ++t)
    for (int h = 0; h < n_heads; ++h) {
      const int kh = h / (n_heads / n_kv);
      const float* q = &d[0].q[(size_t(t) * n_heads + h) * hd];
      std::vector<double> s(t + 1);
      for (int j = 0; j <= t; ++j) {
        double dot = 0;
        for (int i = 0; i < hd; ++i) dot += double(q[i]) * d[0].k[(size_t(j) * n_kv + kh) * hd + i];
        s[j] = dot * scale;
      }
      const double m = *std::max_element(s.begin(), s.end());
      double sum = 0;
      for (double& x : s) sum += (x = std::exp(x - m));
      for (int i = 0; i < hd; ++i) {
        double o = 0;
        for (int j = 0; j <= t; ++j) o += s[j] * d[0].v[(size_t(j) * n_kv + kh) * hd + i];
        ASSERT_NEAR(out[(size_t(t) * n_heads + h) * hd + i], o / sum, 2e-6) << t << " " << h << " " << i;
      }
    }
}

// The batch of several sequences, mixed lengths, all positions of each in one call.
struct Batch {
  std::vector<int32_t> seq, pos;
  std::vector<float> q;  // [n_tokens, n_heads * hd]
};

Batch full_batch(const std::vector<SeqData>& d, const std::vector<int>& lens, int q_row) {
  Batch b;
  for (size_t s = 0; s < lens.size(); ++s)
    for (int p = 0; p < lens[s]; ++p) {
      b.seq.push_back(int32_t(s));
      b.pos.push_back(p);
      b.q.insert(b.q.end(), d[s].q.begin() + size_t(p) * q_row, d[s].q.begin() + size_t(p + 1) * q_row);
    }
  return b;
}

TEST(KernelsAttention, VariantsMatchReferenceBitExact) {
  struct Shape { int n_heads, n_kv, hd, block_size; };
  const std::vector<int> lens_all = {1, 15, 16, 17, 100, 300};
  for (Shape sh : {Shape{4, 2, 64, 16}, Shape{8, 1, 128, 7}, Shape{3, 3, 80, 5}, Shape{2, 1, 24, 32},
                   Shape{2, 2, 256, 16}, Shape{2, 1, 17, 3}, Shape{20, 1, 32, 16},
                   Shape{3, 1, 64, 16}, Shape{6, 1, 128, 16}, Shape{7, 1, 64, 9}}) {  // head-group remainders
    // A group of 20 query heads per kv head (more than the kernel's 16 per pass) on
    // shorter contexts, to keep the scalar reference quick.
    const std::vector<int> lens = sh.n_heads > 8 ? std::vector<int>{1, 17, 40} : lens_all;
    Cache c(sh.n_kv, sh.hd, sh.block_size, lens, 2);
    std::vector<SeqData> d;
    for (size_t s = 0; s < lens.size(); ++s) d.push_back(make_seq(lens[s], sh.n_heads, sh.n_kv, sh.hd, 100 + 3 * s));
    store_all(c, d, lens);
    Batch b = full_batch(d, lens, sh.n_heads * sh.hd);
    const int64_t n = int64_t(b.seq.size());
    const float scale = 1.0f / std::sqrt(float(sh.hd));
    std::vector<float> ref(b.q.size()), got(b.q.size());
    attention_isa(Isa::kScalar, b.q.data(), n, sh.n_heads, sh.n_kv, sh.hd, scale, b.seq.data(), b.pos.data(),
                  c.seqs.data(), as_const(c.view()), ref.data(), nullptr);
    for (Isa isa : all_isas()) {
      if (isa == Isa::kScalar) continue;
      attention_isa(isa, b.q.data(), n, sh.n_heads, sh.n_kv, sh.hd, scale, b.seq.data(), b.pos.data(),
                    c.seqs.data(), as_const(c.view()), got.data(), nullptr);
      EXPECT_EQ(0, std::memcmp(ref.data(), got.data(), ref.size() * sizeof(float)))
          << isa_name(isa) << " heads=" << sh.n_heads << "/" << sh.n_kv << " hd=" << sh.hd;
    }
  }
}

// Principle 1 for attention, per ISA: mixed batch vs each token alone, 1 vs 2 threads,
// and prefill in one call vs token by token vs chunks of 7 with the cache written as it
// goes.
TEST(KernelsAttention, TokenIsIndependentOfBatchChunkingAndThreads) {
  const int n_heads = 4, n_kv = 2, hd = 64, bs = 16;
  const std::vector<int> lens = {37, 5, 100, 1, 64};
  const int q_row = n_heads * hd, kv_row = n_kv * hd;
  const float scale = 0.125f;
  std::vector<SeqData> d;
  for (size_t s = 0; s < lens.size(); ++s) d.push_back(make_seq(lens[s], n_heads, n_kv, hd, 200 + 3 * s));
  ThreadPool pool1(1), pool2(2);
  for (Isa isa : all_isas()) {
    Cache full(n_kv, hd, bs, lens, 3);
    store_all(full, d, lens);
    Batch b = full_batch(d, lens, q_row);
    const int64_t n = int64_t(b.seq.size());
    std::vector<float> batched(b.q.size());
    attention_isa(isa, b.q.data(), n, n_heads, n_kv, hd, scale, b.seq.data(), b.pos.data(),
                  full.seqs.data(), as_const(full.view()), batched.data(), &pool2);

    // Each token alone (n_tokens = 1; on 2 threads the kernel then splits single heads
    // instead of GQA groups), and the batch on one thread.
    std::vector<float> alone(b.q.size()), one_thread(b.q.size());
    for (int64_t t = 0; t < n; ++t)
      attention_isa(isa, b.q.data() + t * q_row, 1, n_heads, n_kv, hd, scale, &b.seq[t], &b.pos[t],
                    full.seqs.data(), as_const(full.view()), alone.data() + t * q_row,
                    t % 2 ? &pool1 : &pool2);
    attention_isa(isa, b.q.data(), n, n_heads, n_kv, hd, scale, b.seq.data(), b.pos.data(),
                  full.seqs.data(), as_const(full.view()), one_thread.data(), nullptr);
    EXPECT_EQ(0, std::memcmp(batched.data(), alone.data(), batched.size() * sizeof(float))) << isa_name(isa);
    EXPECT_EQ(0, std::memcmp(batched.data(), one_thread.data(), batched.size() * sizeof(float))) << isa_name(isa);

    // Prefill of every sequence in chunks of 1 and 7 (round robin over sequences, as a
    // scheduler would interleave them), writing K/V for the chunk before attending.
    for (int chunk : {1, 7}) {
      Cache c(n_kv, hd, bs, lens, 3);
      std::vector<float> out(b.q.size());
      std::vector<int> done(lens.size(), 0);
      std::vector<int64_t> first(lens.size(), 0);  // row of (s, 0) in the full batch
      for (size_t s = 1; s < lens.size(); ++s) first[s] = first[s - 1] + lens[s - 1];
      for (bool progress = true; progress;) {
        progress = false;
        Batch step;
        std::vector<float> k_rows, v_rows;
        std::vector<int64_t> rows;
        for (size_t s = 0; s < lens.size(); ++s) {
          for (int p = done[s]; p < std::min(lens[s], done[s] + chunk); ++p) {
            step.seq.push_back(int32_t(s));
            step.pos.push_back(p);
            rows.push_back(first[s] + p);
            step.q.insert(step.q.end(), d[s].q.begin() + size_t(p) * q_row, d[s].q.begin() + size_t(p + 1) * q_row);
            k_rows.insert(k_rows.end(), d[s].k.begin() + size_t(p) * kv_row, d[s].k.begin() + size_t(p + 1) * kv_row);
            v_rows.insert(v_rows.end(), d[s].v.begin() + size_t(p) * kv_row, d[s].v.begin() + size_t(p + 1) * kv_row);
          }
          done[s] = std::min(lens[s], done[s] + chunk);
        }
        const int64_t m = int64_t(step.seq.size());
        if (m == 0) break;
        progress = true;
        kv_store(k_rows.data(), v_rows.data(), m, c.seqs.data(), step.seq.data(), step.pos.data(), n_kv, hd, c.view());
        std::vector<float> o(step.q.size());
        attention_isa(isa, step.q.data(), m, n_heads, n_kv, hd, scale, step.seq.data(), step.pos.data(),
                      c.seqs.data(), as_const(c.view()), o.data(), &pool2);
        for (int64_t i = 0; i < m; ++i)
          std::copy_n(o.begin() + i * q_row, q_row, out.begin() + rows[i] * q_row);
      }
      EXPECT_EQ(0, std::memcmp(batched.data(), out.data(), out.size() * sizeof(float)))
          << isa_name(isa) << " chunk=" << chunk;
    }
  }
}

}  // namespace
}  // namespace gannet::kernels

namespace gannet::kernels {
namespace {

// bf16 K/V arenas (--kv-cache-dtype bf16): attention over them equals attention over f32
// arenas holding the bf16-rounded values, bit for bit, for several sequences with shuffled
// blocks, GQA and a batch mixing prefill chunks and decodes.
TEST(KernelsAttention, Bf16CacheEqualsRoundedF32Cache) {
  const int n_heads = 8, n_kv = 2, hd = 40, bs = 4;
  const std::vector<int> lens = {1, 9, 17, 6};
  std::vector<SeqData> data;
  for (size_t s = 0; s < lens.size(); ++s) data.push_back(make_seq(lens[s], n_heads, n_kv, hd, uint32_t(50 + 7 * s)));
  // The f32 reference cache holds the rounded values.
  std::vector<SeqData> rounded = data;
  for (auto& d : rounded)
    for (auto* v : {&d.k, &d.v})
      for (float& x : *v) x = bf16_to_f32(f32_to_bf16(x));
  Cache ref(n_kv, hd, bs, lens, 3);
  store_all(ref, rounded, lens);
  // The bf16 cache: the same block tables, its own arenas.
  const int64_t row = int64_t(n_kv) * hd;
  int total_blocks = 0;
  for (int len : lens) total_blocks += (len + bs - 1) / bs;
  std::vector<uint16_t> k16(size_t(total_blocks * bs * row)), v16(k16.size());
  KvCacheLayerBf16 view{k16.data(), v16.data(), bs * row, row, bs};
  for (size_t s = 0; s < lens.size(); ++s)
    for (int p = 0; p < lens[s]; ++p) {
      const int32_t seq = int32_t(s), pos = p;
      kv_store_bf16(data[s].k.data() + p * row, data[s].v.data() + p * row, 1, ref.seqs.data(), &seq, &pos, n_kv, hd,
                    view);
    }
  // A batch: every position of sequences 1 and 3, the last of 0 and 2.
  std::vector<int32_t> tok_seq, tok_pos;
  std::vector<float> q;
  for (int32_t s : {0, 1, 2, 3})
    for (int p = (s == 1 || s == 3) ? 0 : lens[size_t(s)] - 1; p < lens[size_t(s)]; ++p) {
      tok_seq.push_back(s);
      tok_pos.push_back(p);
      q.insert(q.end(), data[size_t(s)].q.begin() + p * n_heads * hd, data[size_t(s)].q.begin() + (p + 1) * n_heads * hd);
    }
  const int64_t n = int64_t(tok_seq.size());
  std::vector<float> want(q.size()), got(q.size());
  ThreadPool pool(2);
  attention(q.data(), n, n_heads, n_kv, hd, 0.125f, tok_seq.data(), tok_pos.data(), ref.seqs.data(),
            as_const(ref.view()), want.data(), &pool);
  attention_bf16(q.data(), n, n_heads, n_kv, hd, 0.125f, tok_seq.data(), tok_pos.data(), ref.seqs.data(),
                 int32_t(lens.size()), view, got.data(), &pool);
  EXPECT_EQ(0, std::memcmp(want.data(), got.data(), want.size() * 4));
}

}  // namespace
}  // namespace gannet::kernels
