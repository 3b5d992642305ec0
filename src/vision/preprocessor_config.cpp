#include "vision/preprocessor_config.h"

#include <cmath>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "core/error.h"

namespace gannet::vision {

namespace {

using json = nlohmann::json;

bool flag(const json& j, const char* key, bool def, const std::string& file) {
  if (!j.contains(key) || j[key].is_null()) return def;
  if (!j[key].is_boolean()) fail(file, ": '", key, "' must be true or false");
  return j[key].get<bool>();
}

int64_t whole(const json& v, const std::string& what, const std::string& file) {
  if (!v.is_number_integer() || v.get<int64_t>() <= 0) fail(file, ": '", what, "' must be a positive integer");
  return v.get<int64_t>();
}

}  // namespace

ImageProcessorConfig parse_preprocessor_config(const json& j, const std::string& file, ImageProcessorConfig c) {
  if (!j.is_object()) fail(file, ": expected a JSON object");
  static const char* const kKnown[] = {"do_convert_rgb", "do_normalize", "do_rescale", "do_resize", "downsample_ratio",
                                       "image_mean", "image_std", "image_processor_type", "patch_size", "resample",
                                       "rescale_factor", "size", "pad_value", "max_wh_ratio", "processor_class"};
  for (auto it = j.begin(); it != j.end(); ++it) {
    bool known = false;
    for (const char* k : kKnown) known = known || it.key() == k;
    if (!known) fail(file, ": '", it.key(), "' is not an image processor setting gannet knows (refused rather than ignored)");
  }
  if (j.contains("image_processor_type") && j["image_processor_type"] != "DeepseekV41ImageProcessor" &&
      j["image_processor_type"] != "DeepseekV41ImageProcessorFast")
    fail(file, ": 'image_processor_type' ", j["image_processor_type"].dump(), " is not DeepSeek-V4.1's image processor");
  // Steps gannet always takes: each may be stated, not turned off.
  for (const char* k : {"do_convert_rgb", "do_resize"})
    if (!flag(j, k, true, file)) fail(file, ": '", k, "' = false is unsupported (the model was trained on converted, resized images)");
  if (j.contains("resample") && !(j["resample"].is_number_integer() && j["resample"].get<int>() == 3))
    fail(file, ": 'resample' ", j["resample"].dump(), " is unsupported (3: bicubic)");
  if (j.contains("patch_size") && whole(j["patch_size"], "patch_size", file) != c.patch_size)
    fail(file, ": 'patch_size' ", j["patch_size"].dump(), " differs from vision_config.patch_size ", c.patch_size);
  if (j.contains("downsample_ratio") && whole(j["downsample_ratio"], "downsample_ratio", file) != c.downsample_ratio)
    fail(file, ": 'downsample_ratio' ", j["downsample_ratio"].dump(), " differs from vision_config.downsample_ratio ",
         c.downsample_ratio);
  if (j.contains("size")) {
    const json& s = j["size"];
    if (!s.is_object()) fail(file, ": 'size' must be an object");
    for (auto it = s.begin(); it != s.end(); ++it) {
      if (it.key() == "shortest_edge") c.min_pixels = whole(*it, "size.shortest_edge", file);  // min_pixels
      else if (it.key() == "longest_edge") c.max_image_tokens = whole(*it, "size.longest_edge", file);  // max tokens
      else fail(file, ": 'size.", it.key(), "' is unsupported (shortest_edge = min_pixels, longest_edge = max_image_tokens)");
    }
    if (c.max_image_tokens < 4) fail(file, ": 'size.longest_edge' (max_image_tokens) must be at least 4");
  }
  const bool rescale = flag(j, "do_rescale", true, file), normalize = flag(j, "do_normalize", true, file);
  if (j.contains("rescale_factor") && !j["rescale_factor"].is_null()) {
    if (!j["rescale_factor"].is_number() || std::fabs(j["rescale_factor"].get<double>() * 255.0 - 1.0) > 1e-12)
      fail(file, ": 'rescale_factor' ", j["rescale_factor"].dump(), " is unsupported (1/255)");
  }
  auto triple = [&](const char* key, float* dst) {
    if (!j.contains(key) || j[key].is_null()) return;
    const json& v = j[key];
    if (v.is_number()) {
      for (int i = 0; i < 3; ++i) dst[i] = v.get<float>();
      return;
    }
    if (!v.is_array() || v.size() != 3) fail(file, ": '", key, "' must be a number or a list of 3");
    for (int i = 0; i < 3; ++i) {
      if (!v[size_t(i)].is_number()) fail(file, ": '", key, "[", i, "]' must be a number");
      dst[i] = v[size_t(i)].get<float>();
    }
  };
  triple("image_mean", c.mean);
  triple("image_std", c.std);
  for (int i = 0; i < 3; ++i)
    if (!(c.std[i] > 0)) fail(file, ": 'image_std' must be positive");
  if (!normalize) {  // pixels / 255 (or raw levels without rescale)
    for (int i = 0; i < 3; ++i) c.mean[i] = 0.0f, c.std[i] = 1.0f;
  }
  if (!rescale) fail(file, ": 'do_rescale' = false is unsupported (pixels are taken as levels / 255)");
  if (j.contains("pad_value")) {
    if (!j["pad_value"].is_number_integer() || j["pad_value"].get<int>() < 0 || j["pad_value"].get<int>() > 255)
      fail(file, ": 'pad_value' must be an integer in [0, 255]");
    c.pad_value = j["pad_value"].get<int>();
  }
  if (j.contains("max_wh_ratio") && !j["max_wh_ratio"].is_null()) {
    if (!j["max_wh_ratio"].is_number() || !(j["max_wh_ratio"].get<double>() > 0))
      fail(file, ": 'max_wh_ratio' must be a positive number or null");
    c.max_wh_ratio = j["max_wh_ratio"].get<double>();
  }
  return c;
}

ImageProcessorConfig load_preprocessor_config(const std::string& dir, ImageProcessorConfig base) {
  const std::string path = (std::filesystem::path(dir) / "preprocessor_config.json").string();
  std::ifstream in(path);
  if (!in) return base;
  json j;
  try {
    j = json::parse(in);
  } catch (const json::exception& e) {
    fail(path, ": not valid JSON (", e.what(), ")");
  }
  return parse_preprocessor_config(j, path, base);
}

}  // namespace gannet::vision
