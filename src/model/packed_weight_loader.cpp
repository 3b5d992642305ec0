#include "model/packed_weight_loader.h"

#include <optional>

#include "core/error.h"

namespace gannet::model {

namespace {

using io::shape_str;

std::string stem_of(const std::string& name) {
  const std::string suffix = ".weight";
  if (name.size() > suffix.size() && name.compare(name.size() - suffix.size(), suffix.size(), suffix) == 0)
    return name.substr(0, name.size() - suffix.size());
  return name;
}

// The first present name among the conventions, or nullopt.
std::optional<std::string> find_scale(const io::Checkpoint& ckpt, std::initializer_list<std::string> candidates) {
  for (const std::string& c : candidates)
    if (ckpt.has(c)) return c;
  return std::nullopt;
}

}  // namespace

kernels::PackedWeight load_packed_weight(const io::Checkpoint& ckpt, const std::string& name, int64_t n, int64_t k,
                                         int64_t fp8_block) {
  using kernels::WeightFormat;
  const io::TensorRef t = ckpt.get(name);
  const std::vector<int64_t>& shape = t.info->shape;
  const DType dt = t.info->dtype;
  const std::string stem = stem_of(name);
  kernels::PackedWeight w;
  w.n = n;
  w.k = k;
  w.data = t.data;
  auto bad_shape = [&](const std::vector<int64_t>& want) {
    fail(ckpt.dir(), ": tensor '", name, "' (", dtype_name(dt), ") has shape ", shape_str(shape),
         " but config.json implies ", shape_str(want));
  };
  switch (dt) {
    case DType::F32:
    case DType::BF16:
    case DType::F16:
      if (shape != std::vector<int64_t>{n, k}) bad_shape({n, k});
      w.format = dt == DType::F32 ? WeightFormat::kF32 : dt == DType::BF16 ? WeightFormat::kBF16 : WeightFormat::kF16;
      return w;
    case DType::F8_E4M3: {
      if (shape != std::vector<int64_t>{n, k}) bad_shape({n, k});
      auto sname = find_scale(ckpt, {name + "_scale_inv", stem + ".scale"});
      if (!sname)
        fail(ckpt.dir(), ": FP8 tensor '", name, "' has no block scales ('", name, "_scale_inv' or '", stem,
             ".scale')");
      const io::TensorRef s = ckpt.get(*sname);
      if (s.info->dtype != DType::F32 && s.info->dtype != DType::F8_E8M0)
        fail(ckpt.dir(), ": scale tensor '", *sname, "' is ", dtype_name(s.info->dtype), ", expected F32 or F8_E8M0");
      const std::vector<int64_t>& ss = s.info->shape;
      auto fits = [&](int64_t b) {
        return ss == std::vector<int64_t>{(n + b - 1) / b, (k + b - 1) / b};
      };
      int64_t block = fp8_block;
      if (block <= 0)
        for (int64_t b : {128, 64, 32, 16})
          if (fits(b)) {
            block = b;
            break;
          }
      if (block <= 0 || !fits(block)) {
        const int64_t b = block > 0 ? block : 128;
        fail(ckpt.dir(), ": scale tensor '", *sname, "' has shape ", shape_str(ss), ", expected ",
             shape_str({(n + b - 1) / b, (k + b - 1) / b}), " for ", b, "x", b, " blocks of '", name, "' ",
             shape_str({n, k}));
      }
      w.format = WeightFormat::kFp8Block;
      w.scales = s.data;
      w.scale_dtype = s.info->dtype;
      w.block_n = w.block_k = block;
      w.scan_codes();
      return w;
    }
    case DType::I8:
    case DType::U8: {
      const bool packed = shape == std::vector<int64_t>{n, (k + 1) / 2} && k % 2 == 0;
      if (!packed && shape != std::vector<int64_t>{n, k}) bad_shape({n, k});
      auto sname = find_scale(ckpt, {stem + ".scale", name + "_scale"});
      if (!sname)
        fail(ckpt.dir(), ": ", packed ? "MXFP4" : "int8", " tensor '", name, "' has no scales ('", stem,
             ".scale' or '", name, "_scale')");
      const io::TensorRef s = ckpt.get(*sname);
      const std::vector<int64_t>& ss = s.info->shape;
      if (packed) {
        const std::vector<int64_t> want{n, (k + 31) / 32};
        if (s.info->dtype != DType::F8_E8M0 || ss != want)
          fail(ckpt.dir(), ": MXFP4 scale tensor '", *sname, "' is ", dtype_name(s.info->dtype), " ", shape_str(ss),
               ", expected F8_E8M0 ", shape_str(want), " (one scale per 32 along k of '", name, "')");
        w.format = WeightFormat::kMxfp4;
        w.scale_dtype = DType::F8_E8M0;
        w.block_n = 1;
        w.block_k = 32;
      } else {
        if (s.info->dtype != DType::F32 || (ss != std::vector<int64_t>{n} && ss != std::vector<int64_t>{n, 1}))
          fail(ckpt.dir(), ": int8 scale tensor '", *sname, "' is ", dtype_name(s.info->dtype), " ", shape_str(ss),
               ", expected F32 [", n, "] (one scale per row of '", name, "')");
        w.format = WeightFormat::kInt8Row;
        w.scale_dtype = DType::F32;
        w.block_n = 1;
        w.block_k = k;
      }
      w.scales = s.data;
      return w;
    }
    default:
      fail(ckpt.dir(), ": tensor '", name, "' has dtype ", dtype_name(dt), ", which is not a weight format");
  }
}

}  // namespace gannet::model
