// DeepSeek-V4.1's DSpark drafter (deepseek-v4-architecture.md §9.8): three window-only
// stages over a block of [x_{p+1}, noise, ...] tokens that attend to rings holding the
// projected target-layer residuals of the sequence, a shared head, a sequential Markov
// correction and a confidence head. No reference implementation of the drafter is
// public; tests check each stage against a from-spec computation and the invariants
// (batch independence, chunking of the seeding).
#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>

#include "core/error.h"
#include "kernels/cpu/activations.h"
#include "kernels/cpu/fake_quant.h"
#include "kernels/cpu/matmul.h"
#include "kernels/cpu/packed_matmul.h"
#include "kernels/cpu/rmsnorm.h"
#include "model/deepseek_v41/mhc.h"
#include "model/deepseek_v41/model.h"

namespace gannet::model::deepseek_v41 {

void DeepseekV41::dspark_attention(int64_t stage, const std::vector<DraftJob>& jobs, const int32_t* pos,
                                   const float* a, float* out, ThreadPool* pool) const {
  const LayerWeights& lw = w_.dspark.stages[size_t(stage)];
  const int64_t B = c_.dspark_block_size, N = int64_t(jobs.size()) * B;
  const int64_t D = c_.head_dim, H = c_.num_attention_heads, R = c_.qk_rope_head_dim, W = c_.sliding_window;
  const float eps = float(c_.rms_norm_eps);
  std::vector<float> qa(size_t(N * c_.q_lora_rank)), qr(qa.size()), q(size_t(N * H * D));
  mm(a, N, lw.wq_a, qa.data(), pool);
  kernels::rmsnorm(qa.data(), lw.q_norm.data(), qr.data(), N, c_.q_lora_rank, eps);
  mm(qr.data(), N, lw.wq_b, q.data(), pool);
  kernels::apply_rope(q.data(), N, int(H), int(D), pos, rope_main_, true, int(D - R));
  std::vector<float> kv0(size_t(N * D)), kv(size_t(N * D));
  mm(a, N, lw.wkv, kv0.data(), pool);
  kernels::rmsnorm(kv0.data(), lw.kv_norm.data(), kv.data(), N, D, eps);
  kernels::apply_rope(kv.data(), N, 1, int(D), pos, rope_main_, true, int(D - R));
  for (int64_t r = 0; r < N; ++r)
    if (D % 32 == 0) kernels::fake_quant_fp8(kv.data() + r * D, D, 32, true);

  std::vector<float> o(size_t(N * H * D), 0.0f), keys, sbuf, sc;
  const float scale = 1.0f / std::sqrt(float(D));
  for (size_t j = 0; j < jobs.size(); ++j) {
    const DraftJob& job = jobs[j];
    // Keys: the ring's valid positions (the last W up to p, none before lo), then the block.
    const int64_t k0 = std::max<int64_t>({0, job.lo, job.p - W + 1});
    const int64_t nr = std::max<int64_t>(0, job.p - k0 + 1), nk = nr + B;
    keys.resize(size_t(nk * D));
    const uint8_t* ring = dspark_ring(*job.m, stage);
    for (int64_t kp = k0; kp <= job.p; ++kp)
      load_window(ring + (kp % lay_.window_ring) * lay_.win_bytes, keys.data() + (kp - k0) * D);
    std::memcpy(keys.data() + nr * D, kv.data() + int64_t(j) * B * D, size_t(B * D) * 4);
    sbuf.resize(size_t(B * H * nk));
    kernels::matmul_f32(q.data() + int64_t(j) * B * H * D, B * H, D, keys.data(), nk, sbuf.data(), nullptr);
    sc.resize(size_t(nk));
    for (int64_t r = 0; r < B * H; ++r) {
      const int64_t h = r % H;
      const float* srow = sbuf.data() + r * nk;
      float mx = lw.attn_sink[size_t(h)];
      for (int64_t k = 0; k < nk; ++k) {
        sc[size_t(k)] = srow[k] * scale;
        mx = std::max(mx, sc[size_t(k)]);
      }
      float sum = std::exp(lw.attn_sink[size_t(h)] - mx);
      for (int64_t k = 0; k < nk; ++k) {
        sc[size_t(k)] = std::exp(sc[size_t(k)] - mx);
        sum += sc[size_t(k)];
      }
      float* oh = o.data() + (int64_t(j) * B * H + r) * D;
      for (int64_t k = 0; k < nk; ++k) sc[size_t(k)] /= sum;
      kernels::add_weighted_rows(sc.data(), keys.data(), nullptr, nk, D, oh, D);
    }
  }
  kernels::apply_rope(o.data(), N, int(H), int(D), pos, rope_main_, true, int(D - R), /*inverse=*/true);
  std::vector<float> z(size_t(N * c_.o_groups * c_.o_lora_rank));
  grouped_wo_a(lw.wo_a, o.data(), N, c_.o_groups, c_.o_lora_rank, z.data(), pool);
  mm(z.data(), N, lw.wo_b, out, pool);
}

void DeepseekV41::dspark(const std::vector<DraftJob>& jobs, ThreadPool* pool) const {
  GANNET_CHECK(dspark_enabled(), "DSpark drafting needs a model built with ModelConfig::dspark");
  const DsparkWeights& ds = w_.dspark;
  const int64_t d = c_.hidden_size, hc = c_.hc_mult, D = c_.head_dim, R = c_.qk_rope_head_dim;
  const int64_t W = c_.sliding_window, B = c_.dspark_block_size, S = int64_t(ds.stages.size());
  const int64_t cw = capture_width(), V = c_.vocab_size, rank = c_.dspark_markov_rank;
  const float eps = float(c_.rms_norm_eps);

  // 1. Seeding: main_x = main_norm(main_proj . main_hidden) of each job's last window of
  //    seeded positions; each stage's ring takes norm(wkv . main_x), RoPE, FQ8 at them.
  std::vector<float> mh, mx0, mx, kv0, kv;
  std::vector<int32_t> spos;
  std::vector<std::pair<size_t, int64_t>> owner;  // (job, position) of each seeded row
  for (size_t j = 0; j < jobs.size(); ++j) {
    const DraftJob& job = jobs[j];
    if (job.seed_n <= 0) continue;
    for (int64_t i = std::max<int64_t>(0, job.seed_n - W); i < job.seed_n; ++i) {
      const float* row = job.main_hidden + i * cw;
      if (std::isnan(row[0])) continue;  // bounded replay skipped it: never attended (lo)
      mh.insert(mh.end(), row, row + cw);
      spos.push_back(int32_t(job.seed_pos0 + i));
      owner.push_back({j, job.seed_pos0 + i});
    }
  }
  const int64_t M = int64_t(spos.size());
  if (M > 0) {
    mx0.resize(size_t(M * d));
    mx.resize(size_t(M * d));
    mm(mh.data(), M, ds.main_proj, mx0.data(), pool);
    kernels::rmsnorm(mx0.data(), ds.main_norm.data(), mx.data(), M, d, eps);
    kv0.resize(size_t(M * D));
    kv.resize(size_t(M * D));
    for (int64_t s = 0; s < S; ++s) {
      const LayerWeights& lw = ds.stages[size_t(s)];
      mm(mx.data(), M, lw.wkv, kv0.data(), pool);
      kernels::rmsnorm(kv0.data(), lw.kv_norm.data(), kv.data(), M, D, eps);
      kernels::apply_rope(kv.data(), M, 1, int(D), spos.data(), rope_main_, true, int(D - R));
      for (int64_t i = 0; i < M; ++i) {
        float* v = kv.data() + i * D;
        if (D % 32 == 0) kernels::fake_quant_fp8(v, D, 32, true);
        const auto [j, p] = owner[size_t(i)];
        store_window(dspark_ring(*jobs[j].m, s) + (p % lay_.window_ring) * lay_.win_bytes, v);
      }
    }
  }

  // 2. The block of each drafting job: [x_{p+1}, noise, ...] at positions p+1 .. p+B.
  std::vector<DraftJob> dj;
  for (const DraftJob& job : jobs)
    if (job.token >= 0) {
      GANNET_CHECK(job.p >= 0 && job.drafts && job.confidence, "DSpark job without a position or outputs");
      if (job.token >= V) fail("token id ", job.token, " is outside the vocabulary (", V, ")");
      if (job.p + 1 + B > c_.max_position_embeddings)
        fail("DSpark block at ", job.p + 1, " passes max_position_embeddings (", c_.max_position_embeddings, ")");
      dj.push_back(job);
    }
  if (dj.empty()) return;
  const int64_t N = int64_t(dj.size()) * B;
  std::vector<int32_t> pos(static_cast<size_t>(N));
  std::vector<float> X(size_t(N * hc * d)), e(static_cast<size_t>(d));
  for (size_t j = 0; j < dj.size(); ++j)
    for (int64_t i = 0; i < B; ++i) {
      const int64_t r = int64_t(j) * B + i;
      pos[size_t(r)] = int32_t(dj[j].p + 1 + i);
      w_.embed.dequant_row(i == 0 ? dj[j].token : c_.dspark_noise_token_id, e.data());
      for (int64_t k = 0; k < hc; ++k) std::memcpy(X.data() + (r * hc + k) * d, e.data(), size_t(d) * 4);
    }
  // 3. The stages: single-pass mHC blocks, the first collapse reading stream 0.
  std::vector<float> pre(size_t(N * hc), 0.0f), a_pre(pre.size()), f_pre(pre.size());
  std::vector<float> post(size_t(N * hc)), comb(size_t(N * hc * hc));
  for (int64_t i = 0; i < N; ++i) pre[size_t(i * hc)] = 1.0f;
  std::vector<float> col(size_t(N * d)), nrm(size_t(N * d)), y(size_t(N * d));
  MhcWorkspace mws;
  MoeWorkspace moe_ws;
  for (int64_t s = 0; s < S; ++s) {
    const LayerWeights& lw = ds.stages[size_t(s)];
    mhc_mixes(c_, lw.hc_attn, X.data(), N, a_pre.data(), post.data(), comb.data(), mws, pool);
    mhc_collapse(X.data(), N, hc, d, pre.data(), col.data());
    kernels::rmsnorm(col.data(), lw.attn_norm.data(), nrm.data(), N, d, eps);
    dspark_attention(s, dj, pos.data(), nrm.data(), y.data(), pool);
    mhc_expand(X.data(), N, hc, d, y.data(), post.data(), comb.data());
    mhc_mixes(c_, lw.hc_ffn, X.data(), N, f_pre.data(), post.data(), comb.data(), mws, pool);
    mhc_collapse(X.data(), N, hc, d, a_pre.data(), col.data());
    kernels::rmsnorm(col.data(), lw.ffn_norm.data(), nrm.data(), N, d, eps);
    dspark_moe_[size_t(s)].forward(nrm.data(), N, y.data(), moe_ws, pool);
    mhc_expand(X.data(), N, hc, d, y.data(), post.data(), comb.data());
    pre.swap(f_pre);
  }
  // 4. Final collapse (kept for the confidence head), norm, the shared head.
  mhc_collapse(X.data(), N, hc, d, pre.data(), col.data());
  kernels::rmsnorm(col.data(), ds.norm.data(), nrm.data(), N, d, eps);
  std::vector<float> lg(size_t(N * V));
  kernels::matmul_packed(nrm.data(), N, w_.head, lg.data(), pool);
  // 5-6. Sequential Markov correction: position i adds markov_w2 . markov_w1[token_i]
  //      (token_0 = x_{p+1}, then the drafts) and drafts its argmax (lowest id on ties);
  //      confidence_i = sigmoid(proj . [collapsed hidden_i ; markov_w1[token_i]]).
  const int64_t J = int64_t(dj.size());
  std::vector<float> emb(size_t(J * rank)), bias(size_t(J * V));
  std::vector<int32_t> tok(static_cast<size_t>(J));
  for (int64_t j = 0; j < J; ++j) tok[size_t(j)] = dj[size_t(j)].token;
  for (int64_t i = 0; i < B; ++i) {
    for (int64_t j = 0; j < J; ++j) ds.markov_w1.dequant_row(tok[size_t(j)], emb.data() + j * rank);
    kernels::matmul_packed(emb.data(), J, ds.markov_w2, bias.data(), pool);
    for (int64_t j = 0; j < J; ++j) {
      const int64_t r = j * B + i;
      float* l = lg.data() + r * V;
      const float* b = bias.data() + j * V;
      int32_t best = 0;
      for (int64_t v = 0; v < V; ++v) {
        l[v] += b[v];
        if (l[v] > l[best]) best = int32_t(v);
      }
      const float* h = col.data() + r * d;
      const float* eh = emb.data() + j * rank;
      float z = 0.0f;
      for (int64_t c = 0; c < d; ++c) z += ds.confidence[size_t(c)] * h[c];
      for (int64_t c = 0; c < rank; ++c) z += ds.confidence[size_t(d + c)] * eh[c];
      const DraftJob& job = dj[size_t(j)];
      if (job.choose) best = (*job.choose)(i, l);
      job.drafts[i] = best;
      job.confidence[i] = 1.0f / (1.0f + std::exp(-z));
      if (job.draft_logits) std::memcpy(job.draft_logits + i * V, l, size_t(V) * 4);
      tok[size_t(j)] = best;
    }
  }
}

}  // namespace gannet::model::deepseek_v41
