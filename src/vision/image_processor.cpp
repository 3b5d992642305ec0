// Fit, pad, normalise and cut into patches (deepseek-v41-vision.md §2 steps 3-6).
#include "core/error.h"
#include "vision/image_processor.h"

namespace gannet::vision {

ImagePatches preprocess_image(const RgbImage& img, const ImageProcessorConfig& cfg) {
  ImagePatches out;
  out.plan = plan_image(img.width, img.height, cfg);
  const ImagePlan& pl = out.plan;
  const RgbImage fitted = resize_bicubic(img, pl.fit_w, pl.fit_h);
  const int p = cfg.patch_size;
  const size_t row = size_t(3) * size_t(p) * size_t(p);
  out.values.resize(size_t(pl.grid_h) * size_t(pl.grid_w) * row);
  // Normalised value of each 8-bit level per channel: (x / 255 - mean) / std, computed as
  // torchvision's fused rescale + normalise does it in float32: (x - 255 mean) / (255 std).
  float level[3][256];
  for (int c = 0; c < 3; ++c)
    for (int x = 0; x < 256; ++x)
      level[c][x] = (float(x) - cfg.mean[c] * 255.0f) / (cfg.std[c] * 255.0f);
  for (int gy = 0; gy < pl.grid_h; ++gy)
    for (int gx = 0; gx < pl.grid_w; ++gx) {
      float* dst = &out.values[(size_t(gy) * size_t(pl.grid_w) + size_t(gx)) * row];
      for (int c = 0; c < 3; ++c)
        for (int py = 0; py < p; ++py)
          for (int px = 0; px < p; ++px) {
            const int y = gy * p + py - pl.pad_top, x = gx * p + px - pl.pad_left;
            const bool inside = y >= 0 && y < fitted.height && x >= 0 && x < fitted.width;
            const int v = inside ? fitted.at(y, x, c) : cfg.pad_value;
            *dst++ = level[c][v];
          }
    }
  return out;
}

}  // namespace gannet::vision
