// The patch-grid plan of transformers' DeepseekV41ImageProcessor (plan_image_grid,
// safe_resize, solve_resize_ratio, contain_size), in the same float64 operations so that
// each floor / ceil / round lands where Python's does.
#include <cmath>

#include "core/error.h"
#include "vision/image_processor.h"

namespace gannet::vision {

namespace {

int64_t tokens_for(int64_t box_h, int64_t box_w, int p, int r) {
  const int64_t hh = (box_h / p + r - 1) / r, ww = (box_w / p + r - 1) / r;
  return hh * (ww + 1) + 2;
}

// Python's round(): half to even.
int64_t round_half_even(double x) { return int64_t(std::nearbyint(x)); }

}  // namespace

ImagePlan plan_image(int width, int height, const ImageProcessorConfig& cfg) {
  const int p = cfg.patch_size, r = cfg.downsample_ratio;
  const int64_t max_tokens = cfg.max_image_tokens;
  double W = width, H = height;
  if (cfg.max_wh_ratio && W > H * *cfg.max_wh_ratio) W = H * *cfg.max_wh_ratio;
  if (W * H > 0 && W * H < double(cfg.min_pixels)) {
    const double s = std::sqrt(double(cfg.min_pixels) / (W * H));
    W = double(int64_t(W * s));
    H = double(int64_t(H * s));
  }
  int64_t best_w = int64_t(std::ceil(W / p)) * p, best_h = int64_t(std::ceil(H / p)) * p;
  if (tokens_for(best_h, best_w, p, r) > max_tokens) {
    // solve_resize_ratio on the (possibly upscaled) H, W
    const double ratio = H / W;
    const double mw = std::sqrt(double(max_tokens - 2) / ratio + 0.25) - 0.5;
    const double mh = mw * ratio;
    const int64_t cell = int64_t(p) * r;
    if (mw < 1) {
      best_h = (max_tokens - 2) / 2 * cell;
      best_w = cell;
    } else if (mh < 1) {
      best_h = cell;
      best_w = (max_tokens - 3) * cell;
    } else {
      const double beta = std::min(std::floor(mw) * double(cell) / W, std::floor(mh) * double(cell) / H);
      best_h = int64_t(std::floor(H * beta / p)) * p;
      best_w = int64_t(std::floor(W * beta / p)) * p;
    }
    if (best_h <= 0 || best_w <= 0 || tokens_for(best_h, best_w, p, r) > max_tokens)
      fail("image of ", width, "x", height, " pixels cannot fit ", max_tokens,
           " image tokens (max_image_tokens) with patch ", p, " and downsample ", r);
  }
  ImagePlan plan;
  plan.box_w = int(best_w), plan.box_h = int(best_h);
  // contain_size on the original size
  const double w0 = width, h0 = height;
  if (w0 / h0 > double(best_w) / double(best_h)) {
    plan.fit_w = int(best_w);
    plan.fit_h = int(round_half_even(h0 / w0 * double(best_w)));
  } else if (w0 / h0 < double(best_w) / double(best_h)) {
    plan.fit_h = int(best_h);
    plan.fit_w = int(round_half_even(w0 / h0 * double(best_h)));
  } else {
    plan.fit_w = int(best_w), plan.fit_h = int(best_h);
  }
  if (cfg.max_wh_ratio && double(width) > double(height) * *cfg.max_wh_ratio) {
    plan.fit_w = plan.box_w, plan.fit_h = plan.box_h;  // very wide: squeezed into the box
  }
  plan.fit_w = std::max(plan.fit_w, 1), plan.fit_h = std::max(plan.fit_h, 1);
  plan.pad_top = int(round_half_even(double(best_h - plan.fit_h) * 0.5));
  plan.pad_left = int(round_half_even(double(best_w - plan.fit_w) * 0.5));
  plan.grid_h = int(best_h / p), plan.grid_w = int(best_w / p);
  plan.tokens_h = (plan.grid_h + r - 1) / r, plan.tokens_w = (plan.grid_w + r - 1) / r;
  plan.n_tokens = int64_t(plan.tokens_h) * (plan.tokens_w + 1) + 2;
  return plan;
}

}  // namespace gannet::vision
