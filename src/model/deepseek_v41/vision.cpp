#include "model/deepseek_v41/vision.h"

#include <cmath>
#include <cstring>

#include "core/error.h"
#include "kernels/cpu/gelu.h"
#include "kernels/cpu/matmul.h"
#include "kernels/cpu/packed_matmul.h"
#include "kernels/cpu/rmsnorm.h"
#include "kernels/cpu/softmax.h"
#include "kernels/cpu/activations.h"
#include "model/deepseek_v41/weights.h"
#include "model/packed_weight_loader.h"
#include "vision/preprocessor_config.h"

namespace gannet::model::deepseek_v41 {

namespace {

constexpr float kVisionEps = 1e-6f;

kernels::PackedWeight plain_weight(const io::Checkpoint& ck, const std::string& name, int64_t n, int64_t k) {
  kernels::PackedWeight w = load_packed_weight(ck, name, n, k);
  if (w.format != kernels::WeightFormat::kF32 && w.format != kernels::WeightFormat::kBF16 &&
      w.format != kernels::WeightFormat::kF16)
    fail(ck.dir(), ": tensor '", name, "' must be BF16, F16 or F32 (the vision tower has no FP8 scales)");
  return w;
}

// y [m, n] = x W^T + b
void linear(const float* x, int64_t m, const kernels::PackedWeight& w, const float* b, float* y, ThreadPool* pool) {
  kernels::matmul_packed(x, m, w, y, pool);
  if (b)
    for (int64_t i = 0; i < m; ++i)
      for (int64_t j = 0; j < w.n; ++j) y[i * w.n + j] += b[j];
}

}  // namespace

std::vector<VisionTensor> vision_tensors(const io::DeepseekV41Config& c) {
  const auto& v = c.vision;
  const int64_t C = v.hidden_size, I = v.intermediate_size, p = v.patch_size, r = v.downsample_ratio, D = c.hidden_size;
  std::vector<VisionTensor> t = {{"vision.patch_embed.proj.weight", {C, 3 * p * p}}, {"vision.patch_embed.proj.bias", {C}}};
  for (int64_t i = 0; i < v.num_hidden_layers; ++i) {
    const std::string b = "vision.blocks." + std::to_string(i) + ".";
    t.push_back({b + "norm1.weight", {C}});
    t.push_back({b + "norm2.weight", {C}});
    t.push_back({b + "attn.wqkv.weight", {3 * C, C}});
    t.push_back({b + "attn.wqkv.bias", {3 * C}});
    t.push_back({b + "attn.wo.weight", {C, C}});
    t.push_back({b + "attn.wo.bias", {C}});
    t.push_back({b + "mlp.w1.weight", {2 * I, C}});
    t.push_back({b + "mlp.w2.weight", {C, I}});
  }
  t.push_back({"vision.norm.weight", {C}});
  t.push_back({"aligner.w1.weight", {D, r * r * C}});
  t.push_back({"aligner.w1.bias", {D}});
  t.push_back({"aligner.w2.weight", {D, D}});
  t.push_back({"aligner.w2.bias", {D}});
  for (const char* n : {"image_start", "image_end", "image_newline"}) t.push_back({n, {D}});
  return t;
}

VisionWeights load_vision_weights(const io::DeepseekV41Config& c, const io::Checkpoint& ck) {
  const auto& v = c.vision;
  const int64_t C = v.hidden_size, I = v.intermediate_size, p = v.patch_size, r = v.downsample_ratio, D = c.hidden_size;
  VisionWeights w;
  w.patch_embed = plain_weight(ck, "vision.patch_embed.proj.weight", C, 3 * p * p);
  w.patch_bias = load_f32(ck, "vision.patch_embed.proj.bias", {C});
  for (int64_t i = 0; i < v.num_hidden_layers; ++i) {
    const std::string b = "vision.blocks." + std::to_string(i) + ".";
    VisionBlockWeights bw;
    bw.norm1 = load_f32(ck, b + "norm1.weight", {C});
    bw.norm2 = load_f32(ck, b + "norm2.weight", {C});
    bw.wqkv = plain_weight(ck, b + "attn.wqkv.weight", 3 * C, C);
    bw.bqkv = load_f32(ck, b + "attn.wqkv.bias", {3 * C});
    bw.wo = plain_weight(ck, b + "attn.wo.weight", C, C);
    bw.bo = load_f32(ck, b + "attn.wo.bias", {C});
    bw.w1 = plain_weight(ck, b + "mlp.w1.weight", 2 * I, C);
    bw.w2 = plain_weight(ck, b + "mlp.w2.weight", C, I);
    w.blocks.push_back(std::move(bw));
  }
  w.norm = load_f32(ck, "vision.norm.weight", {C});
  w.aligner_w1 = plain_weight(ck, "aligner.w1.weight", D, r * r * C);
  w.aligner_b1 = load_f32(ck, "aligner.w1.bias", {D});
  w.aligner_w2 = plain_weight(ck, "aligner.w2.weight", D, D);
  w.aligner_b2 = load_f32(ck, "aligner.w2.bias", {D});
  w.start = load_f32(ck, "image_start", {D});
  w.end = load_f32(ck, "image_end", {D});
  w.newline = load_f32(ck, "image_newline", {D});
  return w;
}

int64_t VisionEncoder::span_tokens(int64_t gh, int64_t gw) const {
  const int64_t r = c_.vision.downsample_ratio, Hh = (gh + r - 1) / r, Ww = (gw + r - 1) / r;
  return Hh * (Ww + 1) + 2;
}

std::vector<float> VisionEncoder::vit(const float* pixels, int64_t gh, int64_t gw, ThreadPool* pool) const {
  const auto& v = c_.vision;
  const int64_t N = gh * gw, C = v.hidden_size, H = v.num_attention_heads, hd = C / H, I = v.intermediate_size;
  if (N <= 0) fail("an image needs at least one patch");
  std::vector<float> x(size_t(N * C));
  linear(pixels, N, w_.patch_embed, w_.patch_bias.data(), x.data(), pool);

  // 2D RoPE (Qwen2-VL's vision rotary, rotate_half pairs i and i + hd/2): pairs
  // j < hd/4 turn by the patch row h * inv_freq[j], pairs hd/4 <= j < hd/2 by the column.
  // cos / sin [N, hd/2], float32 as transformers computes them.
  const int64_t half = hd / 2, quarter = hd / 4;
  std::vector<float> cs(size_t(N * half)), sn(size_t(N * half));
  {
    std::vector<float> inv(static_cast<size_t>(quarter));
    for (int64_t j = 0; j < quarter; ++j)
      inv[size_t(j)] = 1.0f / std::pow(float(v.rope_theta), float(2 * j) / float(half));
    for (int64_t k = 0; k < N; ++k)
      for (int64_t j = 0; j < half; ++j) {
        const float a = float(j < quarter ? k / gw : k % gw) * inv[size_t(j % quarter)];
        cs[size_t(k * half + j)] = std::cos(a);
        sn[size_t(k * half + j)] = std::sin(a);
      }
  }
  auto rope = [&](float* row, int64_t k) {  // one head's [hd] of patch k
    const float* c = &cs[size_t(k * half)];
    const float* s = &sn[size_t(k * half)];
    for (int64_t i = 0; i < half; ++i) {
      const float a = row[i], b = row[i + half];
      row[i] = a * c[i] - b * s[i];
      row[i + half] = b * c[i] + a * s[i];
    }
  };

  std::vector<float> h(size_t(N * C)), qkv(size_t(N * 3 * C)), o(size_t(N * C)), y(size_t(N * C));
  std::vector<float> q(size_t(N * hd)), k(size_t(N * hd)), vt(size_t(hd * N)), sc(size_t(N * N)), oh(size_t(N * hd));
  std::vector<float> gu(size_t(N * 2 * I)), act(size_t(N * I));
  const float scale = 1.0f / std::sqrt(float(hd));
  for (const VisionBlockWeights& b : w_.blocks) {
    kernels::rmsnorm(x.data(), b.norm1.data(), h.data(), N, C, kVisionEps);
    linear(h.data(), N, b.wqkv, b.bqkv.data(), qkv.data(), pool);
    for (int64_t hh = 0; hh < H; ++hh) {
      for (int64_t t = 0; t < N; ++t) {
        const float* row = &qkv[size_t(t * 3 * C)];
        std::memcpy(&q[size_t(t * hd)], row + hh * hd, size_t(hd) * 4);
        std::memcpy(&k[size_t(t * hd)], row + C + hh * hd, size_t(hd) * 4);
        for (int64_t i = 0; i < hd; ++i) vt[size_t(i * N + t)] = row[2 * C + hh * hd + i];
        rope(&q[size_t(t * hd)], t);
        rope(&k[size_t(t * hd)], t);
      }
      // Bidirectional attention over the image's own patches.
      kernels::matmul_f32(q.data(), N, hd, k.data(), N, sc.data(), pool);
      for (int64_t t = 0; t < N; ++t) {
        float* s = &sc[size_t(t * N)];
        for (int64_t j = 0; j < N; ++j) s[j] *= scale;
        kernels::softmax(s, N);
      }
      kernels::matmul_f32(sc.data(), N, N, vt.data(), hd, oh.data(), pool);
      for (int64_t t = 0; t < N; ++t) std::memcpy(&o[size_t(t * C + hh * hd)], &oh[size_t(t * hd)], size_t(hd) * 4);
    }
    linear(o.data(), N, b.wo, b.bo.data(), y.data(), pool);
    for (int64_t i = 0; i < N * C; ++i) x[size_t(i)] += y[size_t(i)];
    kernels::rmsnorm(x.data(), b.norm2.data(), h.data(), N, C, kVisionEps);
    linear(h.data(), N, b.w1, nullptr, gu.data(), pool);
    for (int64_t t = 0; t < N; ++t)
      kernels::silu_mul(&gu[size_t(t * 2 * I)], &gu[size_t(t * 2 * I + I)], &act[size_t(t * I)], I);
    linear(act.data(), N, b.w2, nullptr, y.data(), pool);
    for (int64_t i = 0; i < N * C; ++i) x[size_t(i)] += y[size_t(i)];
  }
  kernels::rmsnorm(x.data(), w_.norm.data(), h.data(), N, C, kVisionEps);
  return h;
}

std::vector<float> VisionEncoder::align(const float* f, int64_t gh, int64_t gw, ThreadPool* pool) const {
  const int64_t C = c_.vision.hidden_size, r = c_.vision.downsample_ratio, D = c_.hidden_size;
  const int64_t Hh = (gh + r - 1) / r, Ww = (gw + r - 1) / r, K = r * r * C;
  // One row per r x r window (zero beyond the grid), feature c * r^2 + kh * r + kw.
  std::vector<float> rows(size_t(Hh * Ww * K), 0.0f);
  for (int64_t i = 0; i < Hh; ++i)
    for (int64_t j = 0; j < Ww; ++j) {
      float* dst = &rows[size_t((i * Ww + j) * K)];
      for (int64_t kh = 0; kh < r; ++kh)
        for (int64_t kw = 0; kw < r; ++kw) {
          const int64_t y = i * r + kh, x = j * r + kw;
          if (y >= gh || x >= gw) continue;
          const float* src = f + (y * gw + x) * C;
          for (int64_t c = 0; c < C; ++c) dst[c * r * r + kh * r + kw] = src[c];
        }
    }
  std::vector<float> mid(size_t(Hh * Ww * D)), out(size_t(Hh * Ww * D));
  linear(rows.data(), Hh * Ww, w_.aligner_w1, w_.aligner_b1.data(), mid.data(), pool);
  for (float& z : mid) z = kernels::gelu_erf_f32(z);
  linear(mid.data(), Hh * Ww, w_.aligner_w2, w_.aligner_b2.data(), out.data(), pool);
  return out;
}

std::vector<float> VisionEncoder::encode(const float* pixels, int64_t gh, int64_t gw, ThreadPool* pool) const {
  const int64_t r = c_.vision.downsample_ratio, D = c_.hidden_size;
  const int64_t Hh = (gh + r - 1) / r, Ww = (gw + r - 1) / r;
  const std::vector<float> rows = align(vit(pixels, gh, gw, pool).data(), gh, gw, pool);
  std::vector<float> span(size_t(span_tokens(gh, gw) * D));
  float* dst = span.data();
  auto put = [&](const float* row) {
    std::memcpy(dst, row, size_t(D) * 4);
    dst += D;
  };
  put(w_.start.data());
  for (int64_t i = 0; i < Hh; ++i) {
    for (int64_t j = 0; j < Ww; ++j) put(&rows[size_t((i * Ww + j) * D)]);
    put(w_.newline.data());
  }
  put(w_.end.data());
  return span;
}

vision::ImageProcessorConfig image_processor_config(const io::DeepseekV41Config& c, const std::string& dir) {
  vision::ImageProcessorConfig ic;
  ic.patch_size = int(c.vision.patch_size);
  ic.downsample_ratio = int(c.vision.downsample_ratio);
  ic.min_pixels = c.vision.min_pixels;
  ic.max_image_tokens = c.vision.max_image_tokens;
  if (c.vision.max_wh_ratio > 0) ic.max_wh_ratio = c.vision.max_wh_ratio;
  return vision::load_preprocessor_config(dir, ic);
}

double vision_macs(const io::DeepseekV41Config& c_, int64_t gh, int64_t gw) {
  const auto& v = c_.vision;
  const double N = double(gh * gw), C = double(v.hidden_size), I = double(v.intermediate_size);
  const double p2 = double(v.patch_size * v.patch_size), r = double(v.downsample_ratio), D = double(c_.hidden_size);
  const double rows = std::ceil(double(gh) / r) * std::ceil(double(gw) / r);
  const double block = N * (3 * C * C + C * C + 3 * C * I) + 2 * N * N * C;  // linears + QK^T and PV
  return N * 3 * p2 * C + double(v.num_hidden_layers) * block + rows * (r * r * C * D + D * D);
}

}  // namespace gannet::model::deepseek_v41
