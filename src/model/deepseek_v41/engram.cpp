#include "model/deepseek_v41/engram.h"

#include <cmath>
#include <set>
#include <vector>

#include "core/error.h"
#include "core/numpy_random.h"
#include "kernels/cpu/fake_quant.h"
#include "kernels/cpu/packed_matmul.h"

namespace gannet::model::deepseek_v41 {

namespace {

bool is_prime(int64_t v) {
  if (v < 2) return false;
  if (v % 2 == 0) return v == 2;
  for (int64_t d = 3; d * d <= v; d += 2)
    if (v % d == 0) return false;
  return true;
}

}  // namespace

std::vector<std::vector<int64_t>> engram_primes(const io::DeepseekV41Config& c) {
  std::vector<std::vector<int64_t>> out;
  std::set<int64_t> seen;
  for (size_t li = 0; li < c.engram_layer_ids.size(); ++li) {
    std::vector<int64_t> primes;
    for (int64_t order = 0; order + 1 < c.engram_max_ngram_size; ++order) {
      int64_t cur = c.engram_vocab_size - 1;
      for (int64_t h = 0; h < c.engram_n_heads; ++h) {
        do ++cur;
        while (!is_prime(cur) || seen.count(cur));
        seen.insert(cur);
        primes.push_back(cur);
      }
    }
    out.push_back(std::move(primes));
  }
  return out;
}

EngramLayout make_engram_layout(const io::DeepseekV41Config& c, const std::vector<int64_t>& token_map) {
  EngramLayout lay;
  if (c.engram_layer_ids.empty()) return lay;
  lay.max_ngram = c.engram_max_ngram_size;
  lay.n_heads = c.engram_n_heads;
  lay.cols = (lay.max_ngram - 1) * lay.n_heads;
  GANNET_CHECK(int64_t(token_map.size()) == c.vocab_size && c.engram_pad_id < c.vocab_size, "engram token map");
  lay.pad_id = token_map[size_t(c.engram_pad_id)];
  const int64_t vocab = c.engram_compressed_vocab_size;
  const int64_t bound = std::max<int64_t>(1, (INT64_MAX / vocab) / 2);
  std::vector<std::vector<int64_t>> all_primes = engram_primes(c);
  for (size_t li = 0; li < c.engram_layer_ids.size(); ++li) {
    std::vector<int64_t> primes = std::move(all_primes[li]), offsets;
    int64_t total = 0;
    for (int64_t p : primes) {
      offsets.push_back(total);
      total += p;
    }
    if (total != c.engram_num_embeddings[li])
      fail("config.json: 'engram_num_embeddings[", li, "]' = ", c.engram_num_embeddings[li], " but layer ",
           c.engram_layer_ids[li], "'s hash layout needs ", total, " rows (primes above engram_vocab_size = ",
           c.engram_vocab_size, ")");
    NumpyPcg64 rng(uint64_t(10007 * c.engram_layer_ids[li]));
    std::vector<int64_t> mult = rng.integers(bound, lay.max_ngram);
    for (auto& m : mult) m = m * 2 + 1;
    lay.primes.push_back(std::move(primes));
    lay.offsets.push_back(std::move(offsets));
    lay.multipliers.push_back(std::move(mult));
    lay.rows.push_back(total);
  }
  return lay;
}

void engram_hash(const EngramLayout& lay, int64_t li, const int64_t* ids, int64_t avail, int64_t* out) {
  const std::vector<int64_t>& mult = lay.multipliers[size_t(li)];
  int64_t rolling = 0;
  for (int64_t s = 0; s < lay.max_ngram; ++s) {
    const int64_t tok = s < avail ? ids[s] : lay.pad_id;  // no history before position 0
    const int64_t prod = tok * mult[size_t(s)];
    rolling = s == 0 ? prod : (rolling ^ prod);
    if (s == 0) continue;
    for (int64_t h = 0; h < lay.n_heads; ++h) {
      const int64_t col = (s - 1) * lay.n_heads + h;
      out[col] = rolling % lay.primes[size_t(li)][size_t(col)] + lay.offsets[size_t(li)][size_t(col)];
    }
  }
}

void engram_apply(const io::DeepseekV41Config& c, const EngramWeights& w, const int64_t* hash, float* X, int64_t n,
                  bool act_quant, ThreadPool* pool, const uint8_t* gate_off) {
  const int64_t d = c.hidden_size, hc = c.hc_mult, edim = c.engram_head_dim;
  const int64_t cols = (c.engram_max_ngram_size - 1) * c.engram_n_heads;
  std::vector<float> rows(size_t(n * cols * edim)), kv(size_t(n * (hc + 1) * d));
  for (int64_t t = 0; t < n; ++t)
    for (int64_t j = 0; j < cols; ++j) {
      const int64_t id = hash[t * cols + j];
      GANNET_CHECK(id >= 0 && id < w.table.n, "engram row ", id, " of ", w.table.n);
      w.table.dequant_row(id, rows.data() + (t * cols + j) * edim);
    }
  if (act_quant)  // FQ8 / 32 before the FP8 product, as every FP8 GEMM of the reference
    for (int64_t t = 0; t < n; ++t) kernels::fake_quant_fp8(rows.data() + t * cols * edim, cols * edim, 32, true);
  kernels::matmul_packed(rows.data(), n, w.wkv, kv.data(), pool);
  const float eps = float(c.rms_norm_eps), inv_sqrt_d = 1.0f / std::sqrt(float(d));
  for (int64_t t = 0; t < n; ++t) {
    const float* kvt = kv.data() + t * (hc + 1) * d;
    const float* value = kvt + hc * d;
    for (int64_t k = 0; k < hc; ++k) {
      float* x = X + (t * hc + k) * d;
      const float* key = kvt + k * d;
      const float* lam = w.lambda.data() + k * d;
      double sx = 0, sk = 0, dot = 0;
      for (int64_t i = 0; i < d; ++i) {
        sx += double(x[i]) * x[i];
        sk += double(key[i]) * key[i];
        dot += double(x[i] * lam[i]) * key[i];
      }
      const float rstd = (1.0f / std::sqrt(float(sx / double(d)) + eps)) * (1.0f / std::sqrt(float(sk / double(d)) + eps));
      const float dv = float(dot) * rstd * inv_sqrt_d;
      const float mag = std::sqrt(std::max(std::fabs(dv), 1e-6f));
      const float gate = gate_off && gate_off[t] ? 0.0f : 1.0f / (1.0f + std::exp(-std::copysign(mag, dv)));
      for (int64_t i = 0; i < d; ++i) x[i] = x[i] + gate * value[i];
    }
  }
}

}  // namespace gannet::model::deepseek_v41
