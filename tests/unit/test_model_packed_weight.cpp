// Packed weights: exact byte counts (4-bit included), loading every storage convention
// zero-copy with its scales, block-scale indexing at partial blocks, the reference
// product against double precision, and errors that name the tensor and the shape.
// labels: exact
#include <gtest/gtest.h>
#include <unistd.h>

#include <cmath>
#include <filesystem>

#include "core/error.h"
#include "io/checkpoint.h"
#include "io/safetensors.h"
#include "model/packed_weight_loader.h"

namespace fs = std::filesystem;
using namespace gannet;
using kernels::PackedWeight;
using kernels::WeightFormat;

namespace {

uint8_t fp8_code(int64_t i) {
  const uint8_t c = uint8_t((i * 37 + 11) % 256);
  return (c & 0x7f) == 0x7f ? uint8_t(c - 1) : c;  // no NaN codes
}
uint8_t scale_code(int64_t i) { return uint8_t(120 + i % 10); }

struct Dir {
  fs::path path = fs::temp_directory_path() / ("gannet_packed_" + std::to_string(::getpid()));
  Dir() {
    fs::remove_all(path);
    fs::create_directories(path);
  }
  ~Dir() { fs::remove_all(path); }
};

// Writes the given tensors as model.safetensors and opens the directory.
io::Checkpoint write(const Dir& d, io::SafetensorsWriter& w) {
  w.write((d.path / "model.safetensors").string());
  return io::Checkpoint(d.path.string());
}

void fill_bytes(io::SafetensorsWriter& w, const std::string& name, DType dt, std::vector<int64_t> shape,
                uint8_t (*code)(int64_t)) {
  w.add(name, dt, shape, [code](uint8_t* buf, int64_t off, int64_t cnt) {
    for (int64_t i = 0; i < cnt; ++i) buf[i] = code(off + i);
  });
}

std::string error_of(const io::Checkpoint& ck, const std::string& name, int64_t n, int64_t k) {
  try {
    model::load_packed_weight(ck, name, n, k);
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

}  // namespace

TEST(PackedWeight, ByteCountsAreExact) {
  PackedWeight m;
  m.format = WeightFormat::kMxfp4;
  m.n = 3;
  m.k = 64;
  m.scales = &m;  // any non-null pointer: scales present
  m.scale_dtype = DType::F8_E8M0;
  m.block_n = 1;
  m.block_k = 32;
  EXPECT_EQ(m.data_bytes(), 3u * 32u);  // two codes per byte
  EXPECT_EQ(m.scale_bytes(), 3u * 2u);
  PackedWeight f = m;
  f.format = WeightFormat::kFp8Block;
  f.n = 40;
  f.k = 70;
  f.block_n = f.block_k = 32;
  EXPECT_EQ(f.bytes(), 40u * 70u + 2u * 3u);
  f.scale_dtype = DType::F32;
  f.block_n = f.block_k = 128;
  EXPECT_EQ(f.bytes(), 40u * 70u + 1u * 1u * 4u);
  PackedWeight q = m;
  q.format = WeightFormat::kInt8Row;
  q.n = 5;
  q.k = 7;
  q.scale_dtype = DType::F32;
  q.block_k = 7;
  EXPECT_EQ(q.bytes(), 35u + 5u * 4u);
}

TEST(PackedWeight, Fp8BlockScalesIndexedByTile) {
  Dir d;
  io::SafetensorsWriter w;
  // V4.1 convention: E8M0 .scale on 32x32 tiles; shapes not multiples of 32.
  fill_bytes(w, "a.weight", DType::F8_E4M3, {40, 70}, fp8_code);
  fill_bytes(w, "a.scale", DType::F8_E8M0, {2, 3}, scale_code);
  // Hugging Face convention: f32 weight_scale_inv on 128x128 tiles.
  fill_bytes(w, "b.weight", DType::F8_E4M3, {130, 20}, fp8_code);
  w.add("b.weight_scale_inv", DType::F32, {2, 1}, [](uint8_t* buf, int64_t off, int64_t cnt) {
    for (int64_t i = 0; i < cnt; ++i) reinterpret_cast<float*>(buf)[i] = 0.37f + float(off + i);
  });
  io::Checkpoint ck = write(d, w);
  PackedWeight a = model::load_packed_weight(ck, "a.weight", 40, 70);
  EXPECT_EQ(a.format, WeightFormat::kFp8Block);
  EXPECT_EQ(a.block_n, 32);
  EXPECT_EQ(a.bytes(), 2800u + 6u);
  std::vector<float> row(70);
  for (int64_t r = 0; r < 40; ++r) {
    a.dequant_row(r, row.data());
    for (int64_t tile_c = 0; tile_c < 3; ++tile_c) {
      const float s = std::ldexp(1.0f, int(scale_code((r / 32) * 3 + tile_c)) - 127);
      for (int64_t c = tile_c * 32; c < std::min<int64_t>(70, tile_c * 32 + 32); ++c)
        ASSERT_EQ(row[size_t(c)], fp8_e4m3_to_f32(fp8_code(r * 70 + c)) * s) << r << "," << c;
    }
  }
  PackedWeight b = model::load_packed_weight(ck, "b.weight", 130, 20);
  EXPECT_EQ(b.block_n, 128);
  EXPECT_EQ(b.scale_dtype, DType::F32);
  std::vector<float> rb(20);
  b.dequant_row(129, rb.data());  // second row tile
  EXPECT_EQ(rb[3], fp8_e4m3_to_f32(fp8_code(129 * 20 + 3)) * 1.37f);
  b.dequant_row(127, rb.data());
  EXPECT_EQ(rb[3], fp8_e4m3_to_f32(fp8_code(127 * 20 + 3)) * 0.37f);
  // Zero-copy: the weight points into the mapped file.
  EXPECT_EQ(a.data, static_cast<const void*>(ck.get("a.weight").data));
}

TEST(PackedWeight, Mxfp4AndInt8RowsAndTheReferenceProduct) {
  Dir d;
  io::SafetensorsWriter w;
  fill_bytes(w, "e.weight", DType::I8, {6, 32}, [](int64_t i) { return uint8_t((i * 53 + 7) & 0xff); });
  fill_bytes(w, "e.scale", DType::F8_E8M0, {6, 2}, scale_code);
  fill_bytes(w, "q.weight", DType::I8, {6, 64}, [](int64_t i) { return uint8_t((i * 29) & 0xff); });
  w.add("q.weight_scale", DType::F32, {6}, [](uint8_t* buf, int64_t off, int64_t cnt) {
    for (int64_t i = 0; i < cnt; ++i) reinterpret_cast<float*>(buf)[i] = 0.01f * float(off + i + 1);
  });
  io::Checkpoint ck = write(d, w);
  PackedWeight e = model::load_packed_weight(ck, "e.weight", 6, 64);
  EXPECT_EQ(e.format, WeightFormat::kMxfp4);
  EXPECT_EQ(e.bytes(), 6u * 32u + 12u);
  std::vector<float> row(64);
  e.dequant_row(4, row.data());
  for (int64_t c = 0; c < 64; ++c) {
    const uint8_t byte = uint8_t(((4 * 32 + c / 2) * 53 + 7) & 0xff);
    const uint8_t nib = c % 2 == 0 ? byte & 0xf : byte >> 4;  // element 2i in the low nibble
    ASSERT_EQ(row[size_t(c)], fp4_e2m1_to_f32(nib) * std::ldexp(1.0f, int(scale_code(4 * 2 + c / 32)) - 127)) << c;
  }
  PackedWeight q = model::load_packed_weight(ck, "q.weight", 6, 64);
  EXPECT_EQ(q.format, WeightFormat::kInt8Row);
  // The reference product equals x · dequant(w) computed in double, to f32 rounding.
  std::vector<float> x(3 * 64), y(3 * 6);
  for (size_t i = 0; i < x.size(); ++i) x[i] = std::sin(float(i) * 0.7f);
  for (const PackedWeight* pw : {&e, &q}) {
    kernels::matmul_packed_ref(x.data(), 3, *pw, y.data());
    for (int64_t j = 0; j < 6; ++j) {
      pw->dequant_row(j, row.data());
      for (int64_t i = 0; i < 3; ++i) {
        double ref = 0, mag = 0;
        for (int64_t c = 0; c < 64; ++c) {
          ref += double(x[size_t(i * 64 + c)]) * row[size_t(c)];
          mag += std::fabs(double(x[size_t(i * 64 + c)]) * row[size_t(c)]);
        }
        EXPECT_NEAR(y[size_t(i * 6 + j)], ref, 1e-6 * mag + 1e-30) << kernels::weight_format_name(pw->format);
      }
    }
  }
}

TEST(PackedWeight, MismatchesNameTheTensor) {
  Dir d;
  io::SafetensorsWriter w;
  fill_bytes(w, "a.weight", DType::F8_E4M3, {40, 70}, fp8_code);
  fill_bytes(w, "a.scale", DType::F8_E8M0, {2, 2}, scale_code);  // should be [2, 3]
  fill_bytes(w, "m.weight", DType::F8_E4M3, {8, 8}, fp8_code);   // no scale at all
  fill_bytes(w, "e.weight", DType::I8, {4, 16}, fp8_code);
  w.add("e.scale", DType::F32, {4, 1}, [](uint8_t* buf, int64_t, int64_t cnt) {
    for (int64_t i = 0; i < cnt; ++i) reinterpret_cast<float*>(buf)[i] = 1;
  });  // MXFP4 wants E8M0
  io::Checkpoint ck = write(d, w);
  std::string m = error_of(ck, "a.weight", 40, 70);
  EXPECT_NE(m.find("'a.scale'"), std::string::npos) << m;
  EXPECT_NE(m.find("[2, 2]"), std::string::npos) << m;
  m = error_of(ck, "m.weight", 8, 8);
  EXPECT_NE(m.find("'m.weight' has no block scales"), std::string::npos) << m;
  m = error_of(ck, "e.weight", 4, 32);
  EXPECT_NE(m.find("MXFP4 scale tensor 'e.scale'"), std::string::npos) << m;
  EXPECT_NE(m.find("F8_E8M0 [4, 1]"), std::string::npos) << m;
  m = error_of(ck, "a.weight", 41, 70);
  EXPECT_NE(m.find("'a.weight'"), std::string::npos) << m;
  EXPECT_NE(m.find("config.json implies [41, 70]"), std::string::npos) << m;
}
