// Format sniffing, the checks every decoder shares, alpha over white, and file loading.
#include <cstring>
#include <fstream>
#include <iterator>

#include "core/error.h"
#include "vision/image_decoders.h"

namespace gannet::vision {

std::string sniff_image_format(std::span<const uint8_t> b) {
  static const uint8_t kPng[8] = {0x89, 'P', 'N', 'G', '\r', '\n', 0x1A, '\n'};
  if (b.size() >= 8 && std::memcmp(b.data(), kPng, 8) == 0) return "png";
  if (b.size() >= 3 && b[0] == 0xFF && b[1] == 0xD8 && b[2] == 0xFF) return "jpeg";
  if (b.size() >= 12 && std::memcmp(b.data(), "RIFF", 4) == 0 && std::memcmp(b.data() + 8, "WEBP", 4) == 0)
    return "webp";
  return "";
}

void check_dimensions(const std::string& what, int64_t w, int64_t h, const DecodeLimits& limits) {
  if (w <= 0 || h <= 0) fail(what, ": the image is empty (", w, "x", h, " pixels)");
  if (w * h > limits.max_pixels)
    fail(what, ": the image is ", w, "x", h, " = ", w * h, " pixels, more than the limit of ", limits.max_pixels,
         " (--max-image-pixels); refused before decoding");
}

RgbImage rgb_from_rgba(const uint8_t* rgba, int w, int h) {
  RgbImage img;
  img.width = w, img.height = h;
  img.rgb.resize(size_t(w) * size_t(h) * 3);
  for (size_t i = 0, n = size_t(w) * size_t(h); i < n; ++i) {
    const uint32_t a = rgba[4 * i + 3];
    for (int c = 0; c < 3; ++c)  // c·a + 255·(255 − a), over 255, rounded half up
      img.rgb[3 * i + size_t(c)] = uint8_t((uint32_t(rgba[4 * i + size_t(c)]) * a + 255u * (255u - a) + 127u) / 255u);
  }
  return img;
}

RgbImage decode_image(std::span<const uint8_t> bytes, const std::string& what, const DecodeLimits& limits) {
  if (bytes.empty()) fail(what, ": the image is empty (0 bytes)");
  if (bytes.size() > limits.max_bytes)
    fail(what, ": the image file is ", bytes.size(), " bytes, more than the limit of ", limits.max_bytes);
  const std::string format = sniff_image_format(bytes);
  RgbImage img;
  int orientation = 1;
  if (format == "png") img = decode_png(bytes, what, limits, &orientation);
  else if (format == "jpeg") img = decode_jpeg(bytes, what, limits, &orientation);
  else if (format == "webp") img = decode_webp(bytes, what, limits, &orientation);
  else fail(what, ": not a PNG, JPEG or WebP image (unrecognised signature)");
  return apply_orientation(std::move(img), orientation);
}

RgbImage load_image_file(const std::string& path, const DecodeLimits& limits) {
  std::ifstream in(path, std::ios::binary);
  if (!in) fail("image '", path, "': cannot open the file");
  in.seekg(0, std::ios::end);
  const std::streamoff size = in.tellg();
  if (size < 0) fail("image '", path, "': cannot read the file");
  if (size_t(size) > limits.max_bytes)
    fail("image '", path, "': the file is ", size, " bytes, more than the limit of ", limits.max_bytes);
  in.seekg(0);
  std::vector<uint8_t> bytes(static_cast<size_t>(size));
  if (size > 0 && !in.read(reinterpret_cast<char*>(bytes.data()), size)) fail("image '", path, "': cannot read the file");
  return decode_image(bytes, "image '" + path + "'", limits);
}

}  // namespace gannet::vision
