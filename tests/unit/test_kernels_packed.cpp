// The packed-weight product on every kernel path equals the scalar reference bit for
// bit, for every format, odd shapes (k not a multiple of 16, partial scale blocks), 1 to
// 47 rows of x (and 67, past one block of x rows), 1 or 2 threads, and rows of special
// codes: NaN, infinities, the largest and subnormal values, scales that overflow or make
// subnormal products.
// labels: exact
#include <gtest/gtest.h>
#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <cfloat>
#include <cmath>
#include <cstring>
#include <limits>
#include <random>
#include <vector>

#include "core/thread_pool.h"
#include "core/cpu_features.h"
#include "kernels/cpu/lane_gemm.h"
#include "kernels/cpu/matmul.h"
#include "kernels/cpu/packed_matmul.h"

using namespace gannet;
using namespace gannet::kernels;

namespace {

struct Owned {
  std::vector<uint8_t> data, scales;
  PackedWeight w;
};

Owned make(WeightFormat f, int64_t n, int64_t k, uint32_t seed, int64_t block = 32, DType sdt = DType::F8_E8M0,
           int64_t fp8_block_n = 0) {
  std::mt19937 g(seed);
  Owned o;
  PackedWeight& w = o.w;
  w.format = f;
  w.n = n;
  w.k = k;
  std::uniform_real_distribution<float> u(-2.0f, 2.0f);
  switch (f) {
    case WeightFormat::kF32:
      o.data.resize(size_t(n * k) * 4);
      for (int64_t i = 0; i < n * k; ++i) reinterpret_cast<float*>(o.data.data())[i] = u(g);
      break;
    case WeightFormat::kBF16:
    case WeightFormat::kF16:
      o.data.resize(size_t(n * k) * 2);
      for (int64_t i = 0; i < n * k; ++i)
        reinterpret_cast<uint16_t*>(o.data.data())[i] = f == WeightFormat::kBF16 ? f32_to_bf16(u(g)) : f32_to_f16(u(g));
      break;
    case WeightFormat::kFp8Block:
    case WeightFormat::kInt8Row:
      o.data.resize(size_t(n * k));
      for (auto& b : o.data) {
        b = uint8_t(g());
        if (f == WeightFormat::kFp8Block && (b & 0x7f) == 0x7f) b ^= 1;  // no NaN codes
      }
      break;
    case WeightFormat::kMxfp4:
      o.data.resize(size_t(n * ((k + 1) / 2)));
      for (auto& b : o.data) b = uint8_t(g());
      break;
  }
  if (f == WeightFormat::kFp8Block) {
    w.block_n = fp8_block_n ? fp8_block_n : block;
    w.block_k = block;
    w.scale_dtype = sdt;
  } else if (f == WeightFormat::kMxfp4) {
    w.block_n = 1;
    w.block_k = 32;
    w.scale_dtype = DType::F8_E8M0;
  } else if (f == WeightFormat::kInt8Row) {
    w.block_n = 1;
    w.block_k = k;
    w.scale_dtype = DType::F32;
  }
  if (f == WeightFormat::kFp8Block || f == WeightFormat::kMxfp4 || f == WeightFormat::kInt8Row) {
    const int64_t cnt = w.scale_rows() * w.scale_cols();
    o.scales.resize(size_t(cnt) * dtype_size(w.scale_dtype));
    for (int64_t i = 0; i < cnt; ++i) {
      if (w.scale_dtype == DType::F8_E8M0) o.scales[size_t(i)] = uint8_t(118 + g() % 14);
      else reinterpret_cast<float*>(o.scales.data())[i] = 0.001f + 0.01f * float(g() % 100);
    }
    w.scales = o.scales.data();
  }
  w.data = o.data.data();
  return o;
}

bool same_bits(const std::vector<float>& a, const std::vector<float>& b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * 4) == 0;
}

// A copy of bytes that ends right before an inaccessible page, as a tensor at the end of
// a memory map can: any read past its end faults.
class Guarded {
 public:
  explicit Guarded(const std::vector<uint8_t>& bytes) {
    const size_t page = size_t(sysconf(_SC_PAGESIZE));
    len_ = (bytes.size() + page - 1) / page * page + page;
    void* p = mmap(nullptr, len_, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    EXPECT_NE(p, MAP_FAILED);
    base_ = static_cast<uint8_t*>(p);
    EXPECT_EQ(mprotect(base_ + len_ - page, page, PROT_NONE), 0);
    data_ = base_ + len_ - page - bytes.size();
    if (!bytes.empty()) std::memcpy(data_, bytes.data(), bytes.size());
  }
  ~Guarded() { munmap(base_, len_); }
  Guarded(const Guarded&) = delete;
  Guarded& operator=(const Guarded&) = delete;
  const void* data() const { return data_; }

 private:
  uint8_t* base_ = nullptr;
  uint8_t* data_ = nullptr;
  size_t len_ = 0;
};

// As same_bits, but a NaN of either sign matches a NaN.
// Rewrites row r of o by kind r % 6 (one kind of special value per row, so a row's
// output has one well-defined NaN, whichever operand order the hardware adds in):
//   0 unchanged; 1 NaN codes (fp8 0x7f and 0xff, the plain formats' quiet NaN) or NaN
//   scales; 2 the largest and subnormal codes and signed zeros; 3 +inf (plain), the
//   largest scale with small codes (fp8: scale * 2^8 overflows, the exact path) or an
//   infinite int8 scale; 4 subnormal values or tiny scales (subnormal products that
//   round); 5 -inf and the largest values (plain) or the largest or an infinite scale
//   with any code (overflow to inf, 0 * inf). With k = 1 an infinite product reaches the
//   output, so the lanes past k must stay +0 rather than 0 * inf.
// fp8 needs one scale row per w row (block_n 1).
void make_special(Owned& o, uint32_t seed) {
  PackedWeight& w = o.w;
  std::mt19937 g(seed);
  const int64_t n = w.n, k = w.k;
  const int64_t sc = w.scales ? w.scale_cols() : 0;
  auto set_scale = [&](int64_t r, int64_t b, uint8_t e8m0, float f32) {
    if (w.scale_dtype == DType::F8_E8M0) o.scales[size_t(r * sc + b)] = e8m0;
    else std::memcpy(&o.scales[size_t(r * sc + b) * 4], &f32, 4);
  };
  auto pick = [&](std::initializer_list<uint32_t> v) { return *(v.begin() + g() % v.size()); };
  for (int64_t r = 0; r < n; ++r) {
    const int kind = int(r % 6);
    if (kind == 0) continue;
    // Positions that get a special code: the first and last elements and a few more.
    auto special_at = [&](int64_t c) { return c == 0 || c == k - 1 || g() % 8 == 0; };
    switch (w.format) {
      case WeightFormat::kF32:
      case WeightFormat::kBF16:
      case WeightFormat::kF16: {
        const bool f16 = w.format == WeightFormat::kF16, bf16 = w.format == WeightFormat::kBF16;
        for (int64_t c = 0; c < k; ++c) {
          if (kind != 4 && !special_at(c)) continue;
          uint32_t bits;  // f32 bits, narrowed below
          switch (kind) {
            case 1: bits = 0x7fc00000u; break;
            case 2: bits = pick({0x7f7fffffu, 0xff7fffffu, 0x00000001u, 0x80400000u, 0x0, 0x80000000u}); break;
            case 3: bits = 0x7f800000u; break;
            case 4: bits = (g() & 0x807fffffu) | 1u; break;
            default: bits = pick({0xff800000u, 0x7f7fffffu, 0xff7fffffu}); break;
          }
          if (f16) {
            // The f16 counterparts: quiet NaN, max, smallest subnormal, a larger one, inf.
            uint16_t h;
            switch (kind) {
              case 1: h = 0x7e00; break;
              case 2: h = uint16_t(pick({0x7bff, 0xfbff, 0x0001, 0x83ff, 0x0, 0x8000})); break;
              case 3: h = 0x7c00; break;
              case 4: h = uint16_t((g() & 0x83ff) | 1); break;
              default: h = uint16_t(pick({0xfc00, 0x7bff, 0xfbff})); break;
            }
            std::memcpy(&o.data[size_t(r * k + c) * 2], &h, 2);
          } else if (bf16) {
            const uint16_t h = uint16_t(bits >> 16 | (kind == 4 ? 1u : 0u));
            std::memcpy(&o.data[size_t(r * k + c) * 2], &h, 2);
          } else {
            std::memcpy(&o.data[size_t(r * k + c) * 4], &bits, 4);
          }
        }
        break;
      }
      case WeightFormat::kFp8Block:
        for (int64_t c = 0; c < k; ++c) {
          uint8_t& b = o.data[size_t(r * k + c)];
          if (kind == 1 && special_at(c)) b = uint8_t(pick({0x7f, 0xff}));
          if (kind == 2 && special_at(c)) b = uint8_t(pick({0x7e, 0xfe, 0x00, 0x80, 0x01, 0x87, 0x05, 0x83}));
          if (kind == 3) b &= 0x9f;  // |value| < 2^-3: the products stay finite
        }
        for (int64_t b = 0; b < sc; ++b) {
          if (kind == 3) set_scale(r, b, 0xfe, 1.5f * std::ldexp(1.0f, 125));
          if (kind == 4) set_scale(r, b, b % 2 ? 0x01 : 0x00, b % 2 ? 3e-39f : 1e-40f);
          if (kind == 5) set_scale(r, b, 0xfe, std::numeric_limits<float>::infinity());
        }
        break;
      case WeightFormat::kMxfp4:
        for (int64_t c = 0; c < (k + 1) / 2; ++c) {
          uint8_t& b = o.data[size_t(r * ((k + 1) / 2) + c)];
          if (kind == 2) b = uint8_t(pick({0x7, 0xf, 0x0, 0x8, 0x1, 0x9}) | pick({0x70, 0xf0, 0x00, 0x80, 0x10}));
          if (kind == 3) b &= 0x99;  // |value| <= 0.5
        }
        for (int64_t b = 0; b < sc; ++b) {
          if (kind == 1 && b == sc - 1) set_scale(r, b, 0xff, 0.0f);
          if (kind == 3 || kind == 5) set_scale(r, b, 0xfe, 0.0f);
          if (kind == 4) set_scale(r, b, b % 2 ? 0x01 : 0x00, 0.0f);
        }
        break;
      case WeightFormat::kInt8Row: {
        for (int64_t c = 0; c < k; ++c) {
          uint8_t& b = o.data[size_t(r * k + c)];
          if (kind == 2 && special_at(c)) b = uint8_t(pick({0x7f, 0x80, 0x00, 0xff, 0x01}));
          if (kind == 3 && b == 0) b = 1;  // infinite products, no 0 * inf
        }
        const float s[] = {0.0f, std::numeric_limits<float>::quiet_NaN(), 0.01f, std::numeric_limits<float>::infinity(),
                           1e-41f, FLT_MAX};
        if (kind != 2) set_scale(r, 0, 0, s[kind]);
        break;
      }
    }
  }
}

}  // namespace

TEST(KernelsPacked, EveryPathMatchesTheReference) {
  ThreadPool pool(2);
  struct Shape {
    int64_t n, k;
  };
  // {67, 300} (7 rows) and {130, 1030} are large enough to split over the 2 threads;
  // {70, 3328}: the few-row kernels of 2-5 rows in k-blocks (2 to 5, the last partial)
  // and passes of w rows (three, the last partial).
  const Shape shapes[] = {{1, 32},   {3, 9},   {5, 64},    {17, 70},   {40, 130},
                          {33, 256}, {64, 96}, {67, 300}, {130, 1030}, {70, 3328}};
  const WeightFormat formats[] = {WeightFormat::kF32, WeightFormat::kBF16, WeightFormat::kF16,
                                  WeightFormat::kFp8Block, WeightFormat::kMxfp4, WeightFormat::kInt8Row};
  int checked = 0;
  for (WeightFormat f : formats)
    for (const Shape& s : shapes) {
      if (f == WeightFormat::kMxfp4 && s.k % 2) continue;
      // fp8 scale blocks: 32 x 32 E8M0, 128 x 128 f32, 16 x 16 f32 (a new scale every
      // chunk); each unscanned, as loaded (scan_codes: no NaN code, so the fast routes),
      // and as loaded with subnormal codes only in some rows. Random bytes put one in most
      // rows of 32 or more, and a row holding one takes the fast routes' f16 form
      // (fp8_subnormal_rows), the others f32 bits; in variants 6-8 row r has them where bit
      // r % 4 of (r / 4) % 16 is set: GEMV tiles of four rows with every mixture. Both
      // routes give the same bits, so these check each route's bits, not which one ran.
      for (int variant = 0; variant < (f == WeightFormat::kFp8Block ? 9 : 1); ++variant) {
        const uint32_t seed = uint32_t(s.n * 131 + s.k);
        Owned o = variant % 3 == 0   ? make(f, s.n, s.k, seed)
                  : variant % 3 == 1 ? make(f, s.n, s.k, seed, 128, DType::F32)
                                     : make(f, s.n, s.k, seed, 16, DType::F32);
        const auto marked = [](int64_t r) { return (((r / 4) % 16) >> (r % 4) & 1) != 0; };
        if (variant >= 6)
          for (int64_t r = 0; r < s.n; ++r) {
            uint8_t* row = o.data.data() + r * s.k;
            for (int64_t c = 0; c < s.k; ++c)
              if ((row[c] & 0x78) == 0 && (row[c] & 0x07) != 0) row[c] |= 0x08;  // the same sign, now normal
            if (marked(r)) row[(r * 7) % s.k] = r % 2 ? 0x81 : 0x05;
          }
        if (variant >= 3) {
          o.w.scan_codes();
          ASSERT_TRUE(o.w.fp8_plain) << "n=" << s.n << " k=" << s.k;
          for (int64_t r = 0; r < s.n; ++r) {
            const uint8_t* row = o.data.data() + r * s.k;
            const bool sub = std::any_of(row, row + s.k, [](uint8_t b) { return (b & 0x78) == 0 && (b & 0x07) != 0; });
            ASSERT_EQ(o.w.fp8_subnormal_row(r), sub) << "row " << r << " of n=" << s.n << " k=" << s.k;
            if (variant >= 6) {
              ASSERT_EQ(sub, marked(r)) << "row " << r;
            }
          }
        }
        // 2-8: the few-row kernels; 9-47: AVX-512's k-blocked slices (13: 6 + 7 rows, 20:
        // 10 + 10, 30: 3 x 10, 47: 11 + 3 x 12; k-blocks of 512 and, f32 of k = 3328,
        // several w blocks), or its panel path where chunks do not fit; 67: the lane GEMMs.
        for (int64_t m : {1, 2, 3, 4, 5, 6, 7, 8, 9, 13, 20, 30, 47, 67}) {
          if ((m == 67 && s.n * s.k > 5000) || (m == 20 && s.k > 2000)) continue;  // the larger rows: other shapes
          if ((m == 13 || m == 30 || m == 47) && (s.n * s.k > 250000 || variant % 3 == 1)) continue;
          std::vector<float> x(size_t(m * s.k)), ref(size_t(m * s.n)), got(size_t(m * s.n));
          std::mt19937 g{uint32_t(m)};
          std::normal_distribution<float> nd(0.0f, 1.0f);
          for (float& v : x) v = nd(g);
          matmul_packed_ref(x.data(), m, o.w, ref.data());
          for (Isa isa : {Isa::kScalar, Isa::kAvx2, Isa::kAvx512}) {
            if (!isa_supported(isa)) continue;
            for (ThreadPool* p : {static_cast<ThreadPool*>(nullptr), &pool}) {
              std::fill(got.begin(), got.end(), -1.0f);
              matmul_packed_isa(isa, x.data(), m, o.w, got.data(), p);
              ASSERT_TRUE(same_bits(ref, got)) << weight_format_name(f) << " variant " << variant << " n=" << s.n
                                               << " k=" << s.k << " m=" << m
                                               << " " << isa_name(isa) << (p ? " 2 threads" : "");
              ++checked;
            }
          }
        }
      }
    }
  EXPECT_GT(checked, 100);
}

// The column entry point writes exactly columns [n0, n1) of every row, with the
// reference's bits, through a row stride wider than the weight.
TEST(KernelsPacked, ColumnTilesMatchTheReference) {
  int checked = 0;
  for (WeightFormat f : {WeightFormat::kBF16, WeightFormat::kFp8Block, WeightFormat::kMxfp4}) {
    Owned o = make(f, 40, 96, 7);
    const int64_t m = 5, ldy = 47;
    std::vector<float> x(size_t(m * 96)), ref(size_t(m * 40));
    std::mt19937 g{3};
    std::normal_distribution<float> nd(0.0f, 1.0f);
    for (float& v : x) v = nd(g);
    matmul_packed_ref(x.data(), m, o.w, ref.data());
    for (Isa isa : {Isa::kScalar, Isa::kAvx2, Isa::kAvx512}) {
      if (!isa_supported(isa)) continue;
      for (auto [n0, n1] : {std::pair<int64_t, int64_t>{0, 40}, {3, 21}, {32, 33}, {17, 17}}) {
        std::vector<float> y(size_t(m * ldy), -7.0f);
        matmul_packed_cols_isa(isa, x.data(), m, o.w, n0, n1, y.data(), ldy);
        for (int64_t i = 0; i < m; ++i)
          for (int64_t j = 0; j < ldy; ++j) {
            const float want = j >= n0 && j < n1 ? ref[size_t(i * 40 + j)] : -7.0f;
            ASSERT_EQ(std::memcmp(&y[size_t(i * ldy + j)], &want, 4), 0)
                << weight_format_name(f) << " " << isa_name(isa) << " [" << n0 << ", " << n1 << ") row " << i
                << " col " << j;
          }
        ++checked;
      }
    }
  }
  EXPECT_GE(checked, 12);
}

TEST(KernelsPacked, GroupedProductsMatchTheReference) {
  // One x through several weights of different formats and widths in one parallel region:
  // each product has the reference's bits, with and without a pool, on every ISA, for a
  // decode row, a few rows and a prefill-sized batch (the lane GEMM runs those alone).
  const int64_t k = 256;
  std::vector<Owned> ws;
  ws.push_back(make(WeightFormat::kBF16, 40, k, 11));
  ws.push_back(make(WeightFormat::kFp8Block, 33, k, 12));
  ws.push_back(make(WeightFormat::kMxfp4, 70, k, 13));
  ws.push_back(make(WeightFormat::kInt8Row, 9, k, 14));
  ws[1].w.scan_codes();
  ThreadPool pool(2);
  const Isa before = active_isa();
  int checked = 0;
  for (int64_t m : {1, 5, 50}) {
    std::vector<float> x(size_t(m * k));
    std::mt19937 g{uint32_t(m)};
    std::normal_distribution<float> nd(0.0f, 1.0f);
    for (float& v : x) v = nd(g);
    std::vector<std::vector<float>> ref(ws.size()), y(ws.size());
    for (size_t i = 0; i < ws.size(); ++i) {
      ref[i].resize(size_t(m * ws[i].w.n));
      matmul_packed_ref(x.data(), m, ws[i].w, ref[i].data());
    }
    for (Isa isa : {Isa::kScalar, Isa::kAvx2, Isa::kAvx512}) {
      if (!isa_supported(isa)) continue;
      set_active_isa(isa);
      for (ThreadPool* p : {static_cast<ThreadPool*>(nullptr), &pool}) {
        std::vector<PackedProduct> ps;
        for (size_t i = 0; i < ws.size(); ++i) {
          y[i].assign(size_t(m * ws[i].w.n), -7.0f);
          ps.push_back({&ws[i].w, y[i].data()});
        }
        matmul_packed_many(x.data(), m, ps, p);
        for (size_t i = 0; i < ws.size(); ++i)
          ASSERT_TRUE(same_bits(ref[i], y[i])) << weight_format_name(ws[i].w.format) << " m=" << m << " "
                                               << isa_name(isa) << (p ? " pool" : "");
        ++checked;
      }
    }
  }
  set_active_isa(before);
  EXPECT_GE(checked, 6);
}

TEST(KernelsPacked, SpecialCodesMatchTheReference) {
  ThreadPool pool(2);
  struct Shape {
    int64_t n, k;
  };
  // {21, 96}: whole chunks, the GEMV and few-row kernels; the last splits over 2 threads
  const Shape shapes[] = {{6, 10}, {12, 1}, {12, 2}, {19, 70}, {21, 96}, {130, 1030}};
  struct Variant {
    WeightFormat f;
    int64_t block;
    DType sdt;
  };
  const Variant variants[] = {{WeightFormat::kF32, 0, DType::F32},
                              {WeightFormat::kBF16, 0, DType::F32},
                              {WeightFormat::kF16, 0, DType::F32},
                              {WeightFormat::kFp8Block, 32, DType::F8_E8M0},
                              {WeightFormat::kFp8Block, 16, DType::F32},
                              {WeightFormat::kFp8Block, 128, DType::F32},
                              {WeightFormat::kMxfp4, 0, DType::F8_E8M0},
                              {WeightFormat::kInt8Row, 0, DType::F32}};
  int checked = 0;
  for (const Variant& v : variants)
    for (const Shape& s : shapes) {
      const uint32_t seed = uint32_t(s.n * 7 + s.k);
      if (v.f == WeightFormat::kMxfp4 && s.k % 2) continue;
      Owned o = v.f == WeightFormat::kFp8Block ? make(v.f, s.n, s.k, seed, v.block, v.sdt, 1)
                                               : make(v.f, s.n, s.k, seed);
      make_special(o, seed);
      // 20: AVX-512's k-blocked slices (or panels), AVX2's lane GEMM; 50: both lane GEMMs,
      // whose panels decode the codes themselves (partial last chunks of k = 10 and 70).
      for (int64_t m : {1, 2, 3, 5, 7, 9, 20, 50}) {
        if (m >= 20 && s.n * s.k > 2100) continue;
        std::vector<float> x(size_t(m * s.k)), ref(size_t(m * s.n)), got(size_t(m * s.n));
        std::mt19937 g{uint32_t(m)};
        std::normal_distribution<float> nd(0.0f, 1.0f);
        for (float& e : x) e = nd(g);
        matmul_packed_ref(x.data(), m, o.w, ref.data());
        int nan_rows = 0;
        for (int64_t j = 0; j < s.n; ++j) nan_rows += std::isnan(ref[size_t(j)]);
        EXPECT_GT(nan_rows, 0) << weight_format_name(v.f) << ": the NaN rows must reach the output";
        for (Isa isa : {Isa::kScalar, Isa::kAvx2, Isa::kAvx512}) {
          if (!isa_supported(isa)) continue;
          for (ThreadPool* p : {static_cast<ThreadPool*>(nullptr), &pool}) {
            std::fill(got.begin(), got.end(), -1.0f);
            matmul_packed_isa(isa, x.data(), m, o.w, got.data(), p);
            ASSERT_TRUE(same_bits(ref, got))
                << weight_format_name(v.f) << " block " << v.block << " n=" << s.n << " k=" << s.k << " m=" << m
                << " " << isa_name(isa) << (p ? " 2 threads" : "");
            ++checked;
          }
        }
      }
    }
  EXPECT_GT(checked, 100);
}

TEST(KernelsPacked, ReadsNothingPastTheTensorEnd) {
  const WeightFormat formats[] = {WeightFormat::kF32, WeightFormat::kBF16, WeightFormat::kF16,
                                  WeightFormat::kFp8Block, WeightFormat::kMxfp4, WeightFormat::kInt8Row};
  for (WeightFormat f : formats)
    for (int64_t k : {1, 6, 16, 38, 70}) {
      Owned o = make(f, 5, k, uint32_t(k));
      Guarded data(o.data), scales(o.scales);
      PackedWeight w = o.w;
      w.data = data.data();
      if (w.scales) w.scales = scales.data();
      for (int64_t m : {1, 3, 9}) {
        std::vector<float> x(size_t(m * k), 0.5f), ref(size_t(m * w.n)), got(size_t(m * w.n));
        matmul_packed_ref(x.data(), m, o.w, ref.data());
        for (Isa isa : {Isa::kScalar, Isa::kAvx2, Isa::kAvx512}) {
          if (!isa_supported(isa)) continue;
          matmul_packed_isa(isa, x.data(), m, w, got.data(), nullptr);
          ASSERT_TRUE(same_bits(ref, got)) << weight_format_name(f) << " k=" << k << " m=" << m << " " << isa_name(isa);
        }
      }
    }
}

// The lane-split GEMM (lane_gemm.h) of one ISA against the scalar references with its
// cache blocks forced small, so every edge is walked: several n-blocks and m-blocks, lanes
// resumed across step blocks (k past one block), partial tiles (m not a multiple of the
// tile's 12 or 6 rows; AVX2 runs only a last tile's live rows), partial panels and column ranges that start inside a panel
// (columns outside stay untouched).
template <typename Lane>
void lane_gemm_matches_reference() {
  const LaneBlocking blockings[] = {{}, {1, 1, 1}, {2, 2, 3}, {1, 3, 5}};
  std::mt19937 g(77);
  std::normal_distribution<float> nd(0.0f, 1.0f);
  int checked = 0;
  for (int64_t k : {1, 16, 33, 100, 290}) {
    for (int64_t m : {1, 5, 8, 11, 12, 13, 15, 28, 30}) {  // AVX2's last tile: 1-6 live rows
      const int64_t n = 70;
      std::vector<float> x(size_t(m * k));
      for (auto& v : x) v = g() % 32 == 0 ? nd(g) * 1e-39f : nd(g);  // some denormals
      std::vector<float> wf(size_t(n * k));
      for (auto& v : wf) v = g() % 32 == 0 ? -0.0f : nd(g);
      std::vector<uint16_t> wb(wf.size());
      for (size_t i = 0; i < wf.size(); ++i) wb[i] = g() % 32 == 0 ? uint16_t(g() % 0x80) : f32_to_bf16(wf[i]);
      Owned fp8 = make(WeightFormat::kFp8Block, n, k, uint32_t(m * k), 32), i8 = make(WeightFormat::kInt8Row, n, k, 5),
            fp4 = make(WeightFormat::kMxfp4, n, k, 6);
      struct Case {
        const char* name;
        LaneOrder order;
        LaneWeight w;
        std::vector<float> ref;
      };
      std::vector<Case> cases(5);
      cases[0] = {"f32", LaneOrder::kF32, {}, std::vector<float>(size_t(m * n))};
      cases[0].w.f32 = wf.data();
      matmul_f32_isa(Isa::kScalar, x.data(), m, k, wf.data(), n, cases[0].ref.data(), nullptr);
      cases[1] = {"bf16", LaneOrder::kBf16, {}, std::vector<float>(size_t(m * n))};
      cases[1].w.bf16 = wb.data();
      matmul_bf16_isa(Isa::kScalar, x.data(), m, k, wb.data(), n, cases[1].ref.data(), nullptr);
      const Owned* packed[] = {&fp8, &i8, &fp4};
      const char* names[] = {"fp8", "int8", "mxfp4"};
      for (int p = 0; p < 3; ++p) {
        cases[size_t(2 + p)] = {names[p], LaneOrder::kF32, {}, std::vector<float>(size_t(m * n))};
        cases[size_t(2 + p)].w.packed = &packed[p]->w;
        matmul_packed_isa(Isa::kScalar, x.data(), m, packed[p]->w, cases[size_t(2 + p)].ref.data(), nullptr);
      }
      for (const Case& c : cases) {
        std::vector<float> xp(size_t(Lane::x_floats(c.order, m, k)), -7.0f);
        Lane::pack_x(c.order, x.data(), m, k, 0, Lane::tiles(m), xp.data());
        for (const LaneBlocking& b : blockings)
          for (auto cols : {std::pair<int64_t, int64_t>{0, n}, {5, 41}, {33, 34}}) {
            std::vector<float> y(size_t(m * n), -3.0f);
            Lane::cols(c.order, xp.data(), m, k, c.w, cols.first, cols.second, y.data(), n, b);
            std::vector<float> want(size_t(m * n), -3.0f);
            for (int64_t i = 0; i < m; ++i)
              for (int64_t j = cols.first; j < cols.second; ++j) want[size_t(i * n + j)] = c.ref[size_t(i * n + j)];
            EXPECT_TRUE(same_bits(want, y)) << c.name << " m=" << m << " k=" << k << " cols " << cols.first << ".."
                                            << cols.second << " blocks " << b.panels << "/" << b.tiles << "/" << b.steps;
            ++checked;
          }
      }
    }
  }
  EXPECT_EQ(checked, 5 * 9 * 5 * 4 * 3);
}

#define GANNET_LANE_ISA(ns)                                                     \
  struct Lane_##ns {                                                           \
    static constexpr auto x_floats = ns::lane_x_floats;                        \
    static constexpr auto pack_x = ns::lane_pack_x;                            \
    static constexpr auto tiles = ns::lane_tiles;                              \
    static constexpr auto cols = ns::lane_gemm_cols;                           \
  };
GANNET_LANE_ISA(avx512)
GANNET_LANE_ISA(avx2)

TEST(KernelsPacked, LaneGemmMatchesReferenceAcrossBlocks) {
  if (!isa_supported(Isa::kAvx512)) GTEST_SKIP() << "the AVX-512 lane-split GEMM needs AVX-512";
  lane_gemm_matches_reference<Lane_avx512>();
}

TEST(KernelsPacked, LaneGemmAvx2MatchesReferenceAcrossBlocks) {
  if (!isa_supported(Isa::kAvx2)) GTEST_SKIP() << "the AVX2 lane-split GEMM needs AVX2";
  lane_gemm_matches_reference<Lane_avx2>();
}
