// The DSpark drafter of DeepSeek-V4.1 (deepseek-v4-architecture.md §9.8) on the tiny
// reference checkpoint's mtp.* tensors. No public implementation of the drafter exists to
// take a golden from, so:
//  - a from-spec reference written here, dense and without rings (every ring key
//    recomputed from the captured residuals, attention in double), must give the same
//    logits within 1e-3, the same drafts where the margin allows, and the same confidences;
//  - bit-exact invariants: seeding the rings in any chunking, or around rejected
//    positions a verify step computed, gives the same drafts, confidences and logits;
//    jobs drafted together equal jobs drafted alone.
// labels: exact
#include <gtest/gtest.h>

#include <cmath>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <limits>

#include "core/thread_pool.h"
#include "io/checkpoint.h"
#include "io/model_config.h"
#include "kernels/cpu/fake_quant.h"
#include "kernels/cpu/packed_matmul.h"
#include "kernels/cpu/rmsnorm.h"
#include "kernels/cpu/rope.h"
#include "model/deepseek_v41/mhc.h"
#include "model/deepseek_v41/model.h"
#include "model/moe.h"

namespace {

using gannet::model::deepseek_v41::DeepseekV41;
using gannet::model::deepseek_v41::SeqState;
namespace k = gannet::kernels;
namespace m41 = gannet::model::deepseek_v41;

std::string golden_dir() {
  const char* src = std::getenv("GANNET_SOURCE_DIR");
  return (std::filesystem::path(src ? src : ".") / "tests" / "golden" / "deepseek-v41-tiny").string();
}

struct Fixture {
  gannet::io::ModelConfig cfg = [] {
    gannet::io::ModelConfig c = gannet::io::load_model_config(golden_dir());
    c.dspark = true;
    c.speculative_tokens = 3;  // rings of window + 3: slots no longer equal p % window
    return c;
  }();
  gannet::io::Checkpoint ckpt{golden_dir()};
  DeepseekV41 model{cfg, ckpt};
  std::vector<int32_t> prompt(int n, int salt) const {
    std::vector<int32_t> p;
    for (int i = 0; i < n; ++i) p.push_back(int32_t((37 * i + 11 * salt + 5) % 500));
    return p;
  }
};

Fixture& fx() {
  static Fixture f;
  return f;
}

struct Draft {
  std::vector<int32_t> drafts;
  std::vector<float> conf, logits;
};

// Runs tokens through a fresh state in the given chunks, seeding the drafter after each
// chunk, then drafts the block after the last position with `token`.
Draft run(const std::vector<int32_t>& toks, const std::vector<int64_t>& chunks, int32_t token,
          gannet::ThreadPool* pool = nullptr, std::vector<float>* capture_out = nullptr) {
  const DeepseekV41& m = fx().model;
  const int64_t B = m.dspark_block(), V = m.config().vocab_size, cw = m.capture_width(), d = m.config().hidden_size;
  SeqState st = m.new_state(128);
  const m41::SeqMem mem = st.mem();
  int64_t at = 0;
  const int64_t n = int64_t(toks.size());
  for (size_t c = 0; at < n; ++c) {
    const int64_t len = std::min(n - at, chunks[c % chunks.size()]);
    std::vector<float> hidden(size_t(len * d)), cap(size_t(len * cw));
    DeepseekV41::Chunk ch;
    ch.m = &mem;
    ch.pos0 = at;
    ch.n = len;
    m.forward_batch({ch}, toks.data() + at, len, hidden.data(), pool, cap.data());
    if (capture_out) capture_out->insert(capture_out->end(), cap.begin(), cap.end());
    DeepseekV41::DraftJob j;
    j.m = &mem;
    j.main_hidden = cap.data();
    j.seed_n = len;
    j.seed_pos0 = at;
    m.dspark({j}, pool);
    at += len;
  }
  Draft out;
  out.drafts.assign(size_t(B), -1);
  out.conf.assign(size_t(B), -1.0f);
  out.logits.assign(size_t(B * V), 0.0f);
  DeepseekV41::DraftJob j;
  j.m = &mem;
  j.p = n - 1;
  j.token = token;
  j.drafts = out.drafts.data();
  j.confidence = out.conf.data();
  j.draft_logits = out.logits.data();
  m.dspark({j}, pool);
  return out;
}

void expect_same(const Draft& a, const Draft& b, const std::string& what) {
  EXPECT_EQ(a.drafts, b.drafts) << what;
  EXPECT_EQ(0, std::memcmp(a.conf.data(), b.conf.data(), a.conf.size() * 4)) << what;
  EXPECT_EQ(0, std::memcmp(a.logits.data(), b.logits.data(), a.logits.size() * 4)) << what;
}

TEST(DsparkDrafter, LoadsFromTheCheckpoint) {
  const DeepseekV41& m = fx().model;
  ASSERT_TRUE(m.has_dspark());
  ASSERT_TRUE(m.dspark_enabled());
  EXPECT_EQ(m.weights().dspark.stages.size(), 2u);
  EXPECT_EQ(m.dspark_block(), 3);
  EXPECT_EQ(m.capture_width(), 3 * 256);
  EXPECT_EQ(m.weights().dspark.stages[0].moe.experts.size(), 4u);
  // Without --speculative dspark the state slots carry no rings.
  gannet::io::ModelConfig plain = gannet::io::load_model_config(golden_dir());
  DeepseekV41 off(plain, fx().ckpt);
  EXPECT_TRUE(off.has_dspark());
  EXPECT_FALSE(off.dspark_enabled());
  EXPECT_LT(off.cache_spec().state_bytes_per_seq, m.cache_spec().state_bytes_per_seq);
}

// §9.8 computed densely: ring keys from the captured residuals of the last window,
// attention in double over [window ; block], no state.
Draft reference(const std::vector<float>& capture, int64_t p, int32_t token) {
  const DeepseekV41& m = fx().model;
  const auto& c = m.config();
  const m41::DsparkWeights& ds = m.weights().dspark;
  const int64_t d = c.hidden_size, hc = c.hc_mult, D = c.head_dim, H = c.num_attention_heads,
                R = c.qk_rope_head_dim, W = c.sliding_window, B = c.dspark_block_size, V = c.vocab_size,
                cw = m.capture_width(), rank = c.dspark_markov_rank;
  const float eps = float(c.rms_norm_eps);
  const k::RopeTable rope(int(R), c.rope_theta, c.max_position_embeddings);
  auto lin = [](const std::vector<float>& x, int64_t rows, const k::PackedWeight& w) {
    std::vector<float> y(size_t(rows * w.n));
    k::matmul_packed(x.data(), rows, w, y.data(), nullptr);
    return y;
  };
  auto norm = [&](const std::vector<float>& x, int64_t rows, int64_t dim, const std::vector<float>& w) {
    std::vector<float> y(x.size());
    k::rmsnorm(x.data(), w.data(), y.data(), rows, dim, eps);
    return y;
  };
  // Window keys of each stage at positions k0 .. p.
  const int64_t k0 = std::max<int64_t>(0, p - W + 1), nr = p - k0 + 1;
  std::vector<float> mh(capture.begin() + k0 * cw, capture.begin() + (p + 1) * cw);
  const std::vector<float> mx = norm(lin(mh, nr, ds.main_proj), nr, d, ds.main_norm);
  std::vector<int32_t> rpos;
  for (int64_t q = k0; q <= p; ++q) rpos.push_back(int32_t(q));
  std::vector<int32_t> bpos;
  for (int64_t i = 0; i < B; ++i) bpos.push_back(int32_t(p + 1 + i));
  auto keys_of = [&](const m41::LayerWeights& lw, const std::vector<float>& x, int64_t rows, const int32_t* pos) {
    std::vector<float> kv = norm(lin(x, rows, lw.wkv), rows, D, lw.kv_norm);
    k::apply_rope(kv.data(), rows, 1, int(D), pos, rope, true, int(D - R));
    for (int64_t r = 0; r < rows; ++r) k::fake_quant_fp8(kv.data() + r * D, D, 32, true);
    return kv;
  };
  std::vector<float> X(size_t(B * hc * d)), e(static_cast<size_t>(d));
  for (int64_t i = 0; i < B; ++i) {
    m.weights().embed.dequant_row(i == 0 ? token : c.dspark_noise_token_id, e.data());
    for (int64_t s = 0; s < hc; ++s) std::copy(e.begin(), e.end(), X.begin() + (i * hc + s) * d);
  }
  std::vector<float> pre(size_t(B * hc), 0.0f), a_pre(pre.size()), f_pre(pre.size()), post(pre.size()),
      comb(size_t(B * hc * hc)), col(size_t(B * d));
  for (int64_t i = 0; i < B; ++i) pre[size_t(i * hc)] = 1.0f;
  m41::MhcWorkspace ws;
  gannet::model::MoeWorkspace mws;
  for (size_t s = 0; s < ds.stages.size(); ++s) {
    const m41::LayerWeights& lw = ds.stages[s];
    m41::mhc_mixes(c, lw.hc_attn, X.data(), B, a_pre.data(), post.data(), comb.data(), ws, nullptr);
    m41::mhc_collapse(X.data(), B, hc, d, pre.data(), col.data());
    const std::vector<float> a = norm(col, B, d, lw.attn_norm);
    std::vector<float> q = lin(norm(lin(a, B, lw.wq_a), B, c.q_lora_rank, lw.q_norm), B, lw.wq_b);
    k::apply_rope(q.data(), B, int(H), int(D), bpos.data(), rope, true, int(D - R));
    std::vector<float> keys = keys_of(lw, mx, nr, rpos.data());
    const std::vector<float> kb = keys_of(lw, a, B, bpos.data());
    keys.insert(keys.end(), kb.begin(), kb.end());
    const int64_t nk = nr + B;
    std::vector<float> o(size_t(B * H * D));
    for (int64_t i = 0; i < B; ++i)
      for (int64_t h = 0; h < H; ++h) {
        const float* qh = q.data() + (i * H + h) * D;
        std::vector<double> sc(static_cast<size_t>(nk));
        double mxs = lw.attn_sink[size_t(h)];
        for (int64_t kk = 0; kk < nk; ++kk) {
          double dot = 0;
          for (int64_t cc = 0; cc < D; ++cc) dot += double(qh[cc]) * keys[size_t(kk * D + cc)];
          sc[size_t(kk)] = dot / std::sqrt(double(D));
          mxs = std::max(mxs, sc[size_t(kk)]);
        }
        double sum = std::exp(lw.attn_sink[size_t(h)] - mxs);
        for (double& v : sc) sum += (v = std::exp(v - mxs));
        for (int64_t cc = 0; cc < D; ++cc) {
          double acc = 0;
          for (int64_t kk = 0; kk < nk; ++kk) acc += sc[size_t(kk)] / sum * keys[size_t(kk * D + cc)];
          o[size_t((i * H + h) * D + cc)] = float(acc);
        }
      }
    k::apply_rope(o.data(), B, int(H), int(D), bpos.data(), rope, true, int(D - R), true);
    std::vector<float> z(size_t(B * c.o_groups * c.o_lora_rank));
    m41::grouped_wo_a(lw.wo_a, o.data(), B, c.o_groups, c.o_lora_rank, z.data(), nullptr);
    const std::vector<float> y = lin(z, B, lw.wo_b);
    m41::mhc_expand(X.data(), B, hc, d, y.data(), post.data(), comb.data());
    m41::mhc_mixes(c, lw.hc_ffn, X.data(), B, f_pre.data(), post.data(), comb.data(), ws, nullptr);
    m41::mhc_collapse(X.data(), B, hc, d, a_pre.data(), col.data());
    const std::vector<float> fa = norm(col, B, d, lw.ffn_norm);
    gannet::model::MoeConfig mc;
    mc.hidden = d;
    mc.n_experts = c.dspark_n_routed_experts;
    mc.top_k = c.dspark_num_experts_per_tok;
    mc.n_shared = c.n_shared_experts;
    mc.norm_topk_prob = c.norm_topk_prob;
    mc.routed_scaling_factor = float(c.routed_scaling_factor);
    mc.swiglu_limit = float(c.swiglu_limit);
    mc.gate_temp = float(c.gate_temp);
    const gannet::model::MoeLayer moe(mc, lw.moe);
    std::vector<float> fy(size_t(B * d));
    moe.forward(fa.data(), B, fy.data(), mws, nullptr);
    m41::mhc_expand(X.data(), B, hc, d, fy.data(), post.data(), comb.data());
    pre = f_pre;
  }
  m41::mhc_collapse(X.data(), B, hc, d, pre.data(), col.data());
  Draft out;
  out.logits = lin(norm(col, B, d, ds.norm), B, m.weights().head);
  std::vector<float> emb(static_cast<size_t>(rank)), w2(static_cast<size_t>(rank));
  int32_t t = token;
  for (int64_t i = 0; i < B; ++i) {
    ds.markov_w1.dequant_row(t, emb.data());
    int32_t best = 0;
    for (int64_t v = 0; v < V; ++v) {
      ds.markov_w2.dequant_row(v, w2.data());
      double b = 0;
      for (int64_t r = 0; r < rank; ++r) b += double(w2[size_t(r)]) * emb[size_t(r)];
      float& l = out.logits[size_t(i * V + v)];
      l = float(l + b);
      if (l > out.logits[size_t(i * V + best)]) best = int32_t(v);
    }
    double zc = 0;
    for (int64_t cc = 0; cc < d; ++cc) zc += double(ds.confidence[size_t(cc)]) * col[size_t(i * d + cc)];
    for (int64_t r = 0; r < rank; ++r) zc += double(ds.confidence[size_t(d + r)]) * emb[size_t(r)];
    out.drafts.push_back(best);
    out.conf.push_back(float(1.0 / (1.0 + std::exp(-zc))));
    t = best;
  }
  return out;
}

TEST(DsparkDrafter, MatchesFromSpecReference) {
  const int64_t V = fx().model.config().vocab_size, B = fx().model.dspark_block();
  for (int n : {1, 5, 30}) {  // a ring not yet full, then one wrapped several times
    const std::vector<int32_t> toks = fx().prompt(n, n);
    std::vector<float> cap;
    const Draft got = run(toks, {int64_t(n)}, 77, nullptr, &cap);
    const Draft want = reference(cap, n - 1, 77);
    for (int64_t i = 0; i < B; ++i) {
      float worst = 0, top = -1e30f, second = -1e30f;
      for (int64_t v = 0; v < V; ++v) {
        const float w = want.logits[size_t(i * V + v)];
        worst = std::max(worst, std::fabs(got.logits[size_t(i * V + v)] - w));
        if (w > top) second = top, top = w;
        else if (w > second) second = w;
      }
      EXPECT_LT(worst, 1e-3f) << "block position " << i << ", " << n << " tokens";
      EXPECT_NEAR(got.conf[size_t(i)], want.conf[size_t(i)], 1e-4) << i;
      EXPECT_GT(got.conf[size_t(i)], 0.0f);
      EXPECT_LT(got.conf[size_t(i)], 1.0f);
      if (top - second > 1e-2f) {
        EXPECT_EQ(got.drafts[size_t(i)], want.drafts[size_t(i)]) << i;
      }
      // Later positions condition on the drafts before them: compare while they agree.
      if (got.drafts[size_t(i)] != want.drafts[size_t(i)]) break;
    }
  }
}

TEST(DsparkDrafter, SeedingInChunksIsBitExact) {
  const std::vector<int32_t> toks = fx().prompt(41, 3);
  const Draft one = run(toks, {41}, 123);
  gannet::ThreadPool pool(2);
  for (std::vector<int64_t> chunks : {std::vector<int64_t>{1}, {3}, {2, 9, 1, 30}, {13, 13}})
    for (gannet::ThreadPool* tp : {static_cast<gannet::ThreadPool*>(nullptr), &pool})
      expect_same(one, run(toks, chunks, 123, tp), "chunks of " + std::to_string(chunks[0]) + (tp ? ", 2 threads" : ""));
  // A different token after p changes the block.
  EXPECT_NE(0, std::memcmp(one.logits.data(), run(toks, {41}, 124).logits.data(), one.logits.size() * 4));
}

// A verify step computes positions past what the sequence keeps; the drafter is seeded
// with the kept ones only, and the backbone's rings have room for the rest.
TEST(DsparkDrafter, RejectedPositionsLeaveNoTrace) {
  const DeepseekV41& m = fx().model;
  const int64_t d = m.config().hidden_size, cw = m.capture_width(), B = m.dspark_block(), V = m.config().vocab_size;
  std::vector<int32_t> toks = fx().prompt(20, 9);
  auto step = [&](SeqState& st, const int32_t* t, int64_t n, int64_t keep) {
    const m41::SeqMem mem = st.mem();
    std::vector<float> hidden(size_t(n * d)), cap(size_t(n * cw));
    DeepseekV41::Chunk ch;
    ch.m = &mem;
    ch.pos0 = st.pos;
    ch.n = n;
    m.forward_batch({ch}, t, n, hidden.data(), nullptr, cap.data());
    DeepseekV41::DraftJob j;
    j.m = &mem;
    j.main_hidden = cap.data();
    j.seed_n = keep;
    j.seed_pos0 = st.pos;
    m.dspark({j}, nullptr);
    st.pos += keep;
  };
  auto draft = [&](SeqState& st, int32_t token) {
    Draft out;
    out.drafts.assign(size_t(B), -1);
    out.conf.assign(size_t(B), 0);
    out.logits.assign(size_t(B * V), 0);
    const m41::SeqMem mem = st.mem();
    DeepseekV41::DraftJob j;
    j.m = &mem;
    j.p = st.pos - 1;
    j.token = token;
    j.drafts = out.drafts.data();
    j.confidence = out.conf.data();
    j.draft_logits = out.logits.data();
    m.dspark({j}, nullptr);
    return out;
  };
  SeqState a = m.new_state(128), b = m.new_state(128);
  step(a, toks.data(), 20, 20);
  step(b, toks.data(), 20, 20);
  // a: two plain decode steps. b: one verify step of [x20, d1, d2, d3] that keeps x20 and
  // d1 (= x21) and rejects the rest, as a verify step with one accepted draft.
  const int32_t x20 = 400, x21 = 401;
  step(a, &x20, 1, 1);
  step(a, &x21, 1, 1);
  const int32_t verify[4] = {x20, x21, 7, 8};
  step(b, verify, 4, 2);
  expect_same(draft(a, 402), draft(b, 402), "after a partly rejected verify step");
}

TEST(DsparkDrafter, JobsDraftedTogetherEqualAlone) {
  const DeepseekV41& m = fx().model;
  const int64_t d = m.config().hidden_size, cw = m.capture_width(), B = m.dspark_block(), V = m.config().vocab_size;
  const std::vector<int32_t> t1 = fx().prompt(33, 1), t2 = fx().prompt(6, 2);
  SeqState s1 = m.new_state(128), s2 = m.new_state(128), r1 = m.new_state(128), r2 = m.new_state(128);
  const m41::SeqMem m1 = s1.mem(), m2 = s2.mem(), n1 = r1.mem(), n2 = r2.mem();
  // Prefill both in one batch and seed both in one call; the reference one by one.
  std::vector<int32_t> both = t1;
  both.insert(both.end(), t2.begin(), t2.end());
  std::vector<float> hidden(both.size() * size_t(d)), cap(both.size() * size_t(cw));
  DeepseekV41::Chunk c1, c2;
  c1.m = &m1, c1.pos0 = 0, c1.n = 33, c1.row0 = 0;
  c2.m = &m2, c2.pos0 = 0, c2.n = 6, c2.row0 = 33;
  m.forward_batch({c1, c2}, both.data(), 39, hidden.data(), nullptr, cap.data());
  std::vector<Draft> out(4);
  for (Draft& o : out) {
    o.drafts.assign(size_t(B), -1);
    o.conf.assign(size_t(B), 0);
    o.logits.assign(size_t(B * V), 0);
  }
  auto job = [&](const m41::SeqMem* mem, const float* c, int64_t n, int32_t tok, Draft& o) {
    DeepseekV41::DraftJob j;
    j.m = mem;
    j.main_hidden = c;
    j.seed_n = n;
    j.seed_pos0 = 0;
    j.p = n - 1;
    j.token = tok;
    j.drafts = o.drafts.data();
    j.confidence = o.conf.data();
    j.draft_logits = o.logits.data();
    return j;
  };
  m.dspark({job(&m1, cap.data(), 33, 10, out[0]), job(&m2, cap.data() + 33 * cw, 6, 20, out[1])}, nullptr);
  for (int s = 0; s < 2; ++s) {
    const std::vector<int32_t>& t = s ? t2 : t1;
    const m41::SeqMem* mem = s ? &n2 : &n1;
    std::vector<float> h(t.size() * size_t(d)), cp(t.size() * size_t(cw));
    DeepseekV41::Chunk ch;
    ch.m = mem;
    ch.n = int64_t(t.size());
    m.forward_batch({ch}, t.data(), ch.n, h.data(), nullptr, cp.data());
    m.dspark({job(mem, cp.data(), ch.n, s ? 20 : 10, out[size_t(2 + s)])}, nullptr);
  }
  expect_same(out[0], out[2], "first sequence");
  expect_same(out[1], out[3], "second sequence");
}

}  // namespace
