#include "model/linear.h"

#include "core/error.h"
#include "kernels/cpu/fake_quant.h"
#include "kernels/cpu/matmul.h"
#include "kernels/cpu/packed_matmul.h"
#include "kernels/cpu/packed_quantize.h"
#include "model/packed_weight_loader.h"

namespace gannet::model {

using kernels::WeightFormat;

std::vector<float> load_vector_f32(const io::Checkpoint& ckpt, const std::string& name, int64_t n) {
  io::TensorRef t = ckpt.get(name, {n});
  std::vector<float> v(static_cast<size_t>(n));
  switch (t.info->dtype) {
    case DType::F32: std::memcpy(v.data(), t.data, size_t(n) * 4); break;
    // Element by element through memcpy: the tensor may sit at any byte offset.
    case DType::BF16:
    case DType::F16: {
      const bool bf16 = t.info->dtype == DType::BF16;
      for (int64_t i = 0; i < n; ++i) {
        uint16_t h;
        std::memcpy(&h, t.data + 2 * i, 2);
        v[size_t(i)] = bf16 ? bf16_to_f32(h) : f16_to_f32(h);
      }
      break;
    }
    default:
      fail(*t.file, ": tensor '", name, "' has dtype ", dtype_name(t.info->dtype), "; expected F32, BF16 or F16");
  }
  return v;
}

Linear::Linear(const io::Checkpoint& ckpt, const std::string& name, int64_t out, int64_t in,
               const std::string& bias_name, const LinearLoad& load) {
  w_ = load_packed_weight(ckpt, name, out, in, load.fp8_block);
  if (w_.format == WeightFormat::kF16) {
    // The f32 kernels run it: widened once, the same values the f16 reference decodes.
    auto widened = std::make_shared<std::vector<float>>(size_t(in) * size_t(out));
    for (int64_t r = 0; r < out; ++r) w_.dequant_row(r, widened->data() + r * in);
    owned_ = widened;
    w_.format = WeightFormat::kF32;
    w_.data = widened->data();
  }
  // The f32 and bf16 kernels read the mapped tensor in place with aligned element loads.
  if ((w_.format == WeightFormat::kF32 || w_.format == WeightFormat::kBF16) &&
      reinterpret_cast<uintptr_t>(w_.data) % (w_.format == WeightFormat::kF32 ? 4 : 2) != 0)
    fail(ckpt.dir(), ": tensor '", name, "' is not aligned to its element size");
  if (load.quantize != io::WeightQuantization::Method::kNone) quantize(load.quantize, name);
  if (load.exact_activations && (w_.format == WeightFormat::kFp8Block || w_.format == WeightFormat::kMxfp4)) {
    act_block_ = w_.block_k;
    act_pow2_ = load.pow2_activation_scales || w_.format == WeightFormat::kMxfp4;
  }
  if (!bias_name.empty()) bias_ = load_vector_f32(ckpt, bias_name, out);
}

void Linear::quantize(io::WeightQuantization::Method m, const std::string& name) {
  if (w_.format != WeightFormat::kF32 && w_.format != WeightFormat::kBF16 && w_.format != WeightFormat::kF16) return;
  const kernels::PackedWeight src = w_;
  auto row = [&src](int64_t r, float* out) { src.dequant_row(r, out); };
  std::shared_ptr<kernels::OwnedPackedWeight> q;
  try {
    switch (m) {
      case io::WeightQuantization::Method::kNone: return;
      case io::WeightQuantization::Method::kInt8Row: q = kernels::quantize_int8_row(src.n, src.k, row); break;
      case io::WeightQuantization::Method::kFp8Block: q = kernels::quantize_fp8_block(src.n, src.k, 128, row, kernels::Fp8Scales::kPow2); break;
    }
  } catch (const Error& e) {
    fail("--quantize ", io::quant_method_name(m), ": tensor '", name, "': ", e.what());
  }
  w_ = q->w;
  owned_ = q;
}

void Linear::forward(const float* x, int64_t m, float* y, ThreadPool* pool) const {
  const int64_t in = w_.k, out = w_.n;
  switch (w_.format) {
    case WeightFormat::kBF16:
      kernels::matmul_bf16(x, m, in, static_cast<const uint16_t*>(w_.data), out, y, pool);
      break;
    case WeightFormat::kF32: kernels::matmul_f32(x, m, in, static_cast<const float*>(w_.data), out, y, pool); break;
    default:
      if (act_block_ > 0) {
        // Exact mode: the product sees the activations the FP8 kernel would (grows only).
        thread_local std::vector<float> xq;
        if (xq.size() < size_t(m * in)) xq.resize(size_t(m * in));
        std::memcpy(xq.data(), x, size_t(m * in) * 4);
        for (int64_t i = 0; i < m; ++i) kernels::fake_quant_fp8(xq.data() + i * in, in, act_block_, act_pow2_);
        kernels::matmul_packed(xq.data(), m, w_, y, pool);
      } else {
        kernels::matmul_packed(x, m, w_, y, pool);
      }
      break;
  }
  if (!bias_.empty())
    for (int64_t i = 0; i < m; ++i)
      for (int64_t j = 0; j < out; ++j) y[i * out + j] += bias_[size_t(j)];
}

void Linear::row_f32(int64_t r, float* dst) const {
  GANNET_CHECK(r >= 0 && r < w_.n, "row ", r, " of ", w_.n);
  w_.dequant_row(r, dst);
}

}  // namespace gannet::model
