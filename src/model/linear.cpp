#include "model/linear.h"

#include "core/error.h"
#include "kernels/cpu/matmul.h"

namespace gannet::model {

namespace {

void to_f32(const io::TensorRef& t, int64_t n, float* dst) {
  switch (t.info->dtype) {
    case DType::F32: std::memcpy(dst, t.data, size_t(n) * 4); return;
    // Element by element through memcpy: the tensor may sit at any byte offset.
    case DType::BF16:
    case DType::F16: {
      const bool bf16 = t.info->dtype == DType::BF16;
      for (int64_t i = 0; i < n; ++i) {
        uint16_t h;
        std::memcpy(&h, t.data + 2 * i, 2);
        dst[i] = bf16 ? bf16_to_f32(h) : f16_to_f32(h);
      }
      return;
    }
    default:
      fail(*t.file, ": tensor '", t.info->name, "' has dtype ", dtype_name(t.info->dtype),
           "; dense models need F32, BF16 or F16");
  }
}

}  // namespace

std::vector<float> load_vector_f32(const io::Checkpoint& ckpt, const std::string& name, int64_t n) {
  io::TensorRef t = ckpt.get(name, {n});
  std::vector<float> v(static_cast<size_t>(n));
  to_f32(t, n, v.data());
  return v;
}

Linear::Linear(const io::Checkpoint& ckpt, const std::string& name, int64_t out, int64_t in,
               const std::string& bias_name)
    : in_(in), out_(out) {
  io::TensorRef t = ckpt.get(name, {out, in});
  switch (t.info->dtype) {
    case DType::F32:
    case DType::BF16:
      dtype_ = t.info->dtype;
      w_ = t.data;
      // Used in place; the alignment check below rejects a tensor at an offset that is not
      // a multiple of its element size.
      break;
    case DType::F16: {
      auto widened = std::make_shared<std::vector<float>>(size_t(in) * size_t(out));
      to_f32(t, in * out, widened->data());
      owned_ = widened;
      dtype_ = DType::F32;
      w_ = owned_->data();
      break;
    }
    default:
      fail(*t.file, ": tensor '", name, "' has dtype ", dtype_name(t.info->dtype),
           "; dense models need F32, BF16 or F16");
  }
  if (reinterpret_cast<uintptr_t>(w_) % dtype_size(dtype_) != 0)
    fail(*t.file, ": tensor '", name, "' is not aligned to its element size");
  if (!bias_name.empty()) bias_ = load_vector_f32(ckpt, bias_name, out);
}

void Linear::forward(const float* x, int64_t m, float* y, ThreadPool* pool) const {
  if (dtype_ == DType::BF16)
    kernels::matmul_bf16(x, m, in_, static_cast<const uint16_t*>(w_), out_, y, pool);
  else
    kernels::matmul_f32(x, m, in_, static_cast<const float*>(w_), out_, y, pool);
  if (!bias_.empty())
    for (int64_t i = 0; i < m; ++i)
      for (int64_t j = 0; j < out_; ++j) y[i * out_ + j] += bias_[size_t(j)];
}

void Linear::row_f32(int64_t r, float* dst) const {
  GANNET_CHECK(r >= 0 && r < out_, "row ", r, " of ", out_);
  if (dtype_ == DType::BF16) {
    const uint16_t* s = static_cast<const uint16_t*>(w_) + r * in_;
    for (int64_t i = 0; i < in_; ++i) dst[i] = bf16_to_f32(s[i]);
  } else {
    std::memcpy(dst, static_cast<const float*>(w_) + r * in_, size_t(in_) * 4);
  }
}

}  // namespace gannet::model
