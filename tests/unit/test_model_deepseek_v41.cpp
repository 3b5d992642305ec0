// DeepSeek-V4.1 (model/deepseek_v41) against the tiny reference checkpoint of
// tests/golden/deepseek-v41-tiny (transformers' deepseek_v41 in float32): logits at all
// 41 prompt positions within 1e-2 with the same top-1 wherever the margin allows, the 16
// greedy ids exactly (decoded token by token through the sequence state), the Engram
// hash ids exactly; and the exactness invariant: any split of the sequence into chunks
// gives the same bits as one call.
// labels: exact
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <limits>
#include <random>
#include <sstream>
#include <vector>

#include "core/thread_pool.h"
#include "io/checkpoint.h"
#include "io/model_config.h"
#include "model/deepseek_v41/index_scores.h"
#include "model/deepseek_v41/mhc.h"
#include "model/deepseek_v41/model.h"

namespace {

using gannet::model::deepseek_v41::DeepseekV41;
using gannet::model::deepseek_v41::SeqState;

std::filesystem::path golden_dir() {
  const char* src = std::getenv("GANNET_SOURCE_DIR");
  return std::filesystem::path(src ? src : ".") / "tests" / "golden" / "deepseek-v41-tiny";
}

nlohmann::json load_json(const std::filesystem::path& p) {
  std::ifstream in(p);
  EXPECT_TRUE(in.good()) << p;
  std::stringstream ss;
  ss << in.rdbuf();
  return nlohmann::json::parse(ss.str());
}

struct Fixture {
  gannet::io::ModelConfig cfg = gannet::io::load_model_config(golden_dir().string());
  gannet::io::Checkpoint ckpt{golden_dir().string()};
  DeepseekV41 model{cfg, ckpt};
  nlohmann::json golden = load_json(golden_dir() / "golden.json");
  std::vector<int32_t> prompt() const {
    std::vector<int32_t> p;
    for (const auto& v : golden["prompt_ids"]) p.push_back(v.get<int32_t>());
    return p;
  }
};

Fixture& fx() {
  static Fixture f;
  return f;
}

int64_t argmax(const float* x, int64_t n) {
  int64_t b = 0;
  for (int64_t i = 1; i < n; ++i)
    if (x[i] > x[b]) b = i;
  return b;
}

TEST(ModelDeepseekV41, ConfigAndWeights) {
  const auto& c = fx().model.config();
  EXPECT_EQ(c.hidden_size, 256);
  EXPECT_EQ(c.compress_ratios, (std::vector<int64_t>{0, 2, 2, 1, 1, 1, 0, 0}));
  EXPECT_EQ(c.candidate_source_layer_id, 3);
  EXPECT_EQ(c.engram_pad_id, 2);
  EXPECT_EQ(c.weight_block, 32);
  EXPECT_EQ(fx().ckpt.names().size(), 610u);
  EXPECT_GT(fx().model.weights().mtp_tensors, 0);
  const auto& lw = fx().model.weights().layers[1];
  EXPECT_EQ(lw.wq_a.format, gannet::kernels::WeightFormat::kFp8Block);
  EXPECT_EQ(lw.wq_a.block_n, 32);
  EXPECT_EQ(lw.moe.experts[0].w1.format, gannet::kernels::WeightFormat::kMxfp4);
  EXPECT_TRUE(lw.has_engram);
  // The Engram layout of layer 1 (engram.json): primes, offsets and multipliers.
  const nlohmann::json e = load_json(golden_dir() / "engram.json");
  const auto& lay = fx().model.engram_layout();
  const auto& el = e["layers"][0];
  std::vector<int64_t> primes;
  for (const auto& row : el["primes"])
    for (const auto& p : row) primes.push_back(p.get<int64_t>());
  EXPECT_EQ(lay.primes[0], primes);
  EXPECT_EQ(lay.offsets[0], el["offsets"].get<std::vector<int64_t>>());
  EXPECT_EQ(lay.multipliers[0], el["multipliers"].get<std::vector<int64_t>>());
}

TEST(ModelDeepseekV41, EngramHashIdsMatchReference) {
  const auto& lay = fx().model.engram_layout();
  const auto p = fx().prompt();
  const auto& want = fx().golden["engram"]["hash_ids_per_position"];
  ASSERT_EQ(want.size(), p.size());
  std::vector<int64_t> out(size_t(lay.cols)), back(size_t(lay.max_ngram));
  for (size_t i = 0; i < p.size(); ++i) {
    const int64_t avail = std::min<int64_t>(lay.max_ngram, int64_t(i) + 1);
    for (int64_t s = 0; s < avail; ++s) back[size_t(s)] = p[i - size_t(s)];
    gannet::model::deepseek_v41::engram_hash(lay, 0, back.data(), avail, out.data());
    EXPECT_EQ(out, want[i][0].get<std::vector<int64_t>>()) << "position " << i;
  }
}

TEST(ModelDeepseekV41, PromptLogitsMatchReference) {
  auto& f = fx();
  const auto p = f.prompt();
  const int64_t n = int64_t(p.size()), V = f.model.config().vocab_size;
  std::vector<float> logits(size_t(n * V));
  SeqState st = f.model.new_state(128);
  gannet::ThreadPool pool(2);
  f.model.forward(st, p.data(), n, logits.data(), &pool);
  double worst = 0;
  for (int64_t i = 0; i < n; ++i) {
    const auto& ref = f.golden["logits_float32"][size_t(i)];
    for (int64_t v = 0; v < V; ++v) worst = std::max(worst, std::fabs(double(logits[size_t(i * V + v)]) - ref[size_t(v)].get<double>()));
    const double margin = f.golden["margins_float32"][size_t(i)].get<double>();
    if (margin > 2e-2) {
      EXPECT_EQ(argmax(logits.data() + i * V, V), f.golden["top1_float32"][size_t(i)].get<int64_t>()) << "position " << i;
    }
  }
  std::printf("max |logit - reference| over %lld positions: %.3g\n", (long long)n, worst);
  EXPECT_LT(worst, 1e-2);
}

TEST(ModelDeepseekV41, GreedyDecodeMatchesReference) {
  auto& f = fx();
  const auto p = f.prompt();
  const int64_t V = f.model.config().vocab_size;
  SeqState st = f.model.new_state(128);
  std::vector<float> logits(p.size() * size_t(V));
  f.model.forward(st, p.data(), int64_t(p.size()), logits.data(), nullptr);
  int32_t next = int32_t(argmax(logits.data() + (int64_t(p.size()) - 1) * V, V));
  const auto& want = f.golden["greedy"]["float32_ids"];
  double worst = 0;
  for (size_t s = 0; s < want.size(); ++s) {
    EXPECT_EQ(next, want[s].get<int32_t>()) << "greedy step " << s;
    std::vector<float> l(static_cast<size_t>(V));
    f.model.forward(st, &next, 1, l.data(), nullptr);
    if (s + 1 < want.size()) {
      const auto& ref = f.golden["greedy_last_logits_float32"][s + 1];
      for (int64_t v = 0; v < V; ++v) worst = std::max(worst, std::fabs(double(l[size_t(v)]) - ref[size_t(v)].get<double>()));
    }
    next = int32_t(argmax(l.data(), V));
  }
  std::printf("max |logit - reference| over the greedy steps: %.3g\n", worst);
  EXPECT_LT(worst, 1e-2);
}

// One call, token by token, and uneven chunks (splitting the ratio-2 groups and the
// window) give the same bits for every row, on 1 and 2 threads.
TEST(ModelDeepseekV41, ChunkingIsBitExact) {
  auto& f = fx();
  auto p = f.prompt();
  for (int i = 0; i < 6; ++i) p.push_back(int32_t((37 * i + 11) % 512));  // 47 tokens
  const int64_t n = int64_t(p.size()), V = f.model.config().vocab_size;
  std::vector<float> one(size_t(n * V));
  {
    SeqState st = f.model.new_state(128);
    f.model.forward(st, p.data(), n, one.data(), nullptr);
  }
  gannet::ThreadPool pool(2);
  for (std::vector<int64_t> chunks : {std::vector<int64_t>{1}, {3}, {7}, {2, 9, 1, 30}, {13, 13}}) {
    for (gannet::ThreadPool* tp : {static_cast<gannet::ThreadPool*>(nullptr), &pool}) {
      SeqState st = f.model.new_state(128);
      std::vector<float> got(size_t(n * V));
      int64_t at = 0;
      for (size_t c = 0; at < n; ++c) {
        const int64_t len = std::min(n - at, chunks[c % chunks.size()]);
        f.model.forward(st, p.data() + at, len, got.data() + at * V, tp);
        at += len;
      }
      EXPECT_EQ(0, std::memcmp(one.data(), got.data(), one.size() * 4))
          << "chunks of " << chunks[0] << (chunks.size() > 1 ? ".." : "") << (tp ? " on 2 threads" : "");
    }
  }
}

}  // namespace

namespace {

// --act-quant fp8 (ModelConfig::exact_activations): every FP8/FP4 product's activation
// rows go through FQ8 / 32 first (wo_a, the bf16 and f32 products excepted). The golden
// package's README measured the spec's exact mode on this prompt: logits up to 1.34 from
// the reference (30 of 41 equal top-1). This must land there too, and stay chunk-exact.
TEST(ModelDeepseekV41, ActivationQuantization) {
  auto& f = fx();
  gannet::io::ModelConfig cfg = f.cfg;
  cfg.exact_activations = true;
  DeepseekV41 m(cfg, f.ckpt);
  const auto p = f.prompt();
  const int64_t n = int64_t(p.size()), V = m.config().vocab_size;
  std::vector<float> a(size_t(n * V)), b(size_t(n * V));
  SeqState st = m.new_state(128);
  m.forward(st, p.data(), n, a.data(), nullptr);
  double worst = 0;
  int same_top1 = 0;
  for (int64_t i = 0; i < n; ++i) {
    const auto& ref = f.golden["logits_float32"][size_t(i)];
    for (int64_t v = 0; v < V; ++v) worst = std::max(worst, std::fabs(double(a[size_t(i * V + v)]) - ref[size_t(v)].get<double>()));
    same_top1 += argmax(a.data() + i * V, V) == f.golden["top1_float32"][size_t(i)].get<int64_t>();
  }
  std::printf("act-quant fp8: max |logit - reference| %.3g, %d of %lld equal top-1\n", worst, same_top1, (long long)n);
  EXPECT_GT(worst, 1.30);
  EXPECT_LT(worst, 1.38);
  EXPECT_GE(same_top1, 27);
  EXPECT_LE(same_top1, 33);
  SeqState st2 = m.new_state(128);
  for (int64_t at = 0; at < n; at += 5) m.forward(st2, p.data() + at, std::min<int64_t>(5, n - at), b.data() + at * V, nullptr);
  EXPECT_EQ(0, std::memcmp(a.data(), b.data(), a.size() * 4));
}

}  // namespace

namespace {

// Decoder bounded replay: the layers after the last KV source run on the positions from
// replay_from on only. The KV sources' state (entries, index keys, their rings and open
// groups) is what the full prefill writes; the kept rows and every later decode step equal
// the computation over all rows with only the replay visibility rule; skipped rows are NaN.
TEST(ModelDeepseekV41, BoundedReplay) {
  auto& f = fx();
  auto p = f.prompt();
  for (int i = 0; i < 6; ++i) p.push_back(int32_t((29 * i + 3) % 512));
  const int64_t n = int64_t(p.size()), V = f.model.config().vocab_size, from = 42;
  DeepseekV41 skip(f.cfg, f.ckpt), mask(f.cfg, f.ckpt);
  mask.set_replay_mask_only(true);
  SeqState a = skip.new_state(128), b = mask.new_state(128), full = skip.new_state(128);
  std::vector<float> la(size_t(n * V)), lb(size_t(n * V)), lf(size_t(n * V));
  skip.forward(a, p.data(), n, la.data(), nullptr, from);
  mask.forward(b, p.data(), n, lb.data(), nullptr, from);
  skip.forward(full, p.data(), n, lf.data(), nullptr, 0);
  for (int64_t i = 0; i < n; ++i) {
    if (i < from) {
      EXPECT_TRUE(std::isnan(la[size_t(i * V)])) << "row " << i;
    } else {
      EXPECT_EQ(0, std::memcmp(la.data() + i * V, lb.data() + i * V, size_t(V) * 4)) << "kept row " << i;
    }
  }
  // The decoder changes the last rows' logits (its windows lost positions before 42)...
  EXPECT_NE(0, std::memcmp(la.data() + (n - 1) * V, lf.data() + (n - 1) * V, size_t(V) * 4));
  // ...but not the KV sources' caches: same entries and index keys, same state of every
  // layer up to the last KV source.
  for (size_t s = 0; s < a.arena_mem.size(); ++s) EXPECT_EQ(a.arena_mem[s], full.arena_mem[s]) << "source " << s;
  const auto lay = gannet::model::deepseek_v41::make_cache_layout(skip.config());
  const int64_t upto = lay.window_off[size_t(skip.last_kv_source() + 1)];
  EXPECT_EQ(0, std::memcmp(a.state.data(), full.state.data(), size_t(upto)));
  EXPECT_EQ(0, std::memcmp(a.state.data() + lay.history_off, full.state.data() + lay.history_off, 8));
  // Decode steps after the prompt keep the rule and agree between the two modes.
  for (int step = 0; step < 4; ++step) {
    const int32_t t = int32_t(100 + step);
    std::vector<float> x(static_cast<size_t>(V)), y(static_cast<size_t>(V));
    skip.forward(a, &t, 1, x.data(), nullptr, from);
    mask.forward(b, &t, 1, y.data(), nullptr, from);
    EXPECT_EQ(0, std::memcmp(x.data(), y.data(), size_t(V) * 4)) << "decode step " << step;
  }
}

}  // namespace

// The indexer's scores (index_scores.h keeps eight entries' sums in a register) against
// the plain loop the spec states: the same bits for every entry count, visible count and
// head shape, including NaN-free negative dots (relu) and the -inf tail.
TEST(ModelDeepseekV41, IndexScoresEqualThePlainLoop) {
  std::mt19937 g(11);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  for (int64_t E : {0, 1, 7, 8, 9, 16, 23, 64, 131})
    for (int64_t nih : {1, 3, 8})
      for (int64_t idh : {1, 16, 64}) {
        std::vector<float> q(static_cast<size_t>(nih * idh)), w(static_cast<size_t>(nih)), keys_t(static_cast<size_t>(idh * E));
        for (float& x : q) x = normal(g);
        for (float& x : w) x = normal(g);
        for (float& x : keys_t) x = normal(g);
        for (int64_t visible : {int64_t(0), E / 2, E - 1, E, E + 3}) {
          std::vector<float> dots(size_t(E) + 1), sc(size_t(E) + 1, 7.0f), want(size_t(E) + 1, 7.0f);
          gannet::model::deepseek_v41::index_scores(q.data(), w.data(), nih, idh, keys_t.data(), E, visible, 0.125f,
                                                    0.35f, dots.data(), sc.data());
          const int64_t nv = std::clamp<int64_t>(visible, 0, E);
          for (int64_t e = 0; e < E; ++e) {
            if (e >= nv) {
              want[size_t(e)] = -std::numeric_limits<float>::infinity();
              continue;
            }
            float s = 0.0f;
            for (int64_t h = 0; h < nih; ++h) {
              float d = 0.0f;
              for (int64_t c = 0; c < idh; ++c) d += q[size_t(h * idh + c)] * keys_t[size_t(c * E + e)];
              s += (std::max(d, 0.0f) * 0.125f) * (w[size_t(h)] * 0.35f);
            }
            want[size_t(e)] = s;
          }
          ASSERT_EQ(std::memcmp(sc.data(), want.data(), sc.size() * sizeof(float)), 0)
              << "E " << E << " nih " << nih << " idh " << idh << " visible " << visible;
          // The same entries scored in ranges of the transposed keys (a decode row's entries
          // split over threads), each range its own visible count.
          for (int64_t split : {int64_t(8), int64_t(3)}) {
            std::vector<float> part(size_t(E) + 1, 7.0f);
            for (int64_t e0 = 0; e0 < E; e0 += split) {
              const int64_t e1 = std::min(E, e0 + split);
              gannet::model::deepseek_v41::index_scores(q.data(), w.data(), nih, idh, keys_t.data() + e0, E, e1 - e0,
                                                        visible - e0, 0.125f, 0.35f, dots.data() + e0,
                                                        part.data() + e0);
            }
            ASSERT_EQ(std::memcmp(part.data(), want.data(), part.size() * sizeof(float)), 0)
                << "ranges of " << split << ", E " << E << " nih " << nih << " idh " << idh << " visible " << visible;
          }
        }
      }
}

// mHC's collapse and expand run over blocks of channels; each channel must still take the
// plain per-channel loop's operations in its order (x streams, hc of them, of d channels).
TEST(ModelDeepseekV41, MhcCollapseAndExpandEqualThePlainLoop) {
  std::mt19937 g(12);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  for (int64_t hc : {1, 2, 4})
    for (int64_t d : {1, 63, 64, 65, 200}) {
      const int64_t n = 3;
      std::vector<float> X(size_t(n * hc * d)), y(size_t(n * d)), pre(size_t(n * hc)), post(size_t(n * hc)),
          comb(size_t(n * hc * hc));
      for (auto* v : {&X, &y, &pre, &post, &comb})
        for (float& x : *v) x = normal(g);
      std::vector<float> col(size_t(n * d)), want(size_t(n * d));
      gannet::model::deepseek_v41::mhc_collapse(X.data(), n, hc, d, pre.data(), col.data());
      for (int64_t t = 0; t < n; ++t)
        for (int64_t i = 0; i < d; ++i) {
          float acc = pre[size_t(t * hc)] * X[size_t(t * hc * d + i)];
          for (int64_t k = 1; k < hc; ++k) acc += pre[size_t(t * hc + k)] * X[size_t(t * hc * d + k * d + i)];
          want[size_t(t * d + i)] = acc;
        }
      ASSERT_EQ(std::memcmp(col.data(), want.data(), col.size() * sizeof(float)), 0) << "collapse hc " << hc << " d " << d;
      std::vector<float> Xw = X;
      for (int64_t t = 0; t < n; ++t)
        for (int64_t i = 0; i < d; ++i)
          for (int64_t k = 0; k < hc; ++k) {
            const float* C = comb.data() + t * hc * hc;
            float mixed = C[k] * X[size_t(t * hc * d + i)];
            for (int64_t j = 1; j < hc; ++j) mixed += C[j * hc + k] * X[size_t(t * hc * d + j * d + i)];
            Xw[size_t(t * hc * d + k * d + i)] = post[size_t(t * hc + k)] * y[size_t(t * d + i)] + mixed;
          }
      gannet::model::deepseek_v41::mhc_expand(X.data(), n, hc, d, y.data(), post.data(), comb.data());
      ASSERT_EQ(std::memcmp(X.data(), Xw.data(), X.size() * sizeof(float)), 0) << "expand hc " << hc << " d " << d;
    }
}
