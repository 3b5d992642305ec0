// Separable bicubic resampling with antialiasing, 8 bits per channel, in the fixed-point
// arithmetic of PIL's Resample.c (which torchvision's uint8 antialiased resize follows):
// coefficients from a = -0.5 cubic over a support of 2 * max(1, scale), normalised to sum
// 1, rounded to 22 fractional bits; each pass rounds and clips back to 8 bits.
#include <cmath>

#include "vision/image_processor.h"

namespace gannet::vision {

namespace {

constexpr int kPrecisionBits = 32 - 8 - 2;

double cubic(double x) {
  constexpr double a = -0.5;
  if (x < 0.0) x = -x;
  if (x < 1.0) return ((a + 2.0) * x - (a + 3.0)) * x * x + 1;
  if (x < 2.0) return (((x - 5) * x + 8) * x - 4) * a;
  return 0.0;
}

// Per output index: the first input index, the count, and ksize fixed-point weights.
struct Coeffs {
  int ksize = 0;
  std::vector<int> first, count;
  std::vector<int32_t> k;  // [out, ksize]
};

Coeffs coefficients(int in_size, int out_size) {
  const double scale = double(in_size) / double(out_size);
  const double filterscale = scale < 1.0 ? 1.0 : scale;
  const double support = 2.0 * filterscale;
  Coeffs c;
  c.ksize = int(std::ceil(support)) * 2 + 1;
  c.first.resize(size_t(out_size));
  c.count.resize(size_t(out_size));
  c.k.assign(size_t(out_size) * size_t(c.ksize), 0);
  std::vector<double> w(size_t(c.ksize));
  for (int xx = 0; xx < out_size; ++xx) {
    const double center = (xx + 0.5) * scale;
    const double ss = 1.0 / filterscale;
    int xmin = int(center - support + 0.5);
    if (xmin < 0) xmin = 0;
    int xmax = int(center + support + 0.5);
    if (xmax > in_size) xmax = in_size;
    xmax -= xmin;
    double ww = 0.0;
    for (int x = 0; x < xmax; ++x) {
      w[size_t(x)] = cubic((x + xmin - center + 0.5) * ss);
      ww += w[size_t(x)];
    }
    for (int x = 0; x < xmax; ++x) {
      const double v = ww != 0.0 ? w[size_t(x)] / ww : w[size_t(x)];
      c.k[size_t(xx) * size_t(c.ksize) + size_t(x)] =
          v < 0 ? int32_t(-0.5 + v * (1 << kPrecisionBits)) : int32_t(0.5 + v * (1 << kPrecisionBits));
    }
    c.first[size_t(xx)] = xmin;
    c.count[size_t(xx)] = xmax;
  }
  return c;
}

uint8_t clip8(int64_t acc) {
  const int64_t v = acc >> kPrecisionBits;
  return uint8_t(v < 0 ? 0 : v > 255 ? 255 : v);
}

}  // namespace

RgbImage resize_bicubic(const RgbImage& img, int out_w, int out_h) {
  if (out_w == img.width && out_h == img.height) return img;
  // Horizontal first (over the input rows the vertical pass will read), then vertical;
  // a pass whose size does not change is skipped, as PIL skips it.
  RgbImage cur = img;
  if (out_w != img.width) {
    const Coeffs c = coefficients(img.width, out_w);
    RgbImage h;
    h.width = out_w, h.height = img.height;
    h.rgb.resize(size_t(out_w) * size_t(img.height) * 3);
    for (int y = 0; y < img.height; ++y)
      for (int xx = 0; xx < out_w; ++xx) {
        const int32_t* k = &c.k[size_t(xx) * size_t(c.ksize)];
        for (int ch = 0; ch < 3; ++ch) {
          int64_t acc = int64_t(1) << (kPrecisionBits - 1);
          for (int x = 0; x < c.count[size_t(xx)]; ++x) acc += int64_t(cur.at(y, c.first[size_t(xx)] + x, ch)) * k[x];
          h.rgb[(size_t(y) * size_t(out_w) + size_t(xx)) * 3 + size_t(ch)] = clip8(acc);
        }
      }
    cur = std::move(h);
  }
  if (out_h != img.height) {
    const Coeffs c = coefficients(img.height, out_h);
    RgbImage v;
    v.width = cur.width, v.height = out_h;
    v.rgb.resize(size_t(cur.width) * size_t(out_h) * 3);
    for (int yy = 0; yy < out_h; ++yy) {
      const int32_t* k = &c.k[size_t(yy) * size_t(c.ksize)];
      for (int x = 0; x < cur.width; ++x)
        for (int ch = 0; ch < 3; ++ch) {
          int64_t acc = int64_t(1) << (kPrecisionBits - 1);
          for (int y = 0; y < c.count[size_t(yy)]; ++y) acc += int64_t(cur.at(c.first[size_t(yy)] + y, x, ch)) * k[y];
          v.rgb[(size_t(yy) * size_t(cur.width) + size_t(x)) * 3 + size_t(ch)] = clip8(acc);
        }
    }
    cur = std::move(v);
  }
  return cur;
}

}  // namespace gannet::vision
