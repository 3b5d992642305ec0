// Image decoding against Pillow (tests/data/images, tools/make_image_fixtures.py): PNG in
// every colour type, JPEG and WebP, EXIF orientation, alpha over white; and refusals of
// empty, truncated, corrupt, oversized and unsupported files with a message naming why.
// labels: exact
#include <gtest/gtest.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "core/error.h"
#include "vision/image.h"

namespace gannet::vision {
namespace {

std::string source_dir() {
  if (const char* dir = std::getenv("GANNET_SOURCE_DIR")) return dir;
  return std::filesystem::path(__FILE__).parent_path().parent_path().parent_path().string();
}

std::string images_dir() { return source_dir() + "/tests/data/images/"; }

const nlohmann::json& manifest() {
  static const nlohmann::json j = [] {
    std::ifstream in(images_dir() + "expected.json");
    return nlohmann::json::parse(in);
  }();
  return j;
}

std::vector<uint8_t> base64_decode(const std::string& s) {
  auto val = [](char c) -> int {
    if (c >= 'A' && c <= 'Z') return c - 'A';
    if (c >= 'a' && c <= 'z') return c - 'a' + 26;
    if (c >= '0' && c <= '9') return c - '0' + 52;
    return c == '+' ? 62 : c == '/' ? 63 : -1;
  };
  std::vector<uint8_t> out;
  int bits = 0, acc = 0;
  for (char c : s) {
    const int v = val(c);
    if (v < 0) continue;
    acc = acc << 6 | v, bits += 6;
    if (bits >= 8) out.push_back(uint8_t(acc >> (bits -= 8)));
  }
  return out;
}

TEST(VisionImage, FixturesAreThere) {
  ASSERT_GE(manifest()["good"].size(), 10u);
  ASSERT_GE(manifest()["bad"].size(), 8u);
}

TEST(VisionImage, DecodesAsPillowDoes) {
  for (const auto& [name, e] : manifest()["good"].items()) {
    SCOPED_TRACE(name);
    const RgbImage img = load_image_file(images_dir() + name);
    ASSERT_EQ(img.width, e["width"].get<int>());
    ASSERT_EQ(img.height, e["height"].get<int>());
    const std::vector<uint8_t> want = base64_decode(e["rgb_base64"].get<std::string>());
    ASSERT_EQ(img.rgb.size(), want.size());
    const int tol = e["tolerance"].get<int>();
    int worst = 0;
    for (size_t i = 0; i < want.size(); ++i) worst = std::max(worst, std::abs(int(img.rgb[i]) - int(want[i])));
    EXPECT_LE(worst, tol);
  }
}

TEST(VisionImage, RefusesBrokenFilesByName) {
  for (const auto& [name, e] : manifest()["bad"].items()) {
    SCOPED_TRACE(name);
    try {
      (void)load_image_file(images_dir() + name);
      ADD_FAILURE() << "accepted";
    } catch (const Error& err) {
      const std::string msg = err.what();
      EXPECT_NE(msg.find(e["error_contains"].get<std::string>()), std::string::npos) << msg;
      EXPECT_NE(msg.find(name), std::string::npos) << msg;  // names the file
    }
  }
}

TEST(VisionImage, PixelLimitIsCheckedBeforeDecoding) {
  DecodeLimits small;
  small.max_pixels = 23 * 17 - 1;
  for (const char* name : {"rgb.png", "rgb.jpg", "lossless.webp"}) {
    EXPECT_THROW((void)load_image_file(images_dir() + name, small), Error) << name;
    small.max_pixels = 23 * 17;
    EXPECT_NO_THROW((void)load_image_file(images_dir() + name, small)) << name;
    small.max_pixels = 23 * 17 - 1;
  }
}

TEST(VisionImage, SniffsFormats) {
  auto sniff = [](const std::string& name) {
    std::ifstream in(images_dir() + name, std::ios::binary);
    std::vector<uint8_t> b((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    return sniff_image_format(b);
  };
  EXPECT_EQ(sniff("rgb.png"), "png");
  EXPECT_EQ(sniff("rgb.jpg"), "jpeg");
  EXPECT_EQ(sniff("lossy.webp"), "webp");
  EXPECT_EQ(sniff("image.gif"), "");
}

TEST(VisionImage, OrientationsAreTheEightSymmetries) {
  RgbImage img;
  img.width = 3, img.height = 2;
  for (int i = 0; i < 6; ++i)
    for (int c = 0; c < 3; ++c) img.rgb.push_back(uint8_t(10 * i + c));
  // Orientation o displays the stored picture transformed; o and its inverse round-trip.
  const int inverse[9] = {0, 1, 2, 3, 4, 5, 8, 7, 6};
  for (int o = 1; o <= 8; ++o) {
    const RgbImage shown = apply_orientation(img, o);
    EXPECT_EQ(shown.width, o >= 5 ? 2 : 3);
    const RgbImage back = apply_orientation(shown, inverse[o]);
    EXPECT_EQ(back.rgb, img.rgb) << o;
  }
  // 6: the stored top-left pixel is shown at the top right.
  const RgbImage r6 = apply_orientation(img, 6);
  EXPECT_EQ(r6.at(0, r6.width - 1, 0), img.at(0, 0, 0));
}

}  // namespace
}  // namespace gannet::vision
