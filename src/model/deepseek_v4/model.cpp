#include "model/deepseek_v4/model.h"
#include "model/deepseek_v4/tensor_plan.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <set>
#include <sstream>

#include "core/error.h"
#include "kernels/cpu/activations.h"
#include "kernels/cpu/fake_quant.h"
#include "kernels/cpu/matmul.h"
#include "kernels/cpu/packed_matmul.h"
#include "kernels/cpu/parallel_grain.h"
#include "kernels/cpu/rmsnorm.h"
#include "model/deepseek_v41/mhc.h"
#include "model/deepseek_v41/chunk_tasks.h"
#include "model/deepseek_v41/index_scores.h"
#include "model/deepseek_v41/topk.h"
#include "model/rope_params.h"
#include "model/packed_weight_loader.h"

namespace gannet::model::deepseek_v4 {

namespace {

constexpr float kNegInf = -std::numeric_limits<float>::infinity();



// In-place Sylvester (natural order) Walsh-Hadamard transform of x [n], times 1/sqrt(n).
void hadamard(float* x, int64_t n) {
  for (int64_t h = 1; h < n; h *= 2)
    for (int64_t i = 0; i < n; i += 2 * h)
      for (int64_t j = i; j < i + h; ++j) {
        const float a = x[j], b = x[j + h];
        x[j] = a + b;
        x[j + h] = a - b;
      }
  const float s = 1.0f / std::sqrt(float(n));
  for (int64_t i = 0; i < n; ++i) x[i] *= s;
}


std::string L(int64_t i) { return "layers." + std::to_string(i) + "."; }

}  // namespace

DeepseekV4::DeepseekV4(const io::ModelConfig& cfg, const io::Checkpoint& ck) {
  GANNET_CHECK(cfg.deepseek_v4 != nullptr, "DeepseekV4 needs a parsed DeepSeek-V4 config");
  c_ = *cfg.deepseek_v4;
  fake_quant_ = cfg.kv_fake_quant;
  spec_tokens_ = cfg.speculative_tokens;
  GANNET_CHECK(spec_tokens_ >= 0, "speculative tokens ", spec_tokens_);
  if (cfg.exact_activations) fail(ck.dir(), ": --exact-activations is not implemented for DeepSeek-V4 yet");
  const int64_t d = c_.hidden_size, hc = c_.hc_mult, D = c_.head_dim, H = c_.num_attention_heads;
  const int64_t mix = (2 + hc) * hc, E = c_.n_routed_experts, inter = c_.moe_intermediate_size;
  const int64_t idh = c_.index_head_dim, nih = c_.index_n_heads;
  if (cfg.ep_size > 1) {  // expert parallelism: this rank holds its share of the routed experts
    ExpertParallelOptions o;
    o.redundant = cfg.ep_redundant;
    o.eplb_interval = cfg.eplb_interval;
    o.eplb_window = cfg.eplb_window;
    ep_ = std::make_unique<ExpertParallel>(cfg.ep_rank, cfg.ep_size, E, c_.num_hidden_layers, o);
  }
  std::vector<MoeConfig> moe_cfg;
  std::vector<MoeWeights> moe_w;
  // The names the config implies (scales with their linears); every other backbone name
  // is unexpected, and all differences are reported at once.
  std::set<std::string> want = {"embed.weight", "head.weight", "norm.weight", "hc_head_fn", "hc_head_base",
                                "hc_head_scale"};
  auto lin_names = [&](const std::string& s) {
    want.insert(s + ".weight");
    want.insert(s + ".scale");
  };
  for (int64_t i = 0; i < c_.num_hidden_layers; ++i) {
    const std::string p = L(i);
    for (const char* n : {"attn_norm.weight", "ffn_norm.weight", "hc_attn_fn", "hc_attn_base", "hc_attn_scale",
                          "hc_ffn_fn", "hc_ffn_base", "hc_ffn_scale", "attn.q_norm.weight", "attn.kv_norm.weight",
                          "attn.attn_sink", "ffn.gate.weight"})
      want.insert(p + n);
    for (const char* n : {"attn.wq_a", "attn.wq_b", "attn.wkv", "attn.wo_a", "attn.wo_b"}) lin_names(p + n);
    want.insert(p + (i < c_.num_hash_layers ? "ffn.gate.tid2eid" : "ffn.gate.bias"));
    for (const char* w : {"w1", "w2", "w3"}) lin_names(p + "ffn.shared_experts." + w);
    for (int64_t e = 0; e < E; ++e)
      if (!ep_ || ep_->loads_expert(e))  // expert parallel: this rank's share only
        for (const char* w : {"w1", "w2", "w3"}) lin_names(p + "ffn.experts." + std::to_string(e) + "." + w);
    const int64_t r = c_.compress_ratios[size_t(i)];
    if (r > 0)
      for (const char* n : {"attn.compressor.wkv.weight", "attn.compressor.wgate.weight", "attn.compressor.ape",
                            "attn.compressor.norm.weight"})
        want.insert(p + n);
    if (r == 4) {
      lin_names(p + "attn.indexer.wq_b");
      for (const char* n : {"attn.indexer.weights_proj.weight", "attn.indexer.compressor.wkv.weight",
                            "attn.indexer.compressor.wgate.weight", "attn.indexer.compressor.ape",
                            "attn.indexer.compressor.norm.weight"})
        want.insert(p + n);
    }
  }
  {
    std::vector<std::string> missing, unexpected;
    for (const std::string& n : want)
      if (!ck.has(n)) missing.push_back(n);
    for (const std::string& n : ck.names()) {
      if (want.count(n)) continue;
      if (n.rfind("mtp.", 0) == 0) ++mtp_tensors_;
      else if (const int64_t e = routed_expert_of_tensor(n); ep_ && e >= 0 && e < E && !ep_->loads_expert(e)) continue;
      else unexpected.push_back(n);
    }
    if (!missing.empty() || !unexpected.empty()) {
      std::ostringstream os;
      for (auto [what, v] : {std::pair<const char*, std::vector<std::string>*>{"missing", &missing}, {"unexpected", &unexpected}}) {
        if (v->empty()) continue;
        os << "\n  " << v->size() << " " << what << ":";
        for (size_t k = 0; k < v->size() && k < 40; ++k) os << " " << (*v)[k];
      }
      fail(ck.dir(), ": the checkpoint does not match config.json (DeepseekV4ForCausalLM)", os.str());
    }
  }
  auto vec = [&](const std::string& n, std::vector<int64_t> shape) { return deepseek_v41::load_f32(ck, n, shape); };
  auto lin = [&](const std::string& n, int64_t rows, int64_t cols) {
    return load_packed_weight(ck, n, rows, cols, c_.weight_block);
  };
  auto plain = [&](const std::string& n, int64_t rows, int64_t cols) { return load_packed_weight(ck, n, rows, cols); };
  embed_ = plain("embed.weight", c_.vocab_size, d);
  head_ = plain("head.weight", c_.vocab_size, d);
  norm_ = vec("norm.weight", {d});
  hc_head_.fn = plain("hc_head_fn", hc, hc * d);
  hc_head_.base = vec("hc_head_base", {hc});
  hc_head_.scale = vec("hc_head_scale", {1});
  auto comp = [&](const std::string& s, int64_t width, int64_t ratio, bool overlap) {
    Compressor cp;
    const int64_t w2 = overlap ? 2 * width : width;
    cp.wkv = plain(s + ".wkv.weight", w2, d);
    cp.wgate = plain(s + ".wgate.weight", w2, d);
    cp.ape = vec(s + ".ape", {ratio, w2});
    cp.norm = vec(s + ".norm.weight", {width});
    cp.width = width;
    cp.overlap = overlap;
    return cp;
  };
  for (int64_t i = 0; i < c_.num_hidden_layers; ++i) {
    const std::string p = L(i);
    Layer ly;
    for (auto [site, nm] : {std::pair<deepseek_v41::MhcSite*, const char*>{&ly.hc_attn, "attn"}, {&ly.hc_ffn, "ffn"}}) {
      site->fn = plain(p + "hc_" + nm + "_fn", mix, hc * d);
      site->base = vec(p + "hc_" + nm + "_base", {mix});
      site->scale = vec(p + "hc_" + nm + "_scale", {3});
    }
    ly.attn_norm = vec(p + "attn_norm.weight", {d});
    ly.ffn_norm = vec(p + "ffn_norm.weight", {d});
    ly.wq_a = lin(p + "attn.wq_a.weight", c_.q_lora_rank, d);
    ly.q_norm = vec(p + "attn.q_norm.weight", {c_.q_lora_rank});
    ly.wq_b = lin(p + "attn.wq_b.weight", H * D, c_.q_lora_rank);
    ly.wkv = lin(p + "attn.wkv.weight", D, d);
    ly.kv_norm = vec(p + "attn.kv_norm.weight", {D});
    ly.wo_a = lin(p + "attn.wo_a.weight", c_.o_groups * c_.o_lora_rank, H * D / c_.o_groups);
    ly.wo_b = lin(p + "attn.wo_b.weight", d, c_.o_groups * c_.o_lora_rank);
    ly.sink = vec(p + "attn.attn_sink", {H});
    if (c_.o_lora_rank % ly.wo_a.block_n)
      fail(ck.dir(), ": o_lora_rank (", c_.o_lora_rank, ") is not a multiple of the wo_a scale block");
    ly.ratio = c_.compress_ratios[size_t(i)];
    if (ly.ratio > 0) ly.comp = comp(p + "attn.compressor", D, ly.ratio, ly.ratio == 4);
    if (ly.ratio == 4) {
      ly.idx_comp = comp(p + "attn.indexer.compressor", idh, 4, true);
      ly.idx_wq_b = lin(p + "attn.indexer.wq_b.weight", nih * idh, c_.q_lora_rank);
      ly.idx_weights = plain(p + "attn.indexer.weights_proj.weight", nih, d);
    }
    MoeWeights mw;
    mw.router = plain(p + "ffn.gate.weight", E, d);
    if (i < c_.num_hash_layers) {
      const io::TensorRef t = ck.get(p + "ffn.gate.tid2eid", {c_.vocab_size, c_.num_experts_per_tok});
      if (t.info->dtype != DType::I64 && t.info->dtype != DType::I32)
        fail(ck.dir(), ": '", p, "ffn.gate.tid2eid' must be I64 or I32");
      ly.tid2eid.resize(size_t(c_.vocab_size * c_.num_experts_per_tok));
      for (size_t k = 0; k < ly.tid2eid.size(); ++k) {
        int64_t v;
        if (t.info->dtype == DType::I64) std::memcpy(&v, t.data + 8 * k, 8);
        else {
          int32_t v32;
          std::memcpy(&v32, t.data + 4 * k, 4);
          v = v32;
        }
        if (v < 0 || v >= E) fail(ck.dir(), ": '", p, "ffn.gate.tid2eid' holds expert ", v, " of ", E);
        ly.tid2eid[k] = int32_t(v);
      }
      for (int64_t tk = 0; tk < c_.vocab_size; ++tk) {  // the experts of a token are distinct
        std::vector<int32_t> row(ly.tid2eid.begin() + tk * c_.num_experts_per_tok,
                                 ly.tid2eid.begin() + (tk + 1) * c_.num_experts_per_tok);
        std::sort(row.begin(), row.end());
        if (std::adjacent_find(row.begin(), row.end()) != row.end())
          fail(ck.dir(), ": '", p, "ffn.gate.tid2eid' routes token ", tk, " to the same expert twice");
      }
    } else {
      mw.selection_bias = vec(p + "ffn.gate.bias", {E});
    }
    auto expert = [&](const std::string& s) {
      MoeExpert e;
      e.w1 = lin(s + ".w1.weight", inter, d);
      e.w3 = lin(s + ".w3.weight", inter, d);
      e.w2 = lin(s + ".w2.weight", d, inter);
      return e;
    };
    for (int64_t e = 0; e < E; ++e)
      if (ep_) {
        if (ep_->loads_expert(e)) ep_->set_expert(i, e, expert(p + "ffn.experts." + std::to_string(e)));
      } else {
        mw.experts.push_back(expert(p + "ffn.experts." + std::to_string(e)));
      }
    mw.shared.push_back(expert(p + "ffn.shared_experts"));
    MoeConfig mc;
    mc.hidden = d;
    mc.n_experts = E;
    mc.top_k = c_.num_experts_per_tok;
    mc.n_shared = 1;
    mc.scoring = c_.scoring_func == "softmax" ? MoeScoring::kSoftmax
                 : c_.scoring_func == "sigmoid" ? MoeScoring::kSigmoid
                                                : MoeScoring::kSqrtSoftplus;
    mc.norm_topk_prob = c_.norm_topk_prob;
    mc.routed_scaling_factor = float(c_.routed_scaling_factor);
    mc.swiglu_limit = float(c_.swiglu_limit);
    moe_cfg.push_back(mc);
    moe_w.push_back(std::move(mw));
    layers_.push_back(std::move(ly));
  }
  // The MoE layers, once every expert is placed (expert parallel: in ep_'s slots).
  if (ep_) ep_->finish_loading();
  for (size_t l = 0; l < moe_w.size(); ++l) {
    if (ep_) moe_.emplace_back(moe_cfg[l], std::move(moe_w[l]), ep_.get(), int64_t(l));
    else moe_.emplace_back(moe_cfg[l], std::move(moe_w[l]));
  }
  if (c_.n_shared_experts != 1) fail(ck.dir(), ": n_shared_experts must be 1 for DeepSeek-V4");
  rope_main_ = kernels::RopeTable(int(c_.qk_rope_head_dim), c_.rope_theta, c_.max_position_embeddings);
  rope_compress_ = kernels::RopeTable(int(c_.qk_rope_head_dim), c_.compress_rope_theta, c_.max_position_embeddings,
                                      rope_scaling_params(c_.compress_scaling));
  // The cache: entries per compression ratio (f32; ratio-4 entries carry the index key),
  // rings in the state slot (tensor_plan.h: the same layout from the config alone).
  CacheLayout lay = make_cache_layout(c_, spec_tokens_);
  spec_ = std::move(lay.spec);
  win_off_ = std::move(lay.win_off);
  ring_off_ = std::move(lay.ring_off);
  iring_off_ = std::move(lay.iring_off);
  comp_index_ = std::move(lay.comp_index);
  arena_ = std::move(lay.arena);
}

SeqState DeepseekV4::new_state(int64_t capacity) const {
  SeqState st;
  st.state.assign(size_t(spec_.state_bytes_per_seq), 0);
  for (auto [g, l] : arena_) {
    const kernels::CacheGroup& gr = spec_.groups[size_t(g)];
    const int64_t block = (capacity + gr.tokens_per_entry - 1) / gr.tokens_per_entry * gr.tokens_per_entry;
    st.mem.emplace_back(size_t(block / gr.tokens_per_entry * gr.bytes_per_entry), 0);
    kernels::CacheArena a;
    a.base = st.mem.back().data();
    a.block_stride = block / gr.tokens_per_entry * gr.bytes_per_entry;
    a.entry_stride = gr.bytes_per_entry;
    a.tokens_per_entry = gr.tokens_per_entry;
    a.block_size = int(block);
    st.arenas.push_back(a);
  }
  for (auto& a : st.arenas) st.ptrs.push_back(&a);
  return st;
}

std::vector<float> DeepseekV4::compress(const Compressor& cp, int64_t m, const float* kv, float* gate, int64_t n,
                                        int64_t pos0, float* ring_kv, float* ring_gate, int64_t* first) const {
  const int64_t W = cp.width, w2 = cp.overlap ? 2 * W : W, slots = ring_slots(cp.overlap, m);
  std::vector<float> pooled, slot_gate(static_cast<size_t>(2 * m)), slot_kv(static_cast<size_t>(2 * m));
  std::vector<int64_t> ids;
  for (int64_t i = 0; i < n; ++i) {
    const int64_t p = pos0 + i, slot = p % slots;
    for (int64_t c = 0; c < w2; ++c) gate[size_t(i * w2 + c)] += cp.ape[size_t((p % m) * w2 + c)];
    std::memcpy(ring_kv + slot * w2, kv + i * w2, size_t(w2) * 4);
    std::memcpy(ring_gate + slot * w2, gate + i * w2, size_t(w2) * 4);
    if ((p + 1) % m) continue;
    const int64_t g = p / m;  // the group [g m, g m + m) closes
    pooled.resize(pooled.size() + size_t(W));
    float* out = pooled.data() + pooled.size() - size_t(W);
    // Slots: the previous group's first halves (overlap, g > 0), then this group's (second
    // halves when overlapping).
    for (int64_t c = 0; c < W; ++c) {
      float* gv = slot_gate.data();  // up to 2 m slots (m = 128 in V4-Flash's HCA layers)
      float* kvv = slot_kv.data();
      int64_t ns = 0;
      if (cp.overlap && g > 0)
        for (int64_t j = 0; j < m; ++j) {
          const int64_t s = ((g - 1) * m + j) % slots;
          gv[ns] = ring_gate[size_t(s * w2 + c)];
          kvv[ns++] = ring_kv[size_t(s * w2 + c)];
        }
      for (int64_t j = 0; j < m; ++j) {
        const int64_t s = (g * m + j) % slots, off = cp.overlap ? W : 0;
        gv[ns] = ring_gate[size_t(s * w2 + off + c)];
        kvv[ns++] = ring_kv[size_t(s * w2 + off + c)];
      }
      float mx = kNegInf;
      for (int64_t j = 0; j < ns; ++j) mx = std::max(mx, gv[j]);
      float sum = 0.0f;
      for (int64_t j = 0; j < ns; ++j) sum += (gv[j] = std::exp(gv[j] - mx));
      float acc = 0.0f;
      for (int64_t j = 0; j < ns; ++j) acc += (gv[j] / sum) * kvv[j];
      out[c] = acc;
    }
    ids.push_back(g);
  }
  const int64_t groups = int64_t(ids.size());
  *first = groups ? ids[0] : 0;
  std::vector<float> out(pooled.size());
  if (!groups) return out;
  kernels::rmsnorm(pooled.data(), cp.norm.data(), out.data(), groups, W, float(c_.rms_norm_eps));
  std::vector<int32_t> pos(static_cast<size_t>(groups));
  for (int64_t g = 0; g < groups; ++g) pos[size_t(g)] = int32_t(ids[size_t(g)] * m);
  kernels::apply_rope(out.data(), groups, 1, int(W), pos.data(), rope_compress_, true, int(W - c_.qk_rope_head_dim));
  return out;
}

void DeepseekV4::attention(int64_t l, const std::vector<Chunk>& chunks, const int32_t* pos, const float* a,
                           int64_t N, float* out, ThreadPool* pool) const {
  const Layer& ly = layers_[size_t(l)];
  const int64_t D = c_.head_dim, H = c_.num_attention_heads, R = c_.qk_rope_head_dim, W = c_.sliding_window;
  const int64_t RW = W + spec_tokens_;  // window ring slots
  const int64_t ratio = ly.ratio;
  const float eps = float(c_.rms_norm_eps);
  const kernels::RopeTable& rope = ratio ? rope_compress_ : rope_main_;
  // Every per-token product over the rows of all chunks at once (a row's bits never depend
  // on the others), then each sequence's compression, selection and attention on its rows.
  // The products of one input run in one parallel region (matmul_packed_many).
  const int64_t idh = c_.index_head_dim, nih = c_.index_n_heads;
  const int64_t w2 = ratio > 0 ? (ly.comp.overlap ? 2 * D : D) : 0;
  std::vector<float> qa(size_t(N * c_.q_lora_rank)), qr(qa.size()), q(size_t(N * H * D));
  std::vector<float> kv0(size_t(N * D)), kv(size_t(N * D));
  std::vector<float> ckv(size_t(N * w2)), cgate(ckv.size());
  std::vector<float> ikv(ratio == 4 ? size_t(N * 2 * idh) : 0), igate(ikv.size());
  std::vector<float> iq(ratio == 4 ? size_t(N * nih * idh) : 0), iw(ratio == 4 ? size_t(N * nih) : 0);
  std::vector<kernels::PackedProduct> on_a{{&ly.wq_a, qa.data()}, {&ly.wkv, kv0.data()}}, on_qr{{&ly.wq_b, q.data()}};
  if (ratio > 0) {
    on_a.push_back({&ly.comp.wkv, ckv.data()});
    on_a.push_back({&ly.comp.wgate, cgate.data()});
  }
  if (ratio == 4) {
    on_a.push_back({&ly.idx_comp.wkv, ikv.data()});
    on_a.push_back({&ly.idx_comp.wgate, igate.data()});
    on_a.push_back({&ly.idx_weights, iw.data()});
    on_qr.push_back({&ly.idx_wq_b, iq.data()});
  }
  kernels::matmul_packed_many(a, N, on_a, pool);
  kernels::rmsnorm(qa.data(), ly.q_norm.data(), qr.data(), N, c_.q_lora_rank, eps);
  kernels::matmul_packed_many(qr.data(), N, on_qr, pool);
  kernels::rmsnorm(q.data(), nullptr, q.data(), N * H, D, eps);  // per head, unweighted
  kernels::apply_rope(q.data(), N, int(H), int(D), pos, rope, true, int(D - R));
  kernels::rmsnorm(kv0.data(), ly.kv_norm.data(), kv.data(), N, D, eps);
  kernels::apply_rope(kv.data(), N, 1, int(D), pos, rope, true, int(D - R));
  const bool fq_nope = fake_quant_ && (D - R) % 64 == 0;
  if (fq_nope)
    for (int64_t i = 0; i < N; ++i) kernels::fake_quant_fp8(kv.data() + i * D, D - R, 64, true);
  const bool fq_idx = fake_quant_ && idh % 32 == 0 && (idh & (idh - 1)) == 0;
  if (ratio == 4) {
    kernels::apply_rope(iq.data(), N, int(nih), int(idh), pos, rope_compress_, true, int(idh - R));
    for (int64_t r = 0; r < N * nih && fq_idx; ++r) {
      hadamard(iq.data() + r * idh, idh);
      kernels::fake_quant_fp4(iq.data() + r * idh, idh, 32);
    }
  }

  std::vector<float> o(size_t(N * H * D), 0.0f);
  const float scale = 1.0f / std::sqrt(float(D));
  // Per chunk: its compressed entries written, then each query's selection (the indexer's
  // top-k on ratio-4 layers, every visible entry on the others), then attention over its
  // window and selection. Queries (selection) and (query, head) rows (attention) are
  // independent: one sequence's rows are split over the pool when large enough, several
  // small chunks (decode, verify) run a chunk per task. Every row's arithmetic is the same
  // either way.
  struct Prep {
    std::vector<std::vector<int32_t>> sel;  // per query
    std::vector<float> keys_t;              // ratio 4: the indexer's keys, [idh][E]
    int64_t E = 0;
  };
  std::vector<Prep> prep(chunks.size());
  auto compress_chunk = [&](size_t ci) {
    const Chunk& ch = chunks[ci];
    const SeqMem& m = *ch.m;
    const int64_t pos0 = ch.pos0, n = ch.n, r0 = ch.row0;
    Prep& pr = prep[ci];
    pr.sel.assign(size_t(n), {});
    if (ratio == 0) return;
    int64_t first = 0;
    float* ring = reinterpret_cast<float*>(m.state + ring_off_[size_t(l)]);
    const int64_t ring_half = ring_slots(ly.comp.overlap, ratio) * w2;
    std::vector<float> e = compress(ly.comp, ratio, ckv.data() + r0 * w2, cgate.data() + r0 * w2, n, pos0, ring,
                                    ring + ring_half, &first);
    const int64_t ng = int64_t(e.size()) / D;
    if (fq_nope)
      for (int64_t g = 0; g < ng; ++g) kernels::fake_quant_fp8(e.data() + g * D, D - R, 64, true);
    // Prefix-cache replay: entries of groups that close before write_from are cached.
    auto cached = [&](int64_t g) { return (first + g + 1) * ratio <= ch.write_from; };
    for (int64_t g = 0; g < ng; ++g)
      if (!cached(g)) std::memcpy(entry(m, l, first + g), e.data() + g * D, size_t(D) * 4);
    const int64_t E = (pos0 + n) / ratio;
    pr.E = E;
    if (ratio != 4) return;
    float* iring = reinterpret_cast<float*>(m.state + iring_off_[size_t(l)]);
    std::vector<float> k = compress(ly.idx_comp, 4, ikv.data() + r0 * 2 * idh, igate.data() + r0 * 2 * idh, n, pos0,
                                    iring, iring + ring_slots(true, 4) * 2 * idh, &first);
    const int64_t nk = int64_t(k.size()) / idh;
    for (int64_t g = 0; g < nk && fq_idx; ++g) {
      hadamard(k.data() + g * idh, idh);
      kernels::fake_quant_fp4(k.data() + g * idh, idh, 32);
    }
    for (int64_t g = 0; g < nk; ++g)
      if (!cached(g)) std::memcpy(entry(m, l, first + g) + D, k.data() + g * idh, size_t(idh) * 4);
    pr.keys_t.resize(size_t(E * idh));
    for (int64_t e2 = 0; e2 < E; ++e2) {
      const float* ke = entry(m, l, e2) + D;
      for (int64_t c = 0; c < idh; ++c) pr.keys_t[size_t(c * E + e2)] = ke[c];
    }
  };
  // Queries [i0, i1) of chunk ci: their selections.
  auto select_rows = [&](size_t ci, int64_t i0, int64_t i1) {
    const Chunk& ch = chunks[ci];
    Prep& pr = prep[ci];
    const int64_t E = pr.E, pos0 = ch.pos0, r0 = ch.row0;
    if (ratio == 0) return;
    if (ratio != 4) {
      for (int64_t i = i0; i < i1; ++i)
        for (int64_t e2 = 0; e2 < std::min<int64_t>(E, (pos0 + i + 1) / ratio); ++e2)
          pr.sel[size_t(i)].push_back(int32_t(e2));
      return;
    }
    const float ss = 1.0f / std::sqrt(float(idh)), hs = 1.0f / std::sqrt(float(nih));
    thread_local std::vector<float> dots, sce;
    dots.resize(size_t(E));
    sce.resize(size_t(E));
    for (int64_t i = i0; i < i1; ++i) {
      const int64_t visible = (pos0 + i + 1) / 4;
      deepseek_v41::index_scores(iq.data() + (r0 + i) * nih * idh, iw.data() + (r0 + i) * nih, nih, idh,
                                 pr.keys_t.data(), E, visible, ss, hs, dots.data(), sce.data());
      for (int32_t e2 : deepseek_v41::top_k_lower_index(sce.data(), E, c_.index_topk))
        if (sce[size_t(e2)] > kNegInf) pr.sel[size_t(i)].push_back(e2);
    }
  };
  // Keys of query i of chunk ci: its window positions, then its selected entries.
  auto keys_of = [&](size_t ci, int64_t i) {
    const Chunk& ch = chunks[ci];
    return std::min<int64_t>(W, ch.pos0 + i + 1 - std::max<int64_t>(ch.window_from, ch.pos0 + i - W + 1)) +
           int64_t(prep[ci].sel[size_t(i)].size());
  };
  // Rows [u0, u1) of chunk ci's attention, row u = query u / H, head u % H.
  auto attend_rows = [&](size_t ci, int64_t u0, int64_t u1) {
    const Chunk& ch = chunks[ci];
    const SeqMem& m = *ch.m;
    const int64_t pos0 = ch.pos0, r0 = ch.row0;
    const float* window = reinterpret_cast<const float*>(m.state + win_off_[size_t(l)]);
    const float* kvc = kv.data() + r0 * D;  // this chunk's new KV rows
    thread_local std::vector<float> kbuf, sbuf, sc;
    for (int64_t i = u0 / H; i * H < u1; ++i) {
      const int64_t p = pos0 + i, h0 = std::max(u0, i * H) - i * H, h1 = std::min(u1, (i + 1) * H) - i * H;
      int64_t nk = 0;
      kbuf.clear();
      for (int64_t kp = std::max<int64_t>(ch.window_from, p - W + 1); kp <= p; ++kp, ++nk) {
        const float* src = kp >= pos0 ? kvc + (kp - pos0) * D : window + (kp % RW) * D;
        kbuf.insert(kbuf.end(), src, src + D);
      }
      for (int32_t e2 : prep[ci].sel[size_t(i)]) {
        const float* en = entry(m, l, e2);
        kbuf.insert(kbuf.end(), en, en + D);
        ++nk;
      }
      sbuf.resize(size_t((h1 - h0) * nk));
      kernels::matmul_f32(q.data() + ((r0 + i) * H + h0) * D, h1 - h0, D, kbuf.data(), nk, sbuf.data(), nullptr);
      sc.resize(size_t(nk));
      for (int64_t h = h0; h < h1; ++h) {
        const float* srow = sbuf.data() + (h - h0) * nk;
        float mx = ly.sink[size_t(h)];
        for (int64_t j = 0; j < nk; ++j) mx = std::max(mx, sc[size_t(j)] = srow[j] * scale);
        float sum = std::exp(ly.sink[size_t(h)] - mx);
        for (int64_t j = 0; j < nk; ++j) sum += (sc[size_t(j)] = std::exp(sc[size_t(j)] - mx));
        float* oh = o.data() + ((r0 + i) * H + h) * D;
        for (int64_t j = 0; j < nk; ++j) sc[size_t(j)] /= sum;
        kernels::add_weighted_rows(sc.data(), kbuf.data(), nullptr, nk, D, oh, D);
      }
    }
  };
  auto store_window = [&](size_t ci) {
    const Chunk& ch = chunks[ci];
    float* window = reinterpret_cast<float*>(ch.m->state + win_off_[size_t(l)]);
    const float* kvc = kv.data() + ch.row0 * D;
    for (int64_t i = std::max<int64_t>(0, ch.n - W); i < ch.n; ++i)
      std::memcpy(window + ((ch.pos0 + i) % RW) * D, kvc + i * D, size_t(D) * 4);
  };
  const bool threads = pool && pool->size() > 1;
  const bool per_chunk = deepseek_v41::one_task_per_chunk(chunks, pool);
  if (per_chunk) {
    pool->parallel_for(int64_t(chunks.size()), [&](int64_t b, int64_t e, int) {
      for (int64_t ci = b; ci < e; ++ci) {
        compress_chunk(size_t(ci));
        select_rows(size_t(ci), 0, chunks[size_t(ci)].n);
        attend_rows(size_t(ci), 0, chunks[size_t(ci)].n * H);
        store_window(size_t(ci));
      }
    });
  } else {
    for (size_t ci = 0; ci < chunks.size(); ++ci) {
      const int64_t n = chunks[ci].n;
      compress_chunk(ci);
      if (threads && ratio == 4 && n * prep[ci].E * nih * idh >= kernels::kMinParallelMacs)
        pool->parallel_for(n, [&](int64_t b, int64_t e, int) { select_rows(ci, b, e); });
      else
        select_rows(ci, 0, n);
      int64_t macs = 0;
      for (int64_t i = 0; i < n; ++i) macs += keys_of(ci, i) * H * D;
      if (threads && macs >= kernels::kMinParallelMacs)
        pool->parallel_for(n * H, [&](int64_t b, int64_t e, int) { attend_rows(ci, b, e); });
      else
        attend_rows(ci, 0, n * H);
      store_window(ci);
    }
  }
  kernels::apply_rope(o.data(), N, int(H), int(D), pos, rope, true, int(D - R), /*inverse=*/true);
  std::vector<float> z(size_t(N * c_.o_groups * c_.o_lora_rank));
  deepseek_v41::grouped_wo_a(ly.wo_a, o.data(), N, c_.o_groups, c_.o_lora_rank, z.data(), pool);
  kernels::matmul_packed(z.data(), N, ly.wo_b, out, pool);
}

void DeepseekV4::forward(SeqState& st, const int32_t* tokens, int64_t n, float* logits, ThreadPool* pool) const {
  if (n <= 0) return;
  if (!st.arenas.empty() && st.pos + n > int64_t(st.arenas[0].block_size))
    fail("sequence state holds ", st.arenas[0].block_size, " positions; ", st.pos + n, " asked");
  std::vector<float> hidden(size_t(n * c_.hidden_size));
  forward_mem(st.view(), tokens, n, st.pos, hidden.data(), pool);
  if (logits) this->logits(hidden.data(), n, logits, pool);
  st.pos += n;
}

int64_t DeepseekV4::prefix_replay_start(int64_t hit) const {
  const int64_t W = c_.sliding_window;
  int64_t s = hit;
  for (size_t l = 0; l < layers_.size(); ++l) {
    const int64_t m = layers_[l].ratio;
    int64_t need = hit - (W - 1);  // the window ring's positions before `hit`
    if (m > 0) need = std::min(need, (hit / m - (layers_[l].comp.overlap ? 1 : 0)) * m);
    s = std::min(s, need - int64_t(l) * (W - 1));
  }
  return s > 0 ? s : -1;
}

void DeepseekV4::logits(const float* hidden, int64_t rows, float* out, ThreadPool* pool) const {
  kernels::matmul_packed(hidden, rows, head_, out, pool);
}

void DeepseekV4::forward_mem(const SeqMem& m, const int32_t* tokens, int64_t n, int64_t pos0, float* hidden,
                             ThreadPool* pool) const {
  if (n <= 0) return;
  Chunk ch;
  ch.m = &m;
  ch.pos0 = pos0;
  ch.n = n;
  forward_batch({ch}, tokens, n, hidden, pool);
}

void DeepseekV4::forward_idle(ThreadPool* pool) const {
  if (!ep_) return;
  ep_->begin_forward();
  MoeWorkspace ws;
  for (const MoeLayer& m : moe_) m.forward(nullptr, 0, nullptr, ws, pool);
}

void DeepseekV4::forward_batch(const std::vector<Chunk>& chunks, const int32_t* tokens, int64_t N, float* hidden,
                               ThreadPool* pool) const {
  if (N <= 0) return;
  if (ep_) ep_->begin_forward();
  const int64_t d = c_.hidden_size, hc = c_.hc_mult, K = c_.num_experts_per_tok;
  for (int64_t i = 0; i < N; ++i)
    if (tokens[i] < 0 || tokens[i] >= c_.vocab_size)
      fail("token id ", tokens[i], " is outside the vocabulary (", c_.vocab_size, ")");
  std::vector<int32_t> pos(static_cast<size_t>(N));
  int64_t covered = 0;
  for (const Chunk& ch : chunks) {
    GANNET_CHECK(ch.n > 0 && ch.row0 >= 0 && ch.row0 + ch.n <= N, "chunk rows");
    if (ch.pos0 < 0 || ch.pos0 + ch.n > c_.max_position_embeddings)
      fail("positions up to ", ch.pos0 + ch.n, " exceed max_position_embeddings (", c_.max_position_embeddings, ")");
    // A sequence (re)starts, or its prefix-cache replay does.
    if (ch.pos0 == 0 || (ch.window_from > 0 && ch.pos0 == ch.window_from))
      std::memset(ch.m->state, 0, size_t(spec_.state_bytes_per_seq));
    for (int64_t i = 0; i < ch.n; ++i) pos[size_t(ch.row0 + i)] = int32_t(ch.pos0 + i);
    covered += ch.n;
  }
  GANNET_CHECK(covered == N, "chunks cover ", covered, " of ", N, " rows");
  const deepseek_v41::MhcParams mp = deepseek_v41::mhc_params(c_);
  std::vector<float> X(size_t(N * hc * d)), e(static_cast<size_t>(d));
  for (int64_t i = 0; i < N; ++i) {
    embed_.dequant_row(tokens[i], e.data());
    for (int64_t k = 0; k < hc; ++k) std::memcpy(X.data() + (i * hc + k) * d, e.data(), size_t(d) * 4);
  }
  std::vector<float> pre(size_t(N * hc)), post(size_t(N * hc)), comb(size_t(N * hc * hc));
  std::vector<float> col(size_t(N * d)), nrm(size_t(N * d)), y(size_t(N * d));
  std::vector<int32_t> forced(size_t(N * K));
  deepseek_v41::MhcWorkspace ws;
  MoeWorkspace moe_ws;
  for (size_t l = 0; l < layers_.size(); ++l) {
    const Layer& ly = layers_[l];
    deepseek_v41::mhc_mixes(mp, ly.hc_attn, X.data(), N, pre.data(), post.data(), comb.data(), ws, pool);
    deepseek_v41::mhc_collapse(X.data(), N, hc, d, pre.data(), col.data());
    kernels::rmsnorm(col.data(), ly.attn_norm.data(), nrm.data(), N, d, float(c_.rms_norm_eps));
    attention(int64_t(l), chunks, pos.data(), nrm.data(), N, y.data(), pool);
    deepseek_v41::mhc_expand(X.data(), N, hc, d, y.data(), post.data(), comb.data());
    deepseek_v41::mhc_mixes(mp, ly.hc_ffn, X.data(), N, pre.data(), post.data(), comb.data(), ws, pool);
    deepseek_v41::mhc_collapse(X.data(), N, hc, d, pre.data(), col.data());
    kernels::rmsnorm(col.data(), ly.ffn_norm.data(), nrm.data(), N, d, float(c_.rms_norm_eps));
    const int32_t* f = nullptr;
    if (!ly.tid2eid.empty()) {
      for (int64_t i = 0; i < N; ++i)
        std::copy_n(ly.tid2eid.data() + int64_t(tokens[i]) * K, K, forced.data() + i * K);
      f = forced.data();
    }
    moe_[l].forward(nrm.data(), N, y.data(), moe_ws, pool, f);
    deepseek_v41::mhc_expand(X.data(), N, hc, d, y.data(), post.data(), comb.data());
  }
  deepseek_v41::mhc_head(mp, hc_head_, X.data(), N, pre.data(), ws, pool);
  deepseek_v41::mhc_collapse(X.data(), N, hc, d, pre.data(), col.data());
  kernels::rmsnorm(col.data(), norm_.data(), hidden, N, d, float(c_.rms_norm_eps));
}

}  // namespace gannet::model::deepseek_v4
