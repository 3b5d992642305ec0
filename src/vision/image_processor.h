// DeepSeek-V4.1's image processor: an RGB picture -> the ViT's patch rows, as
// transformers' DeepseekV41ImageProcessor makes them (docs: deepseek-v41-vision.md §2):
// plan a patch grid within the pixel and token budget, fit the picture in it keeping its
// aspect (bicubic, antialiased), pad with grey 127, normalise, and cut row-major patches.
#pragma once

#include <cstdint>
#include <optional>
#include <vector>

#include "vision/image.h"

namespace gannet::vision {

struct ImageProcessorConfig {
  int patch_size = 14;
  int downsample_ratio = 3;       // the aligner's r x r window
  int64_t min_pixels = 295'936;   // 544^2: smaller pictures are upscaled to at least this
  int64_t max_image_tokens = 1024;
  std::optional<double> max_wh_ratio;
  int pad_value = 127;
  float mean[3] = {0.5f, 0.5f, 0.5f};
  float std[3] = {0.5f, 0.5f, 0.5f};
};

// Where a W x H picture goes: the padded box, the picture's fitted size inside it, the
// patch grid and the image's tokens.
struct ImagePlan {
  int box_w = 0, box_h = 0;  // best_w, best_h: multiples of patch_size
  int fit_w = 0, fit_h = 0;  // the resized picture (== box unless the aspects differ)
  int pad_left = 0, pad_top = 0;
  int grid_h = 0, grid_w = 0;      // patches: box / patch_size
  int tokens_h = 0, tokens_w = 0;  // aligner rows: ceil(grid / r)
  int64_t n_tokens = 0;            // tokens_h * (tokens_w + 1) + 2: START, rows + NEWLINE, END
};

// Throws gannet::Error when the picture cannot fit the token budget.
ImagePlan plan_image(int width, int height, const ImageProcessorConfig& cfg);

struct ImagePatches {
  ImagePlan plan;
  std::vector<float> values;  // [grid_h * grid_w, 3 * patch^2], patch (c, ph, pw) channel-major
};

ImagePatches preprocess_image(const RgbImage& img, const ImageProcessorConfig& cfg);

// Bicubic resampling (a = -0.5) with an antialiasing support scaled by the reduction, in
// two separable 8-bit passes (horizontal, then vertical) with 22-bit fixed-point weights:
// the resampler behind PIL's Image.resize(BICUBIC) and torchvision's antialiased uint8
// resize, which transformers' image processors use.
RgbImage resize_bicubic(const RgbImage& img, int out_w, int out_h);

}  // namespace gannet::vision
