#include "kernels/cpu/packed_quantize.h"

#include <sys/mman.h>

#include <algorithm>
#include <new>
#include <cmath>
#include <cstring>
#include <limits>

#include "core/dtype.h"
#include "core/error.h"

namespace gannet::kernels {

namespace {
constexpr size_t kHugePage = size_t(2) << 20;
size_t huge_round(size_t n) { return (n + kHugePage - 1) / kHugePage * kHugePage; }
}  // namespace

void* huge_page_alloc(size_t bytes) {
  void* p = ::mmap(nullptr, huge_round(bytes), PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (p == MAP_FAILED) throw std::bad_alloc();
  ::madvise(p, huge_round(bytes), MADV_HUGEPAGE);  // where THP is unavailable: 4 KiB pages
  return p;
}

void huge_page_free(void* p, size_t bytes) noexcept { ::munmap(p, huge_round(bytes)); }

namespace {

void check_finite(float v, int64_t r, int64_t c) {
  if (!std::isfinite(v)) fail("weight element [", r, ", ", c, "] is ", v, "; only finite weights can be quantized");
}

// The smallest power of two s with amax / s <= 448 (amax finite and positive). Dividing
// by a power of two is exact while the quotient stays normal, so the test is exact.
float pow2_scale(float amax) {
  int e;
  std::frexp(amax / 448.0f, &e);  // amax / 448 < 2^e, up to the quotient's rounding
  float s = std::ldexp(1.0f, e);
  while (amax / s > 448.0f) s *= 2;
  while (s > std::numeric_limits<float>::denorm_min() && amax / (s / 2) <= 448.0f) s /= 2;
  return s;
}

}  // namespace

std::shared_ptr<OwnedPackedWeight> quantize_int8_row(int64_t n, int64_t k, const RowSource& row) {
  GANNET_CHECK(n > 0 && k > 0);
  auto o = std::make_shared<OwnedPackedWeight>();
  o->data.resize(size_t(n) * size_t(k));
  o->scales.resize(size_t(n) * 4);
  std::vector<float> buf(static_cast<size_t>(k));
  for (int64_t r = 0; r < n; ++r) {
    row(r, buf.data());
    float amax = 0;
    for (int64_t c = 0; c < k; ++c) {
      check_finite(buf[size_t(c)], r, c);
      amax = std::max(amax, std::fabs(buf[size_t(c)]));
    }
    const float s = amax > 0 ? amax / 127.0f : 1.0f;
    int8_t* q = reinterpret_cast<int8_t*>(o->data.data()) + r * k;
    for (int64_t c = 0; c < k; ++c) {
      const float v = std::nearbyint(buf[size_t(c)] / s);  // default rounding: to nearest even
      q[c] = int8_t(std::clamp(v, -127.0f, 127.0f));
    }
    std::memcpy(o->scales.data() + r * 4, &s, 4);
  }
  PackedWeight& w = o->w;
  w.format = WeightFormat::kInt8Row;
  w.n = n;
  w.k = k;
  w.data = o->data.data();
  w.scales = o->scales.data();
  w.scale_dtype = DType::F32;
  w.block_n = 1;
  w.block_k = k;
  return o;
}

std::shared_ptr<OwnedPackedWeight> quantize_fp8_block(int64_t n, int64_t k, int64_t block, const RowSource& row,
                                                      Fp8Scales scales) {
  GANNET_CHECK(n > 0 && k > 0 && block > 0);
  auto o = std::make_shared<OwnedPackedWeight>();
  PackedWeight& w = o->w;
  w.format = WeightFormat::kFp8Block;
  w.n = n;
  w.k = k;
  w.scale_dtype = DType::F32;
  w.block_n = w.block_k = block;
  const int64_t sr = w.scale_rows(), sc = w.scale_cols();
  o->data.resize(size_t(n) * size_t(k));
  o->scales.resize(size_t(sr) * size_t(sc) * 4);
  std::vector<float> tile(static_cast<size_t>(block * k));  // one band of block rows
  for (int64_t br = 0; br < sr; ++br) {
    const int64_t r0 = br * block, rows = std::min(block, n - r0);
    for (int64_t i = 0; i < rows; ++i) {
      row(r0 + i, tile.data() + i * k);
      for (int64_t c = 0; c < k; ++c) check_finite(tile[size_t(i * k + c)], r0 + i, c);
    }
    for (int64_t bc = 0; bc < sc; ++bc) {
      const int64_t c0 = bc * block, c1 = std::min(k, c0 + block);
      float amax = 0;
      for (int64_t i = 0; i < rows; ++i)
        for (int64_t c = c0; c < c1; ++c) amax = std::max(amax, std::fabs(tile[size_t(i * k + c)]));
      const float s = amax == 0 ? 1.0f : scales == Fp8Scales::kPow2 ? pow2_scale(amax) : amax / 448.0f;
      for (int64_t i = 0; i < rows; ++i)
        for (int64_t c = c0; c < c1; ++c) {
          const float v = std::clamp(tile[size_t(i * k + c)] / s, -448.0f, 448.0f);
          o->data[size_t((r0 + i) * k + c)] = f32_to_fp8_e4m3(v);
        }
      std::memcpy(o->scales.data() + (br * sc + bc) * 4, &s, 4);
    }
  }
  w.data = o->data.data();
  w.scales = o->scales.data();
  w.scan_codes();
  return o;
}

}  // namespace gannet::kernels
