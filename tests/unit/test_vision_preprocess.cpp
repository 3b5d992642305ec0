// DeepSeek-V4.1's image processor against transformers' (tests/golden/
// deepseek-v41-vision-tiny, vision_reference.safetensors `pixel_values`): image 1 needs no
// resampling and must match bit for bit; image 2 is upscaled (bicubic) and padded, and may
// differ by one 8-bit step. The grid plans of the vision doc's worked examples.
// labels: exact
#include <gtest/gtest.h>

#include <cmath>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <string>

#include "core/error.h"
#include "io/safetensors.h"
#include "vision/image_processor.h"
#include "vision/preprocessor_config.h"

#include <nlohmann/json.hpp>

namespace gannet::vision {
namespace {

std::string golden_dir() {
  const char* dir = std::getenv("GANNET_SOURCE_DIR");
  const std::string root =
      dir ? dir : std::filesystem::path(__FILE__).parent_path().parent_path().parent_path().string();
  return root + "/tests/golden/deepseek-v41-vision-tiny/";
}

ImageProcessorConfig tiny_config() {
  ImageProcessorConfig c;
  c.min_pixels = 3136;
  c.max_image_tokens = 64;
  return c;
}

std::vector<float> reference_pixels() {
  io::SafetensorsFile f(golden_dir() + "vision_reference.safetensors");
  for (const io::TensorInfo& t : f.tensors())
    if (t.name == "pixel_values") {
      std::vector<float> v(size_t(t.numel()));
      std::memcpy(v.data(), f.tensor_data(t), v.size() * sizeof(float));
      return v;
    }
  ADD_FAILURE() << "no pixel_values";
  return {};
}

TEST(VisionPreprocess, ImageWithoutResamplingIsBitExact) {
  const RgbImage img = load_image_file(golden_dir() + "image1.png");
  const ImagePatches p = preprocess_image(img, tiny_config());
  EXPECT_EQ(p.plan.grid_h, 8);
  EXPECT_EQ(p.plan.grid_w, 11);
  EXPECT_EQ(p.plan.n_tokens, 17);
  const std::vector<float> ref = reference_pixels();
  ASSERT_EQ(ref.size(), size_t(112 * 588));
  ASSERT_EQ(p.values.size(), size_t(88 * 588));
  EXPECT_EQ(std::memcmp(p.values.data(), ref.data(), p.values.size() * sizeof(float)), 0);
}

TEST(VisionPreprocess, UpscaledAndPaddedImageWithinOneLevel) {
  const RgbImage img = load_image_file(golden_dir() + "image2.png");
  ASSERT_EQ(img.width, 36);
  ASSERT_EQ(img.height, 60);
  const ImagePatches p = preprocess_image(img, tiny_config());
  EXPECT_EQ(p.plan.box_w, 56);
  EXPECT_EQ(p.plan.box_h, 84);
  EXPECT_EQ(p.plan.fit_w, 50);
  EXPECT_EQ(p.plan.fit_h, 84);
  EXPECT_EQ(p.plan.pad_left, 3);
  EXPECT_EQ(p.plan.pad_top, 0);
  EXPECT_EQ(p.plan.n_tokens, 8);
  const std::vector<float> ref = reference_pixels();
  ASSERT_EQ(p.values.size(), size_t(24 * 588));
  const float* r = ref.data() + 88 * 588;
  float worst = 0;
  size_t differ = 0;
  for (size_t i = 0; i < p.values.size(); ++i) {
    worst = std::max(worst, std::fabs(p.values[i] - r[i]));
    differ += p.values[i] != r[i];
  }
  EXPECT_LE(worst, 1.0f / 127.5f + 1e-6f);
  RecordProperty("values_that_differ", int(differ));
}

TEST(VisionPreprocess, PlansOfTheWorkedExamples) {
  ImageProcessorConfig released;  // 544^2 min pixels, 1024 tokens
  const ImagePlan sq = plan_image(544, 544, released);
  EXPECT_EQ(sq.box_w, 546);
  EXPECT_EQ(sq.grid_h, 39);
  EXPECT_EQ(sq.tokens_h, 13);
  EXPECT_EQ(sq.n_tokens, 184);
  const ImagePlan small = plan_image(100, 80, released);  // upscaled to the minimum too
  EXPECT_GE(int64_t(small.box_w) * small.box_h, 295936);
  ImageProcessorConfig t;  // transformers' test_processing: 20x40 with min 56^2, 64 tokens
  t.min_pixels = 56 * 56;
  t.max_image_tokens = 64;
  const ImagePlan e = plan_image(20, 40, t);
  EXPECT_EQ(e.box_w, 42);
  EXPECT_EQ(e.box_h, 84);
  EXPECT_EQ(e.grid_h, 6);
  EXPECT_EQ(e.grid_w, 3);
  EXPECT_EQ(e.n_tokens, 6);
  // A huge picture is brought within the token budget, on a multiple of the cell on its
  // binding side.
  for (auto [w, h] : {std::pair{4000, 3000}, {3000, 4000}, {10000, 500}, {500, 10000}}) {
    const ImagePlan big = plan_image(w, h, released);
    EXPECT_LE(big.n_tokens, 1024) << w << "x" << h;
    EXPECT_EQ(big.box_w % 14, 0);
    EXPECT_EQ(big.box_h % 14, 0);
    EXPECT_GE(big.n_tokens, 16) << w << "x" << h;
  }
}

TEST(VisionPreprocess, ResamplingAConstantImageKeepsItConstant) {
  RgbImage img;
  img.width = 7, img.height = 5;
  img.rgb.assign(7 * 5 * 3, 200);
  for (auto [w, h] : {std::pair{20, 13}, {3, 2}, {7, 11}, {1, 1}}) {
    const RgbImage r = resize_bicubic(img, w, h);
    ASSERT_EQ(r.rgb.size(), size_t(w * h * 3));
    for (uint8_t v : r.rgb) ASSERT_EQ(v, 200) << w << "x" << h;
  }
}

// preprocessor_config.json: each key honoured (size restates the budget, mean / std, pad
// value, max_wh_ratio change the result) or refused by name.
TEST(VisionPreprocess, PreprocessorConfigKeysAreHonouredOrRefused) {
  const nlohmann::json golden = nlohmann::json::parse(R"({"do_convert_rgb": true, "do_normalize": true,
    "do_rescale": true, "do_resize": true, "downsample_ratio": 3, "image_mean": [0.5, 0.5, 0.5],
    "image_processor_type": "DeepseekV41ImageProcessor", "image_std": [0.5, 0.5, 0.5], "patch_size": 14,
    "resample": 3, "rescale_factor": 0.00392156862745098, "size": {"longest_edge": 64, "shortest_edge": 3136}})");
  const ImageProcessorConfig c = parse_preprocessor_config(golden, "p.json", ImageProcessorConfig{});
  EXPECT_EQ(c.min_pixels, 3136);
  EXPECT_EQ(c.max_image_tokens, 64);
  nlohmann::json j = golden;
  j["image_mean"] = {0.25, 0.5, 0.75};
  j["pad_value"] = 0;
  j["max_wh_ratio"] = 2.0;
  const ImageProcessorConfig d = parse_preprocessor_config(j, "p.json", ImageProcessorConfig{});
  EXPECT_EQ(d.mean[0], 0.25f);
  EXPECT_EQ(d.mean[2], 0.75f);
  EXPECT_EQ(d.pad_value, 0);
  ASSERT_TRUE(d.max_wh_ratio.has_value());
  EXPECT_EQ(*d.max_wh_ratio, 2.0);
  auto refused = [&](const char* key, const nlohmann::json& value) {
    nlohmann::json k = golden;
    k[key] = value;
    try {
      (void)parse_preprocessor_config(k, "p.json", ImageProcessorConfig{});
    } catch (const Error& e) {
      return std::string(e.what()).find(key) != std::string::npos;
    }
    return false;
  };
  EXPECT_TRUE(refused("resample", 2));
  EXPECT_TRUE(refused("patch_size", 16));
  EXPECT_TRUE(refused("downsample_ratio", 2));
  EXPECT_TRUE(refused("do_resize", false));
  EXPECT_TRUE(refused("do_rescale", false));
  EXPECT_TRUE(refused("rescale_factor", 0.5));
  EXPECT_TRUE(refused("image_std", {0.5, 0.0, 0.5}));
  EXPECT_TRUE(refused("crop_size", 224));
  EXPECT_TRUE(refused("image_processor_type", "SiglipImageProcessor"));
  EXPECT_TRUE(refused("pad_value", 300));
}

}  // namespace
}  // namespace gannet::vision
