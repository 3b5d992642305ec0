#include "model/deepseek_v41/weights.h"

#include <algorithm>
#include <set>
#include <sstream>

#include "core/dtype.h"
#include "core/error.h"
#include "model/packed_weight_loader.h"

namespace gannet::model::deepseek_v41 {

namespace {

using kernels::PackedWeight;

std::string L(int64_t i) { return "layers." + std::to_string(i) + "."; }

// Every backbone tensor name the config implies (scales included).
std::vector<std::string> expected_names(const io::DeepseekV41Config& c) {
  std::vector<std::string> out = {"embed.weight", "head.weight", "norm.weight"};
  auto linear = [&](const std::string& stem) {
    out.push_back(stem + ".weight");
    out.push_back(stem + ".scale");
  };
  for (int64_t i = 0; i < c.num_hidden_layers; ++i) {
    const std::string p = L(i);
    for (const char* s : {"attn_norm.weight", "ffn_norm.weight", "hc_attn_fn", "hc_attn_base", "hc_attn_scale",
                          "hc_ffn_fn", "hc_ffn_base", "hc_ffn_scale", "attn.q_norm.weight", "attn.kv_norm.weight",
                          "attn.attn_sink", "ffn.gate.weight", "ffn.gate.bias", "ffn.gate.bias_vl"})
      out.push_back(p + s);
    for (const char* s : {"attn.wq_a", "attn.wq_b", "attn.wkv", "attn.wo_a", "attn.wo_b"}) linear(p + s);
    if (c.is_kv_source(i)) {
      out.push_back(p + "attn.compressor.wkv.weight");
      if (c.compress_ratios[size_t(i)] > 1) out.push_back(p + "attn.compressor.wgate.weight");
      out.push_back(p + "attn.compressor.norm.weight");
      out.push_back(p + "attn.indexer.wk.weight");
      out.push_back(p + "attn.indexer.k_norm.weight");
    }
    if (c.is_index_source(i)) {
      linear(p + "attn.indexer.wq_b");
      out.push_back(p + "attn.indexer.weights_proj.weight");
    }
    for (int64_t s = 0; s < c.n_shared_experts; ++s)
      for (const char* w : {"w1", "w2", "w3"})
        linear(p + "ffn.shared_experts" + (c.n_shared_experts > 1 ? "." + std::to_string(s) : "") + "." + w);
    for (int64_t e = 0; e < c.n_routed_experts; ++e)
      for (const char* w : {"w1", "w2", "w3"}) linear(p + "ffn.experts." + std::to_string(e) + "." + w);
    if (c.engram_index(i) >= 0) {
      linear(p + "engram.embed");
      linear(p + "engram.wkv");
      out.push_back(p + "engram.q_weight");
      out.push_back(p + "engram.k_weight");
    }
  }
  return out;
}

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

  // A small tensor of `shape` as f32 (F32, BF16 or F16 storage).
  std::vector<float> vec(const std::string& name, const std::vector<int64_t>& shape) {
    const io::TensorRef t = ck_.get(name, shape);
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
        fail(ck_.dir(), ": tensor '", name, "' is ", dtype_name(t.info->dtype), ", expected F32, BF16 or F16");
    }
    return out;
  }

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

void check_names(const io::DeepseekV41Config& c, const io::Checkpoint& ck, int64_t* side) {
  const std::vector<std::string> want = expected_names(c);
  const std::set<std::string> want_set(want.begin(), want.end());
  std::vector<std::string> missing, unexpected;
  for (const std::string& n : want)
    if (!ck.has(n)) missing.push_back(n);
  *side = 0;
  for (const std::string& n : ck.names()) {
    if (want_set.count(n)) continue;
    if (is_side_tensor(n)) ++*side;
    else unexpected.push_back(n);
  }
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

Weights load_weights(const io::DeepseekV41Config& c, const io::Checkpoint& ck) {
  Weights W;
  check_names(c, ck, &W.mtp_tensors);
  Loader ld(c, ck);
  const int64_t d = c.hidden_size, hc = c.hc_mult, D = c.head_dim, H = c.num_attention_heads;
  const int64_t mix = (2 + hc) * hc;
  W.embed = ld.plain("embed.weight", c.vocab_size, d);
  W.head = ld.plain("head.weight", c.vocab_size, d);
  W.norm = ld.vec("norm.weight", {d});
  W.layers.resize(size_t(c.num_hidden_layers));
  for (int64_t i = 0; i < c.num_hidden_layers; ++i) {
    LayerWeights& lw = W.layers[size_t(i)];
    const std::string p = L(i);
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
      fail(ck.dir(), ": o_lora_rank (", c.o_lora_rank, ") is not a multiple of the wo_a scale block (",
           lw.wo_a.block_n, "): the groups cannot be split");
    if (c.is_kv_source(i)) {
      lw.comp_wkv = ld.plain(p + "attn.compressor.wkv.weight", D, d);
      if (c.compress_ratios[size_t(i)] > 1) lw.comp_wgate = ld.plain(p + "attn.compressor.wgate.weight", D, d);
      lw.comp_norm = ld.vec(p + "attn.compressor.norm.weight", {D});
      lw.idx_wk = ld.plain(p + "attn.indexer.wk.weight", c.index_head_dim, D);
      lw.idx_k_norm = ld.vec(p + "attn.indexer.k_norm.weight", {c.index_head_dim});
    }
    if (c.is_index_source(i)) {
      lw.idx_wq_b = ld.lin(p + "attn.indexer.wq_b.weight", c.index_n_heads * c.index_head_dim, c.q_lora_rank);
      lw.idx_weights_proj = ld.plain(p + "attn.indexer.weights_proj.weight", c.index_n_heads, d);
    }
    MoeWeights& mw = lw.moe;
    mw.router = ld.plain(p + "ffn.gate.weight", c.n_routed_experts, d);
    mw.selection_bias = ld.vec(p + "ffn.gate.bias", {c.n_routed_experts});
    lw.gate_bias_vl = ld.vec(p + "ffn.gate.bias_vl", {c.n_routed_experts});
    const int64_t inter = c.moe_intermediate_size;
    auto expert = [&](const std::string& s) {
      MoeExpert e;
      e.w1 = ld.lin(s + ".w1.weight", inter, d);
      e.w3 = ld.lin(s + ".w3.weight", inter, d);
      e.w2 = ld.lin(s + ".w2.weight", d, inter);
      return e;
    };
    for (int64_t e = 0; e < c.n_routed_experts; ++e) mw.experts.push_back(expert(p + "ffn.experts." + std::to_string(e)));
    for (int64_t s = 0; s < c.n_shared_experts; ++s)
      mw.shared.push_back(expert(p + "ffn.shared_experts" + (c.n_shared_experts > 1 ? "." + std::to_string(s) : "")));
    const int64_t ei = c.engram_index(i);
    if (ei >= 0) {
      lw.has_engram = true;
      const int64_t cols = (c.engram_max_ngram_size - 1) * c.engram_n_heads;
      lw.engram.table = ld.engram_table(p + "engram.embed", c.engram_num_embeddings[size_t(ei)], c.engram_head_dim);
      lw.engram.wkv = ld.lin(p + "engram.wkv.weight", (hc + 1) * d, cols * c.engram_head_dim);
      const std::vector<float> q = ld.vec(p + "engram.q_weight", {hc, d}), k = ld.vec(p + "engram.k_weight", {hc, d});
      lw.engram.lambda.resize(q.size());
      for (size_t j = 0; j < q.size(); ++j) lw.engram.lambda[j] = q[j] * k[j];
    }
  }
  return W;
}

}  // namespace gannet::model::deepseek_v41
