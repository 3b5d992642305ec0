// A decoded picture, as the image processor takes it: 8-bit RGB, rows top to bottom.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <vector>

namespace gannet::vision {

struct RgbImage {
  int width = 0, height = 0;
  std::vector<uint8_t> rgb;  // [height, width, 3]
  uint8_t at(int y, int x, int c) const { return rgb[(size_t(y) * size_t(width) + size_t(x)) * 3 + size_t(c)]; }
};

// What a decoder may be asked to take. An image is refused before its pixels are
// decoded when its header says more pixels than max_pixels (a decompression bomb is a
// small file with a huge header).
struct DecodeLimits {
  int64_t max_pixels = 89'478'485;  // PIL's default decompression-bomb bound
  size_t max_bytes = size_t(64) << 20;  // the encoded file
};

// PNG, JPEG or WebP by their signature. Grey, grey+alpha, palette and RGBA become RGB
// (alpha composited over white, as a viewer shows a transparent image on a page); 16-bit
// PNG channels keep their high byte; EXIF orientation (JPEG APP1, PNG eXIf, WebP EXIF) is
// applied. `what` names the image in errors ("messages[1].content[2]", a path). Throws
// gannet::Error for an empty, truncated, corrupt, oversized or unsupported image.
RgbImage decode_image(std::span<const uint8_t> bytes, const std::string& what, const DecodeLimits& limits = {});

// The format decode_image would read ("png", "jpeg", "webp"), or "" for none of them.
std::string sniff_image_format(std::span<const uint8_t> bytes);

// Reads a file and decodes it; errors name the path.
RgbImage load_image_file(const std::string& path, const DecodeLimits& limits = {});

// EXIF orientation (1-8) from a TIFF-structured EXIF block (with or without the
// "Exif\0\0" prefix); 1 when absent or unreadable.
int exif_orientation(std::span<const uint8_t> exif);
// Rotates / mirrors as EXIF orientation o says, so the image stands as it was shot.
RgbImage apply_orientation(RgbImage img, int o);

}  // namespace gannet::vision

namespace gannet::vision {

// An image given inline as a data: URL ("data:image/png;base64,...": PNG, JPEG or WebP,
// base64). Anything else (http:, file:, a path) is refused: gannet fetches nothing.
// `what` names the field in errors.
RgbImage decode_data_url(const std::string& url, const std::string& what, const DecodeLimits& limits = {});

}  // namespace gannet::vision
