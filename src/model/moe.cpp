#include "model/moe.h"

#include <chrono>

#include <algorithm>
#include <cmath>
#include <cstring>

#include "core/dtype.h"
#include "core/error.h"
#include "core/thread_pool.h"
#include "kernels/cpu/activations.h"
#include "kernels/cpu/exp.h"
#include "kernels/cpu/lane_gemm.h"
#include "kernels/cpu/fake_quant.h"
#include "kernels/cpu/log.h"
#include "kernels/cpu/packed_matmul.h"
#include "kernels/cpu/softmax.h"
#include "model/expert_parallel.h"

namespace gannet::model {

namespace {

// Output columns per work item: small enough that a decode token's few experts still give
// every thread many items, large enough that an item amortises its call.
constexpr int64_t kTile = 32;
// An expert's products run as lane-split GEMMs (lane_gemm.h) on its packed input from
// packed_lane_min_rows on, as matmul_packed does: prefill's experts see tens of rows each,
// where the 12-row lane tiles beat the column kernels (the same bits either way). No ISA's
// crossover is below this bound, which sizes the packed inputs.
constexpr int64_t kLaneMinRows = 16;
// Lane-packed floats of an expert input of `rows` rows and k columns, for any ISA's tile
// (at most 12 rows, k rounded up to whole 16-element steps).
int64_t lane_floats_bound(int64_t rows, int64_t k) { return (rows + 11) / 12 * 12 * ((k + 15) / 16 * 16); }
// Streaming one weight row costs about as much as this many token rows of FMAs (decode is
// bound by weight bytes, prefill by arithmetic): the cost model that balances the threads.
constexpr double kWeightRowCost = 8.0;

template <typename T>
void grow(std::vector<T>& v, int64_t n) {
  if (int64_t(v.size()) < n) v.resize(size_t(n));
}

std::string shape(const kernels::PackedWeight& w) {
  return detail::concat("[", w.n, ", ", w.k, "]");
}

void check_expert(const MoeExpert& x, const std::string& name, int64_t hidden, int64_t inter) {
  if (!x.w1.data || !x.w3.data || !x.w2.data) fail("MoE ", name, ": missing weight data");
  if (x.w1.n != inter || x.w1.k != hidden)
    fail("MoE ", name, ".w1 has shape ", shape(x.w1), ", expected [", inter, ", ", hidden, "]");
  if (x.w3.n != inter || x.w3.k != hidden)
    fail("MoE ", name, ".w3 has shape ", shape(x.w3), ", expected [", inter, ", ", hidden, "]");
  if (x.w2.n != hidden || x.w2.k != inter)
    fail("MoE ", name, ".w2 has shape ", shape(x.w2), ", expected [", hidden, ", ", inter, "]");
}

}  // namespace

const char* moe_scoring_name(MoeScoring s) {
  switch (s) {
    case MoeScoring::kSqrtSoftplus: return "sqrtsoftplus";
    case MoeScoring::kSoftmax: return "softmax";
    case MoeScoring::kSigmoid: return "sigmoid";
  }
  return "?";
}

MoeLayer::MoeLayer(const MoeConfig& cfg, MoeWeights weights) : cfg_(cfg), w_(std::move(weights)) { check_config(); }

MoeLayer::MoeLayer(const MoeConfig& cfg, MoeWeights weights, ExpertParallel* ep, int64_t ep_layer)
    : cfg_(cfg), w_(std::move(weights)), ep_(ep), ep_layer_(ep_layer) {
  GANNET_CHECK(ep && ep_layer >= 0 && ep_layer < ep->n_layers(), "expert-parallel layer ", ep_layer);
  if (!w_.experts.empty()) fail("MoE: an expert-parallel layer takes its routed experts from the rank's slots");
  check_config();
}

void MoeLayer::check_config() {

  const int64_t E = cfg_.n_experts, H = cfg_.hidden;
  if (H <= 0) fail("MoE hidden must be > 0, got ", H);
  if (E <= 0) fail("MoE n_experts must be > 0, got ", E);
  if (cfg_.top_k < 1 || cfg_.top_k > E) fail("MoE top_k must be in [1, n_experts = ", E, "], got ", cfg_.top_k);
  if (cfg_.n_shared < 0) fail("MoE n_shared must be >= 0, got ", cfg_.n_shared);
  if (!(cfg_.gate_temp > 0.0f) || !std::isfinite(cfg_.gate_temp))
    fail("MoE gate_temp must be finite and > 0, got ", cfg_.gate_temp);
  if (!std::isfinite(cfg_.routed_scaling_factor))
    fail("MoE routed_scaling_factor must be finite, got ", cfg_.routed_scaling_factor);
  if (!(cfg_.swiglu_limit >= 0.0f)) fail("MoE swiglu_limit must be >= 0 (0: no clamp), got ", cfg_.swiglu_limit);
  limit_ = cfg_.swiglu_limit == 0.0f ? INFINITY : cfg_.swiglu_limit;

  if (!w_.router.data) fail("MoE router: missing weight data");
  if (w_.router.n != E || w_.router.k != H)
    fail("MoE router has shape ", shape(w_.router), ", expected [n_experts = ", E, ", hidden = ", H, "]");
  if (!w_.selection_bias.empty() && int64_t(w_.selection_bias.size()) != E)
    fail("MoE selection_bias has ", w_.selection_bias.size(), " entries, expected n_experts = ", E);
  if (!w_.selection_bias_alt.empty() && int64_t(w_.selection_bias_alt.size()) != E)
    fail("MoE selection_bias_alt has ", w_.selection_bias_alt.size(), " entries, expected n_experts = ", E);
  if (!ep_ && int64_t(w_.experts.size()) != E)
    fail("MoE experts: ", w_.experts.size(), " given, config n_experts = ", E);
  if (ep_ && ep_->placement(ep_layer_).n_experts != E)
    fail("MoE: the expert placement has ", ep_->placement(ep_layer_).n_experts, " experts, config n_experts = ", E);
  if (int64_t(w_.shared.size()) != cfg_.n_shared)
    fail("MoE shared experts: ", w_.shared.size(), " given, config n_shared = ", cfg_.n_shared);
  if (ep_) {
    inter_ = ep_->inter(ep_layer_);
    for (int64_t s = 0; s < ep_->slots(); ++s) {
      const MoeExpert& w = ep_->slot_weights(ep_layer_, s);
      if (w.w1.data) check_expert(w, detail::concat("experts (slot ", s, ")"), H, inter_);
    }
  } else {
    inter_ = w_.experts[0].w1.n;
    if (inter_ <= 0) fail("MoE experts[0].w1 has shape ", shape(w_.experts[0].w1), ": inter must be > 0");
    for (int64_t e = 0; e < E; ++e) check_expert(w_.experts[size_t(e)], detail::concat("experts[", e, "]"), H, inter_);
  }
  if (cfg_.n_shared > 0) {
    shared_inter_ = w_.shared[0].w1.n;
    if (shared_inter_ <= 0) fail("MoE shared[0].w1 has shape ", shape(w_.shared[0].w1), ": inter must be > 0");
    for (int64_t s = 0; s < cfg_.n_shared; ++s)
      check_expert(w_.shared[size_t(s)], detail::concat("shared[", s, "]"), H, shared_inter_);
  }
}

void MoeWorkspace::reserve(const MoeLayer& layer, int64_t max_tokens) {
  const MoeConfig& c = layer.config();
  const int64_t T = max_tokens, E = c.n_experts, K = c.top_k, S = c.n_shared, H = c.hidden;
  grow(logits_, T * E);
  grow(select_, E);
  grow(chosen_, E);
  grow(top_, K);
  grow(ids_, T * K);
  grow(weights_, T * K);
  grow(rows_, T * K);
  grow(count_, E);
  grow(row_weight_, T * K);
  grow(xg_, T * K * H);
  if (layer.config().act_quant_block > 0) grow(xq_, T * H);
  grow(gate_, T * K * layer.inter() + S * T * layer.shared_inter());
  grow(up_, T * K * layer.inter() + S * T * layer.shared_inter());
  grow(out_, T * (K + S) * H);
  grow(groups_, E + S);
  grow(lane_groups_, E + S);
  // Lane-packed inputs: every row of both phases' widest input, plus a partial tile per
  // group that has one (only groups of kLaneMinRows rows or more are packed).
  const int64_t kmax = std::max({H, layer.inter(), layer.shared_inter()});
  const int64_t group_rows = T * K + S * T, packed_groups = std::min(E + S, group_rows / kLaneMinRows);
  grow(xp_, lane_floats_bound(group_rows + 12 * packed_groups, kmax));
  // Every group active: the larger of the two phases' item counts.
  const int64_t tiles_gu = E * ((layer.inter() + kTile - 1) / kTile) + S * ((layer.shared_inter() + kTile - 1) / kTile);
  const int64_t tiles_down = (E + S) * ((H + kTile - 1) / kTile);
  const size_t items = size_t(std::max(tiles_gu, tiles_down));
  if (items_.capacity() < items) items_.reserve(items);
  if (cost_.capacity() < items + 1) cost_.reserve(items + 1);
}

uint64_t MoeWorkspace::capacity_bytes() const {
  auto b = [](const auto& v) { return uint64_t(v.capacity()) * sizeof(v[0]); };
  return b(logits_) + b(select_) + b(chosen_) + b(top_) + b(ids_) + b(weights_) + b(rows_) + b(count_) +
         b(row_weight_) + b(xg_) + b(xq_) + b(gate_) + b(up_) + b(out_) + b(xp_) + b(lane_groups_) + b(groups_) +
         b(items_) + b(cost_);
}

void MoeLayer::route_isa(Isa isa, const float* x, int64_t n_tokens, MoeWorkspace& ws, ThreadPool* pool,
                         const int32_t* forced_ids, const uint8_t* alt) const {
  const int64_t T = n_tokens, E = cfg_.n_experts, K = cfg_.top_k;
  GANNET_CHECK(T >= 0);
  ws.reserve(*this, T);
  float* logits = ws.logits_.data();  // [T, E]
  kernels::matmul_packed_isa(isa, x, T, w_.router, logits, pool);
  const float* bias0 = w_.selection_bias.empty() ? nullptr : w_.selection_bias.data();
  const float* bias_alt = w_.selection_bias_alt.empty() ? nullptr : w_.selection_bias_alt.data();
  GANNET_CHECK(!alt || bias_alt, "alternative selection rows without an alternative bias");
  float* sel = ws.select_.data();
  uint8_t* chosen = ws.chosen_.data();
  int32_t* top = ws.top_.data();
  std::fill(chosen, chosen + E, uint8_t(0));
  // Per token: O(E * top_k) at worst, small next to the experts' work.
  for (int64_t t = 0; t < T; ++t) {
    float* s = logits + t * E;  // logits, then scores in place
    if (cfg_.gate_temp != 1.0f)  // dividing by 1 would not change a bit
      for (int64_t e = 0; e < E; ++e) s[e] = s[e] / cfg_.gate_temp;
    switch (cfg_.scoring) {
      case MoeScoring::kSqrtSoftplus:
        for (int64_t e = 0; e < E; ++e) s[e] = std::sqrt(kernels::softplus_f32(s[e]));
        break;
      case MoeScoring::kSoftmax: kernels::softmax_isa(isa, s, E); break;
      case MoeScoring::kSigmoid:
        for (int64_t e = 0; e < E; ++e) s[e] = 1.0f / (1.0f + kernels::exp_f32(-s[e]));
        break;
    }
    const float* bias = alt && alt[t] ? bias_alt : bias0;
    for (int64_t e = 0; e < E; ++e) sel[e] = bias ? s[e] + bias[e] : s[e];
    // Insertion into top[0..n) kept in decreasing value: a later (higher) id moves ahead
    // only of strictly smaller values and enters a full list only when strictly larger
    // than its last, so of equal values the lower id wins.
    int64_t n = 0;
    if (forced_ids) {
      for (int64_t i = 0; i < K; ++i) {
        const int32_t e = forced_ids[t * K + i];
        GANNET_CHECK(e >= 0 && e < E, "forced expert id ", e, " of ", E);
        top[i] = e;
      }
    } else {
      for (int64_t e = 0; e < E; ++e) {
        const float v = sel[e];
        if (n == K && !(v > sel[top[K - 1]])) continue;
        int64_t p = n < K ? n++ : K - 1;
        for (; p > 0 && sel[top[p - 1]] < v; --p) top[p] = top[p - 1];
        top[p] = int32_t(e);
      }
    }
    for (int64_t i = 0; i < K; ++i) chosen[top[i]] = 1;
    int32_t* ids = ws.ids_.data() + t * K;
    float* wt = ws.weights_.data() + t * K;
    for (int64_t e = 0, i = 0; e < E; ++e)
      if (chosen[e]) {
        chosen[e] = 0;
        ids[i] = int32_t(e);
        wt[i++] = s[e];
      }
    if (cfg_.norm_topk_prob && K > 1) {
      float sum = wt[0];
      for (int64_t i = 1; i < K; ++i) sum = sum + wt[i];
      const float denom = sum + 1e-20f;
      for (int64_t i = 0; i < K; ++i) wt[i] = wt[i] / denom;
    }
    for (int64_t i = 0; i < K; ++i) wt[i] = wt[i] * cfg_.routed_scaling_factor;
  }
}

// moe.h step 6 for tokens [0, T): y[t] = routed[rows[t K]] + ... + routed[rows[t K + K - 1]]
// + shared[0][t] + shared[1][t] + ..., shared expert s's rows starting at shared + s T H.
void MoeLayer::combine(Isa isa, const float* routed, const int64_t* rows, const float* shared, int64_t T, float* y,
                       ThreadPool* pool) const {
  const int64_t K = cfg_.top_k, S = cfg_.n_shared, H = cfg_.hidden;
  auto work = [&](int64_t b, int64_t e, int) {
    for (int64_t t = b; t < e; ++t) {
      float* yt = y + t * H;
      const int64_t* r = rows + t * K;
      std::memcpy(yt, routed + r[0] * H, size_t(H) * sizeof(float));
      for (int64_t i = 1; i < K; ++i) kernels::add_isa(isa, yt, routed + r[i] * H, yt, H);
      for (int64_t s = 0; s < S; ++s) kernels::add_isa(isa, yt, shared + (s * T + t) * H, yt, H);
    }
  };
  if (!pool || T * H * (K + S) < (int64_t(1) << 16)) work(0, T, 0);
  else pool->parallel_for(T, work, 1);
}

// One phase: the gate/up projections with the activation (down = false) or the down
// projections (down = true), for every active group, as one parallel loop.
void MoeLayer::run_items(Isa isa, MoeWorkspace& ws, ThreadPool* pool, bool down) const {
  const int64_t H = cfg_.hidden;
  ws.items_.clear();
  ws.cost_.clear();
  ws.cost_.push_back(0.0);
  for (size_t g = 0; g < ws.groups_.size(); ++g) {
    const MoeWorkspace::Group& G = ws.groups_[g];
    if (G.rows == 0) continue;
    const int64_t cols = down ? H : G.w->w1.n, k_in = down ? G.w->w2.k : 2 * H;
    for (int64_t c0 = 0; c0 < cols; c0 += kTile) {
      const int64_t c1 = std::min(cols, c0 + kTile);
      ws.items_.push_back({int32_t(g), int32_t(c0), int32_t(c1)});
      ws.cost_.push_back(ws.cost_.back() + double(c1 - c0) * double(k_in) * (double(G.rows) + kWeightRowCost));
    }
  }
  const int64_t n_items = int64_t(ws.items_.size());
  const int nth = pool ? pool->size() : 1;
  // Groups with many rows: their input packed once for the lane GEMM, each item then
  // computes its columns from it.
  int64_t xp_floats = 0;
  std::vector<int32_t>& lane_groups = ws.lane_groups_;
  lane_groups.clear();
  for (size_t g = 0; g < ws.groups_.size(); ++g) {
    MoeWorkspace::Group& G = ws.groups_[g];
    G.xp_off = -1;
    if (!kernels::lane_gemm_isa(isa) || G.rows < kernels::packed_lane_min_rows(isa, down ? G.w->w2 : G.w->w1))
      continue;
    const int64_t k = down ? G.w->w2.k : H;
    G.xp_off = xp_floats;
    xp_floats += kernels::lane_x_floats_isa(isa, kernels::LaneOrder::kF32, G.rows, k);
    lane_groups.push_back(int32_t(g));
  }
  if (!lane_groups.empty()) {
    grow(ws.xp_, xp_floats);
    float* xp = ws.xp_.data();
    auto pack = [&](int64_t b, int64_t e) {
      for (int64_t i = b; i < e; ++i) {
        const MoeWorkspace::Group& G = ws.groups_[size_t(lane_groups[size_t(i)])];
        const float* in = down ? ws.gate_.data() + G.hid_off : G.x;
        kernels::lane_pack_x_isa(isa, kernels::LaneOrder::kF32, in, G.rows, down ? G.w->w2.k : H, xp + G.xp_off);
      }
    };
    const int64_t ng = int64_t(lane_groups.size());
    if (nth > 1 && ng > 1) pool->parallel_for(ng, [&](int64_t b, int64_t e, int) { pack(b, e); }, 1);
    else pack(0, ng);
  }
  // y columns [c0, c1) of the group's rows times w, by the lane GEMM where packed.
  auto product = [&](const MoeWorkspace::Group& G, const float* in, const kernels::PackedWeight& w, int64_t c0,
                     int64_t c1, float* y, int64_t ldy) {
    if (G.xp_off >= 0) {
      kernels::LaneWeight lw;
      lw.packed = &w;
      kernels::lane_gemm_cols_isa(isa, kernels::LaneOrder::kF32, ws.xp_.data() + G.xp_off, G.rows, w.k, lw, c0, c1, y,
                                  ldy);
    } else {
      kernels::matmul_packed_cols_isa(isa, in, G.rows, w, c0, c1, y, ldy);
    }
  };
  float* gate = ws.gate_.data();
  float* up = ws.up_.data();
  const float L = limit_;
  const bool clamp = L != INFINITY, bf16 = cfg_.round_hidden_bf16;

  auto item = [&](int64_t j) {
    const MoeWorkspace::Item& it = ws.items_[size_t(j)];
    const MoeWorkspace::Group& G = ws.groups_[size_t(it.group)];
    const int64_t c0 = it.c0, c1 = it.c1;
    if (down) {
      // out[rows, hidden] columns [c0, c1) = h · w2ᵀ
      product(G, gate + G.hid_off, G.w->w2, c0, c1, ws.out_.data() + G.out_row * H, H);
      return;
    }
    const int64_t inter = G.w->w1.n, n = c1 - c0;
    float* gp = gate + G.hid_off;  // [rows, inter]
    float* upp = up + G.hid_off;   // [rows, inter]
    product(G, G.x, G.w->w1, c0, c1, gp, inter);
    product(G, G.x, G.w->w3, c0, c1, upp, inter);
    for (int64_t r = 0; r < G.rows; ++r) {
      float* g = gp + r * inter + c0;
      float* u = upp + r * inter + c0;
      if (clamp)
        for (int64_t c = 0; c < n; ++c) {
          u[c] = u[c] > L ? L : u[c] < -L ? -L : u[c];
          g[c] = g[c] > L ? L : g[c];
        }
      kernels::silu_mul_isa(isa, g, u, g, n);
      if (G.routed) {
        const float w = ws.row_weight_[size_t(G.out_row + r)];
        for (int64_t c = 0; c < n; ++c) g[c] = g[c] * w;
      }
      if (bf16)
        for (int64_t c = 0; c < n; ++c) g[c] = bf16_to_f32(f32_to_bf16(g[c]));
    }
  };

  if (nth == 1 || n_items < 2) {
    for (int64_t j = 0; j < n_items; ++j) item(j);
    return;
  }
  // Contiguous item ranges of about equal estimated cost: item j goes to the thread whose
  // share of the total holds the middle of its cost (monotone in j, so each thread finds
  // its range by bisection).
  const double total = ws.cost_.back();
  auto owner = [&](int64_t j) {
    const double mid = 0.5 * (ws.cost_[size_t(j)] + ws.cost_[size_t(j + 1)]);
    return std::min<int64_t>(nth - 1, int64_t(mid * nth / total));
  };
  auto first_item_of = [&](int64_t th) {
    int64_t lo = 0, hi = n_items;
    while (lo < hi) {
      const int64_t m = (lo + hi) / 2;
      if (owner(m) < th) lo = m + 1;
      else hi = m;
    }
    return lo;
  };
  pool->parallel_for(
      nth,
      [&](int64_t b, int64_t e, int) {
        for (int64_t j = first_item_of(b), end = first_item_of(e); j < end; ++j) item(j);
      },
      1);
}

void MoeLayer::forward_isa(Isa isa, const float* x, int64_t n_tokens, float* y, MoeWorkspace& ws, ThreadPool* pool,
                           const int32_t* forced_ids, const uint8_t* alt) const {
  const int64_t T = n_tokens, E = cfg_.n_experts, K = cfg_.top_k, S = cfg_.n_shared, H = cfg_.hidden;
  GANNET_CHECK(T >= 0);
  if (ep_) return forward_ep(isa, x, T, y, ws, pool, forced_ids, alt);
  if (T == 0) return;
  GANNET_CHECK(x + T * H <= y || y + T * H <= x, "MoE output must not alias its input");
  route_isa(isa, x, T, ws, pool, forced_ids, alt);  // also reserves ws for T tokens

  // Group the (token, expert) pairs by expert, tokens in increasing order within each.
  int64_t* count = ws.count_.data();
  std::fill(count, count + E, int64_t(0));
  const int32_t* ids = ws.ids_.data();
  for (int64_t i = 0; i < T * K; ++i) ++count[ids[i]];
  ws.groups_.resize(size_t(E + S));
  for (int64_t e = 0, row = 0; e < E; ++e) {
    MoeWorkspace::Group& G = ws.groups_[size_t(e)];
    G = {&w_.experts[size_t(e)], ws.xg_.data() + row * H, count[e], row, row * inter_, true};
    count[e] = row;  // next free row
    row += G.rows;
  }
  for (int64_t t = 0; t < T; ++t)
    for (int64_t i = 0; i < K; ++i) {
      const int64_t r = count[ids[t * K + i]]++;
      ws.rows_[size_t(t * K + i)] = r;
      ws.row_weight_[size_t(r)] = ws.weights_[size_t(t * K + i)];
      std::memcpy(ws.xg_.data() + r * H, x + t * H, size_t(H) * sizeof(float));
    }
  const int64_t aq = cfg_.act_quant_block;
  const float* xs = x;  // what the shared experts read
  if (aq > 0) {
    for (int64_t r = 0; r < T * K; ++r) kernels::fake_quant_fp8(ws.xg_.data() + r * H, H, aq, true);
    std::memcpy(ws.xq_.data(), x, size_t(T * H) * sizeof(float));
    for (int64_t t = 0; t < T; ++t) kernels::fake_quant_fp8(ws.xq_.data() + t * H, H, aq, true);
    xs = ws.xq_.data();
  }
  for (int64_t s = 0; s < S; ++s)  // every token, read from x in place (or its quantized copy)
    ws.groups_[size_t(E + s)] = {&w_.shared[size_t(s)], xs, T, T * K + s * T, T * K * inter_ + s * T * shared_inter_,
                                 false};

  run_items(isa, ws, pool, false);
  if (aq > 0) {
    for (int64_t g = 0; g < E + S; ++g) {
      const MoeWorkspace::Group& G = ws.groups_[size_t(g)];
      const int64_t inter = G.w->w1.n;
      for (int64_t r = 0; r < G.rows; ++r) kernels::fake_quant_fp8(ws.gate_.data() + G.hid_off + r * inter, inter, aq, true);
    }
  }
  run_items(isa, ws, pool, true);

  // Combine in the fixed order of moe.h step 6.
  combine(isa, ws.out_.data(), ws.rows_.data(), ws.out_.data() + T * K * H, T, y, pool);
}

// Expert parallel (expert_parallel.h). A row in transit is [slot (int32 bits), routing
// weight, x[hidden]]; results come back as [hidden] in the order they were sent.
void MoeLayer::forward_ep(Isa isa, const float* x, int64_t n_tokens, float* y, MoeWorkspace& ws, ThreadPool* pool,
                          const int32_t* forced_ids, const uint8_t* alt) const {
  const int64_t T = n_tokens, E = cfg_.n_experts, K = cfg_.top_k, S = cfg_.n_shared, H = cfg_.hidden;
  ExpertParallel& ep = *ep_;
  Collective& comm = ep.comm();
  const ExpertPlacement& place = ep.placement(ep_layer_);
  const int P = comm.size(), me = comm.rank();
  const int64_t slots = place.slots, W = H + 2;
  ExpertParallelStats& st = ep.stats();
  if (T > 0) {
    GANNET_CHECK(x + T * H <= y || y + T * H <= x, "MoE output must not alias its input");
    route_isa(isa, x, T, ws, pool, forced_ids, alt);
    ep.count_load(ep_layer_, ws.ids_.data(), T * K);
  }
  // Destinations: the occurrences of each expert in this batch take its replicas in turn,
  // each rank starting at its own offset (any replica gives the same bits).
  grow(ws.dest_, T * K);
  grow(ws.dest_row_, T * K);
  grow(ws.occ_, E);
  for (auto* v : {&ws.send_n_, &ws.recv_n_, &ws.send_b_, &ws.recv_b_}) v->assign(size_t(P), 0);
  std::fill_n(ws.occ_.begin(), E, int64_t(0));
  const int32_t* ids = ws.ids_.data();
  for (int64_t i = 0; i < T * K; ++i) {
    const auto& reps = place.replicas[size_t(ids[i])];
    const int32_t g = reps[size_t((ws.occ_[size_t(ids[i])]++ + me) % int64_t(reps.size()))];
    ws.dest_[size_t(i)] = g;  // global slot for now
    ++ws.send_n_[size_t(place.rank_of(g))];
  }
  std::vector<int64_t>& off = ws.send_off_;  // next free row of each destination's block
  off.assign(size_t(P), 0);
  for (int p = 1; p < P; ++p) off[size_t(p)] = off[size_t(p - 1)] + ws.send_n_[size_t(p - 1)];
  grow(ws.send_, T * K * W);
  for (int64_t i = 0; i < T * K; ++i) {
    const int32_t g = ws.dest_[size_t(i)];
    const int r = place.rank_of(g);
    const int64_t row = off[size_t(r)]++;
    ws.dest_row_[size_t(i)] = row;
    float* o = ws.send_.data() + row * W;
    const int32_t slot = int32_t(g % slots);
    std::memcpy(o, &slot, 4);
    o[1] = ws.weights_[size_t(i)];
    std::memcpy(o + 2, x + (i / K) * H, size_t(H) * sizeof(float));
  }
  const auto t0 = std::chrono::steady_clock::now();
  comm.all_to_all(ws.send_n_.data(), ws.recv_n_.data());
  int64_t R = 0;
  for (int p = 0; p < P; ++p) {
    ws.send_b_[size_t(p)] = ws.send_n_[size_t(p)] * W * 4;
    ws.recv_b_[size_t(p)] = ws.recv_n_[size_t(p)] * W * 4;
    R += ws.recv_n_[size_t(p)];
  }
  grow(ws.recv_, R * W);
  comm.all_to_all_v(ws.send_.data(), ws.send_b_.data(), ws.recv_.data(), ws.recv_b_.data());
  double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  st.rows_sent[size_t(ep_layer_)] += T * K;
  st.rows_computed[size_t(ep_layer_)] += R;
  st.rows_computed_since[size_t(ep_layer_)] += R;
  for (int p = 0; p < P; ++p)
    if (p != me) st.bytes_sent += uint64_t(ws.send_b_[size_t(p)]), st.bytes_received += uint64_t(ws.recv_b_[size_t(p)]);

  // The received rows grouped by slot (in received order within each), then the shared
  // experts over this rank's own tokens, exactly as the single-rank path groups them.
  grow(ws.count_, std::max<int64_t>(E, slots));
  int64_t* count = ws.count_.data();
  std::fill(count, count + slots, int64_t(0));
  for (int64_t r = 0; r < R; ++r) {
    int32_t slot;
    std::memcpy(&slot, ws.recv_.data() + r * W, 4);
    GANNET_CHECK(slot >= 0 && slot < slots && ep.slot_weights(ep_layer_, slot).w1.data, "row for empty slot ", slot);
    ++count[slot];
  }
  grow(ws.xg_, R * H);
  grow(ws.row_weight_, R);
  grow(ws.recv_out_, R);
  grow(ws.gate_, R * inter_ + S * T * shared_inter_);
  grow(ws.up_, R * inter_ + S * T * shared_inter_);
  grow(ws.out_, (R + S * T) * H);
  if (cfg_.act_quant_block > 0) grow(ws.xq_, T * H);
  ws.groups_.resize(size_t(slots + S));
  for (int64_t s = 0, row = 0; s < slots; ++s) {
    MoeWorkspace::Group& G = ws.groups_[size_t(s)];
    G = {&ep.slot_weights(ep_layer_, s), ws.xg_.data() + row * H, count[s], row, row * inter_, true};
    count[s] = row;
    row += G.rows;
  }
  for (int64_t r = 0; r < R; ++r) {
    const float* in = ws.recv_.data() + r * W;
    int32_t slot;
    std::memcpy(&slot, in, 4);
    const int64_t o = count[slot]++;
    ws.recv_out_[size_t(r)] = o;
    ws.row_weight_[size_t(o)] = in[1];
    std::memcpy(ws.xg_.data() + o * H, in + 2, size_t(H) * sizeof(float));
  }
  const int64_t aq = cfg_.act_quant_block;
  const float* xs = x;
  if (aq > 0) {
    for (int64_t r = 0; r < R; ++r) kernels::fake_quant_fp8(ws.xg_.data() + r * H, H, aq, true);
    if (T > 0) {
      std::memcpy(ws.xq_.data(), x, size_t(T * H) * sizeof(float));
      for (int64_t t = 0; t < T; ++t) kernels::fake_quant_fp8(ws.xq_.data() + t * H, H, aq, true);
      xs = ws.xq_.data();
    }
  }
  for (int64_t s = 0; s < S; ++s)
    ws.groups_[size_t(slots + s)] = {&w_.shared[size_t(s)], xs, T, R + s * T, R * inter_ + s * T * shared_inter_, false};
  run_items(isa, ws, pool, false);
  if (aq > 0)
    for (const MoeWorkspace::Group& G : ws.groups_) {
      const int64_t inter = G.w->w1.n;
      for (int64_t r = 0; r < G.rows; ++r) kernels::fake_quant_fp8(ws.gate_.data() + G.hid_off + r * inter, inter, aq, true);
    }
  run_items(isa, ws, pool, true);

  // Results back to their owners, in the order the rows came.
  grow(ws.back_, R * H);
  for (int64_t r = 0; r < R; ++r)
    std::memcpy(ws.back_.data() + r * H, ws.out_.data() + ws.recv_out_[size_t(r)] * H, size_t(H) * sizeof(float));
  for (int p = 0; p < P; ++p) {
    ws.send_b_[size_t(p)] = ws.recv_n_[size_t(p)] * H * 4;
    ws.recv_b_[size_t(p)] = ws.send_n_[size_t(p)] * H * 4;
  }
  grow(ws.result_, T * K * H);
  const auto t1 = std::chrono::steady_clock::now();
  comm.all_to_all_v(ws.back_.data(), ws.send_b_.data(), ws.result_.data(), ws.recv_b_.data());
  secs += std::chrono::duration<double>(std::chrono::steady_clock::now() - t1).count();
  st.exchange_seconds[size_t(ep_layer_)] += secs;
  for (int p = 0; p < P; ++p)
    if (p != me) st.bytes_sent += uint64_t(ws.send_b_[size_t(p)]), st.bytes_received += uint64_t(ws.recv_b_[size_t(p)]);
  if (T == 0) return;

  // Combine in the fixed order of moe.h step 6.
  combine(isa, ws.result_.data(), ws.dest_row_.data(), ws.out_.data() + R * H, T, y, pool);
}

void MoeLayer::forward(const float* x, int64_t n_tokens, float* y, MoeWorkspace& ws, ThreadPool* pool,
                       const int32_t* forced_ids, const uint8_t* alt) const {
  forward_isa(active_isa(), x, n_tokens, y, ws, pool, forced_ids, alt);
}

}  // namespace gannet::model
