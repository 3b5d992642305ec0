// The per-format decoders behind decode_image (image.h). Each checks the header's size
// against the limits before it decodes a pixel, and sets *orientation from the file's EXIF.
#pragma once

#include "vision/image.h"

namespace gannet::vision {

RgbImage decode_png(std::span<const uint8_t> bytes, const std::string& what, const DecodeLimits& limits,
                    int* orientation);
RgbImage decode_jpeg(std::span<const uint8_t> bytes, const std::string& what, const DecodeLimits& limits,
                     int* orientation);
RgbImage decode_webp(std::span<const uint8_t> bytes, const std::string& what, const DecodeLimits& limits,
                     int* orientation);

// Shared by the decoders.
void check_dimensions(const std::string& what, int64_t width, int64_t height, const DecodeLimits& limits);
RgbImage rgb_from_rgba(const uint8_t* rgba, int width, int height);  // alpha over white

}  // namespace gannet::vision
