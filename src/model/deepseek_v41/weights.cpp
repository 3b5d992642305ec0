#include "model/deepseek_v41/weights.h"

#include "model/expert_parallel.h"

#include <algorithm>
#include <set>
#include <sstream>

#include "core/dtype.h"
#include "core/error.h"
#include "model/packed_weight_loader.h"
#include "model/deepseek_v41/vision.h"

namespace gannet::model::deepseek_v41 {

namespace {

using kernels::PackedWeight;

std::string L(int64_t i) { return "layers." + std::to_string(i) + "."; }

std::vector<std::string> expected_names(const io::DeepseekV41Config& c, bool dspark) {
  std::vector<std::string> out;
  for (const TensorPlan& t : tensor_plan(c))
    if (t.dspark == dspark && !t.vision) out.push_back(t.name);
  return out;
}

}  // namespace

TensorPlan* TensorPlanBuilder::add(const std::string& name, DType dt, std::vector<int64_t> shape, bool is_scale) {
  TensorPlan t;
  t.name = name;
  t.dtype = dt;
  int64_t n = 1;
  for (int64_t v : shape) n *= v;
  t.shape = std::move(shape);
  t.bytes = uint64_t(n) * dtype_size(dt);
  t.params = is_scale ? 0 : n;
  out.push_back(std::move(t));
  return &out.back();
}

void TensorPlanBuilder::fp8(const std::string& stem, int64_t n, int64_t k) {
  add(stem + ".weight", DType::F8_E4M3, {n, k});
  add(stem + ".scale", DType::F8_E8M0, {(n + block - 1) / block, (k + block - 1) / block}, true);
}

void TensorPlanBuilder::fp4(const std::string& stem, int64_t n, int64_t k) {
  TensorPlan* w = add(stem + ".weight", DType::I8, {n, k / 2});
  w->params = n * k;
  w->routed_expert = true;
  add(stem + ".scale", DType::F8_E8M0, {n, (k + 31) / 32}, true)->routed_expert = true;
}

std::vector<TensorPlan> tensor_plan(const io::DeepseekV41Config& c) {
  std::vector<TensorPlan> out;
  TensorPlanBuilder plan{out, c.weight_block};
  auto add = [&](const std::string& name, DType dt, std::vector<int64_t> shape) { return plan.add(name, dt, shape); };
  auto fp8 = [&](const std::string& stem, int64_t n, int64_t k) { plan.fp8(stem, n, k); };
  auto fp4 = [&](const std::string& stem, int64_t n, int64_t k) { plan.fp4(stem, n, k); };
  const int64_t d = c.hidden_size, hc = c.hc_mult, D = c.head_dim, H = c.num_attention_heads, E = c.n_routed_experts;
  const int64_t mix = (2 + hc) * hc, inter = c.moe_intermediate_size;
  add("embed.weight", DType::BF16, {c.vocab_size, d});
  add("head.weight", DType::BF16, {c.vocab_size, d});
  add("norm.weight", DType::BF16, {d});
  // One block: a backbone layer (i >= 0: its compressor, indexer and Engram as the
  // schedule says) or a DSpark stage (i < 0: window only, `experts` routed experts).
  auto layer = [&](const std::string& p, int64_t i, int64_t experts) {
    add(p + "attn_norm.weight", DType::BF16, {d});
    add(p + "ffn_norm.weight", DType::BF16, {d});
    for (const char* site : {"attn", "ffn"}) {
      add(p + "hc_" + site + "_fn", DType::F32, {mix, hc * d});
      add(p + "hc_" + site + "_base", DType::F32, {mix});
      add(p + "hc_" + site + "_scale", DType::F32, {3});
    }
    fp8(p + "attn.wq_a", c.q_lora_rank, d);
    add(p + "attn.q_norm.weight", DType::BF16, {c.q_lora_rank});
    fp8(p + "attn.wq_b", H * D, c.q_lora_rank);
    fp8(p + "attn.wkv", D, d);
    add(p + "attn.kv_norm.weight", DType::BF16, {D});
    fp8(p + "attn.wo_a", c.o_groups * c.o_lora_rank, H * D / c.o_groups);
    fp8(p + "attn.wo_b", d, c.o_groups * c.o_lora_rank);
    add(p + "attn.attn_sink", DType::F32, {H});
    if (i >= 0 && c.is_kv_source(i)) {
      add(p + "attn.compressor.wkv.weight", DType::BF16, {D, d});
      if (c.compress_ratios[size_t(i)] > 1) add(p + "attn.compressor.wgate.weight", DType::BF16, {D, d});
      add(p + "attn.compressor.norm.weight", DType::BF16, {D});
      add(p + "attn.indexer.wk.weight", DType::BF16, {c.index_head_dim, D});
      add(p + "attn.indexer.k_norm.weight", DType::BF16, {c.index_head_dim});
    }
    if (i >= 0 && c.is_index_source(i)) {
      fp8(p + "attn.indexer.wq_b", c.index_n_heads * c.index_head_dim, c.q_lora_rank);
      add(p + "attn.indexer.weights_proj.weight", DType::BF16, {c.index_n_heads, d});
    }
    add(p + "ffn.gate.weight", DType::BF16, {experts, d});
    add(p + "ffn.gate.bias", DType::F32, {experts});
    add(p + "ffn.gate.bias_vl", DType::F32, {experts});
    for (int64_t s = 0; s < c.n_shared_experts; ++s) {
      const std::string st = p + "ffn.shared_experts" + (c.n_shared_experts > 1 ? "." + std::to_string(s) : "");
      fp8(st + ".w1", inter, d);
      fp8(st + ".w2", d, inter);
      fp8(st + ".w3", inter, d);
    }
    for (int64_t e = 0; e < experts; ++e) {
      const std::string st = p + "ffn.experts." + std::to_string(e);
      fp4(st + ".w1", inter, d);
      fp4(st + ".w2", d, inter);
      fp4(st + ".w3", inter, d);
    }
    const int64_t ei = i >= 0 ? c.engram_index(i) : -1;
    if (ei >= 0) {
      const int64_t rows = c.engram_num_embeddings[size_t(ei)], edim = c.engram_head_dim;
      add(p + "engram.embed.weight", DType::F8_E4M3, {rows, edim})->engram_table = true;
      plan.add(p + "engram.embed.scale", DType::F8_E8M0, {rows, (edim + 31) / 32}, true)->engram_table = true;
      fp8(p + "engram.wkv", (hc + 1) * d, (c.engram_max_ngram_size - 1) * c.engram_n_heads * edim);
      add(p + "engram.q_weight", DType::BF16, {hc, d});
      add(p + "engram.k_weight", DType::BF16, {hc, d});
    }
  };
  for (int64_t i = 0; i < c.num_hidden_layers; ++i) layer(L(i), i, E);
  const size_t backbone = out.size();
  const int64_t S = c.num_nextn_predict_layers;
  for (int64_t k = 0; k < S; ++k) {
    const std::string p = "mtp." + std::to_string(k) + ".";
    layer(p, -1, c.dspark_n_routed_experts);
    if (k == 0) {
      fp8(p + "main_proj", d, int64_t(c.dspark_target_layer_ids.size()) * d);
      add(p + "main_norm.weight", DType::BF16, {d});
    }
    if (k == S - 1) {
      add(p + "norm.weight", DType::BF16, {d});
      add(p + "markov_head.markov_w1.weight", DType::BF16, {c.vocab_size, c.dspark_markov_rank});
      add(p + "markov_head.markov_w2.weight", DType::BF16, {c.vocab_size, c.dspark_markov_rank});
      add(p + "confidence_head.proj.weight", DType::BF16, {1, d + c.dspark_markov_rank});
    }
  }
  for (size_t t = backbone; t < out.size(); ++t) out[t].dspark = true;
  if (c.vision.present)
    for (const VisionTensor& v : vision_tensors(c)) add(v.name, DType::BF16, v.shape)->vision = true;
  return out;
}

namespace {

// Tensors that are not part of the text backbone: DSpark (kept for speculative decoding),
// the vision tower and its aligner (text-only serving).
bool is_side_tensor(const std::string& n) {
  auto starts = [&](const char* s) { return n.rfind(s, 0) == 0; };
  return starts("mtp.") || starts("vision.") || starts("aligner.") || n == "image_start" || n == "image_end" ||
         n == "image_newline";
}

class Loader {
 public:
  Loader(const io::DeepseekV41Config& c, const io::Checkpoint& ck) : c_(c), ck_(ck) {}

  std::vector<float> vec(const std::string& name, const std::vector<int64_t>& shape) { return load_f32(ck_, name, shape); }

  PackedWeight lin(const std::string& name, int64_t n, int64_t k) {
    return load_packed_weight(ck_, name, n, k, c_.weight_block);
  }

  // A weight that must be stored as a plain float type (bf16 in the released checkpoint).
  PackedWeight plain(const std::string& name, int64_t n, int64_t k) {
    PackedWeight w = load_packed_weight(ck_, name, n, k);
    if (w.format != kernels::WeightFormat::kF32 && w.format != kernels::WeightFormat::kBF16 &&
        w.format != kernels::WeightFormat::kF16)
      fail(ck_.dir(), ": tensor '", name, "' must be F32, BF16 or F16 (it is multiplied with float activations)");
    return w;
  }

  // The Engram table: FP8 rows with one E8M0 scale per 32 channels.
  PackedWeight engram_table(const std::string& stem, int64_t rows, int64_t dim) {
    const io::TensorRef t = ck_.get(stem + ".weight", {rows, dim});
    const io::TensorRef s = ck_.get(stem + ".scale", {rows, (dim + 31) / 32});
    if (t.info->dtype != DType::F8_E4M3) fail(ck_.dir(), ": '", stem, ".weight' must be F8_E4M3");
    if (s.info->dtype != DType::F8_E8M0) fail(ck_.dir(), ": '", stem, ".scale' must be F8_E8M0");
    PackedWeight w;
    w.format = kernels::WeightFormat::kFp8Block;
    w.n = rows;
    w.k = dim;
    w.data = t.data;
    w.scales = s.data;
    w.scale_dtype = DType::F8_E8M0;
    w.block_n = 1;
    w.block_k = 32;
    return w;
  }

 private:
  const io::DeepseekV41Config& c_;
  const io::Checkpoint& ck_;
};

// Every backbone tensor must be there; the DSpark tensors all or none (*has_dspark).
void check_names(const io::DeepseekV41Config& c, const io::Checkpoint& ck, int64_t* side, bool* has_dspark) {
  const std::vector<std::string> want = expected_names(c, false), want_d = expected_names(c, true);
  const std::set<std::string> want_set(want.begin(), want.end()), want_d_set(want_d.begin(), want_d.end());
  std::vector<std::string> missing, unexpected;
  for (const std::string& n : want)
    if (!ck.has(n)) missing.push_back(n);
  if (c.vision.present)  // a vision_config promises the whole tower
    for (const VisionTensor& v : vision_tensors(c))
      if (!ck.has(v.name)) missing.push_back(v.name);
  *side = 0;
  int64_t dspark_found = 0;
  for (const std::string& n : ck.names()) {
    if (want_set.count(n)) continue;
    if (want_d_set.count(n)) ++dspark_found;
    else if (n.rfind("mtp.", 0) == 0 && !want_d.empty()) unexpected.push_back(n);  // a drafter we do not know
    else if (is_side_tensor(n)) ++*side;
    else unexpected.push_back(n);
  }
  *side += dspark_found;
  *has_dspark = !want_d.empty() && dspark_found == int64_t(want_d.size());
  if (dspark_found > 0 && !*has_dspark)
    for (const std::string& n : want_d)
      if (!ck.has(n)) missing.push_back(n);
  if (missing.empty() && unexpected.empty()) return;
  std::ostringstream os;
  auto list = [&](const char* what, const std::vector<std::string>& v) {
    if (v.empty()) return;
    os << "\n  " << v.size() << " " << what << ":";
    for (size_t i = 0; i < v.size() && i < 40; ++i) os << " " << v[i];
    if (v.size() > 40) os << " ...";
  };
  list("missing", missing);
  list("unexpected", unexpected);
  fail(ck.dir(), ": the checkpoint does not match config.json (DeepseekV41ForCausalLM)", os.str());
}

}  // namespace

std::vector<float> load_f32(const io::Checkpoint& ck, const std::string& name, const std::vector<int64_t>& shape) {
  const io::TensorRef t = ck.get(name, shape);
  const int64_t n = t.info->numel();
  std::vector<float> out(static_cast<size_t>(n));
  switch (t.info->dtype) {
    case DType::F32:
      for (int64_t i = 0; i < n; ++i) std::memcpy(&out[size_t(i)], t.data + 4 * i, 4);
      break;
    case DType::BF16:
    case DType::F16:
      for (int64_t i = 0; i < n; ++i) {
        uint16_t h;
        std::memcpy(&h, t.data + 2 * i, 2);
        out[size_t(i)] = t.info->dtype == DType::BF16 ? bf16_to_f32(h) : f16_to_f32(h);
      }
      break;
    default:
      fail(ck.dir(), ": tensor '", name, "' is ", dtype_name(t.info->dtype), ", expected F32, BF16 or F16");
  }
  return out;
}

namespace {

// One block's weights: a backbone layer (i >= 0) or a DSpark stage (i < 0, window only,
// `experts` routed experts).
LayerWeights load_layer(const io::DeepseekV41Config& c, const io::Checkpoint& ck, Loader& ld, const std::string& p,
                        int64_t i, int64_t experts, const ExpertParallel* ep) {
  const int64_t d = c.hidden_size, hc = c.hc_mult, D = c.head_dim, H = c.num_attention_heads;
  const int64_t mix = (2 + hc) * hc;
  LayerWeights lw;
  for (auto [site, name] : {std::pair<MhcSite*, const char*>{&lw.hc_attn, "attn"}, {&lw.hc_ffn, "ffn"}}) {
    const std::string s = p + "hc_" + name + "_";
    const io::TensorRef fn = ck.get(s + "fn", {mix, hc * d});
    if (fn.info->dtype != DType::F32) fail(ck.dir(), ": '", s, "fn' must be F32");
    site->fn = ld.plain(s + "fn", mix, hc * d);
    site->base = ld.vec(s + "base", {mix});
    site->scale = ld.vec(s + "scale", {3});
  }
  lw.attn_norm = ld.vec(p + "attn_norm.weight", {d});
  lw.ffn_norm = ld.vec(p + "ffn_norm.weight", {d});
  lw.wq_a = ld.lin(p + "attn.wq_a.weight", c.q_lora_rank, d);
  lw.q_norm = ld.vec(p + "attn.q_norm.weight", {c.q_lora_rank});
  lw.wq_b = ld.lin(p + "attn.wq_b.weight", H * D, c.q_lora_rank);
  lw.wkv = ld.lin(p + "attn.wkv.weight", D, d);
  lw.kv_norm = ld.vec(p + "attn.kv_norm.weight", {D});
  lw.wo_a = ld.lin(p + "attn.wo_a.weight", c.o_groups * c.o_lora_rank, H * D / c.o_groups);
  lw.wo_b = ld.lin(p + "attn.wo_b.weight", d, c.o_groups * c.o_lora_rank);
  lw.attn_sink = ld.vec(p + "attn.attn_sink", {H});
  if (c.o_lora_rank % lw.wo_a.block_n)
    fail(ck.dir(), ": o_lora_rank (", c.o_lora_rank, ") is not a multiple of the wo_a scale block (", lw.wo_a.block_n,
         "): the groups cannot be split");
  if (i >= 0 && c.is_kv_source(i)) {
    lw.comp_wkv = ld.plain(p + "attn.compressor.wkv.weight", D, d);
    if (c.compress_ratios[size_t(i)] > 1) lw.comp_wgate = ld.plain(p + "attn.compressor.wgate.weight", D, d);
    lw.comp_norm = ld.vec(p + "attn.compressor.norm.weight", {D});
    lw.idx_wk = ld.plain(p + "attn.indexer.wk.weight", c.index_head_dim, D);
    lw.idx_k_norm = ld.vec(p + "attn.indexer.k_norm.weight", {c.index_head_dim});
  }
  if (i >= 0 && c.is_index_source(i)) {
    lw.idx_wq_b = ld.lin(p + "attn.indexer.wq_b.weight", c.index_n_heads * c.index_head_dim, c.q_lora_rank);
    lw.idx_weights_proj = ld.plain(p + "attn.indexer.weights_proj.weight", c.index_n_heads, d);
  }
  MoeWeights& mw = lw.moe;
  mw.router = ld.plain(p + "ffn.gate.weight", experts, d);
  mw.selection_bias = ld.vec(p + "ffn.gate.bias", {experts});
  mw.selection_bias_alt = ld.vec(p + "ffn.gate.bias_vl", {experts});  // image-span tokens select with it
  const int64_t inter = c.moe_intermediate_size;
  auto expert = [&](const std::string& s) {
    MoeExpert e;
    e.w1 = ld.lin(s + ".w1.weight", inter, d);
    e.w3 = ld.lin(s + ".w3.weight", inter, d);
    e.w2 = ld.lin(s + ".w2.weight", d, inter);
    return e;
  };
  for (int64_t e = 0; e < experts; ++e) {
    if (i >= 0 && ep && !ep->loads_expert(e)) continue;  // another rank's share
    mw.experts.push_back(expert(p + "ffn.experts." + std::to_string(e)));
    if (i >= 0 && ep) mw.expert_ids.push_back(int32_t(e));
  }
  for (int64_t s = 0; s < c.n_shared_experts; ++s)
    mw.shared.push_back(expert(p + "ffn.shared_experts" + (c.n_shared_experts > 1 ? "." + std::to_string(s) : "")));
  const int64_t ei = i >= 0 ? c.engram_index(i) : -1;
  if (ei >= 0) {
    lw.has_engram = true;
    const int64_t cols = (c.engram_max_ngram_size - 1) * c.engram_n_heads;
    lw.engram.table = ld.engram_table(p + "engram.embed", c.engram_num_embeddings[size_t(ei)], c.engram_head_dim);
    lw.engram.wkv = ld.lin(p + "engram.wkv.weight", (hc + 1) * d, cols * c.engram_head_dim);
    const std::vector<float> q = ld.vec(p + "engram.q_weight", {hc, d}), k = ld.vec(p + "engram.k_weight", {hc, d});
    lw.engram.lambda.resize(q.size());
    for (size_t j = 0; j < q.size(); ++j) lw.engram.lambda[j] = q[j] * k[j];
  }
  return lw;
}

}  // namespace

Weights load_weights(const io::DeepseekV41Config& c, const io::Checkpoint& ck, const ExpertParallel* ep) {
  Weights W;
  check_names(c, ck, &W.mtp_tensors, &W.has_dspark);
  Loader ld(c, ck);
  const int64_t d = c.hidden_size;
  W.embed = ld.plain("embed.weight", c.vocab_size, d);
  W.head = ld.plain("head.weight", c.vocab_size, d);
  W.norm = ld.vec("norm.weight", {d});
  for (int64_t i = 0; i < c.num_hidden_layers; ++i) W.layers.push_back(load_layer(c, ck, ld, L(i), i, c.n_routed_experts, ep));
  if (W.has_dspark) {
    DsparkWeights& ds = W.dspark;
    const int64_t S = c.num_nextn_predict_layers, r = c.dspark_markov_rank;
    for (int64_t k = 0; k < S; ++k)
      ds.stages.push_back(load_layer(c, ck, ld, "mtp." + std::to_string(k) + ".", -1, c.dspark_n_routed_experts, nullptr));
    ds.main_proj = ld.lin("mtp.0.main_proj.weight", d, int64_t(c.dspark_target_layer_ids.size()) * d);
    ds.main_norm = ld.vec("mtp.0.main_norm.weight", {d});
    const std::string last = "mtp." + std::to_string(S - 1) + ".";
    ds.norm = ld.vec(last + "norm.weight", {d});
    ds.markov_w1 = ld.plain(last + "markov_head.markov_w1.weight", c.vocab_size, r);
    ds.markov_w2 = ld.plain(last + "markov_head.markov_w2.weight", c.vocab_size, r);
    ds.confidence = ld.vec(last + "confidence_head.proj.weight", {1, d + r});
  }
  return W;
}

}  // namespace gannet::model::deepseek_v41

namespace gannet::model::deepseek_v41 {

SizeSummary size_summary(const io::DeepseekV41Config& c) {
  SizeSummary s;
  const double expert_share = double(c.num_experts_per_tok) / double(c.n_routed_experts);
  const double engram_rows = double((c.engram_max_ngram_size - 1) * c.engram_n_heads);
  for (const TensorPlan& t : tensor_plan(c)) {
    if (t.vision) {  // runs once per image, not per token
      s.vision_params += t.params;
      s.vision_bytes += t.bytes;
      continue;
    }
    if (t.dspark) {  // the drafter runs once per step, not per token: not in the per-token read
      s.dspark_params += t.params;
      continue;
    }
    s.params += t.params;
    s.weight_bytes += t.bytes;
    s.bytes_by_dtype[std::string(dtype_name(t.dtype))] += t.bytes;
    double read = double(t.bytes);
    if (t.routed_expert) read *= expert_share;
    else if (t.engram_table) read *= engram_rows / double(t.shape[0]);
    else if (t.name == "embed.weight") read /= double(c.vocab_size);
    s.read_bytes_per_token += uint64_t(read);
  }
  return s;
}

}  // namespace gannet::model::deepseek_v41
