// PNG through libpng's classic interface: palette, tRNS, low bit depths and grey expanded,
// 16-bit channels cut to their high byte, then RGB(A) rows; alpha over white.
#include <png.h>

#include <csetjmp>
#include <cstring>

#include "core/error.h"
#include "vision/image_decoders.h"

namespace gannet::vision {

namespace {

struct PngSource {
  const uint8_t* data;
  size_t size, at;
  char error[256];
};

void png_read_from_memory(png_structp png, png_bytep out, png_size_t n) {
  auto* src = static_cast<PngSource*>(png_get_io_ptr(png));
  if (n > src->size - src->at) png_error(png, "the file ends early (truncated)");
  std::memcpy(out, src->data + src->at, n);
  src->at += n;
}

void png_on_error(png_structp png, png_const_charp msg) {
  auto* src = static_cast<PngSource*>(png_get_error_ptr(png));
  std::snprintf(src->error, sizeof(src->error), "%s", msg);
  png_longjmp(png, 1);
}

void png_on_warning(png_structp, png_const_charp) {}

}  // namespace

RgbImage decode_png(std::span<const uint8_t> bytes, const std::string& what, const DecodeLimits& limits,
                    int* orientation) {
  PngSource src{bytes.data(), bytes.size(), 0, {0}};
  png_structp png = png_create_read_struct(PNG_LIBPNG_VER_STRING, &src, png_on_error, png_on_warning);
  if (!png) fail(what, ": out of memory decoding PNG");
  png_infop info = png_create_info_struct(png);
  if (!info) {
    png_destroy_read_struct(&png, nullptr, nullptr);
    fail(what, ": out of memory decoding PNG");
  }
  // Filled before any longjmp can happen and only read after a normal return.
  std::vector<uint8_t> pixels;
  std::vector<png_bytep> rows;
  int w = 0, h = 0, channels = 0;
  bool too_big = false;
  if (setjmp(png_jmpbuf(png))) {
    png_destroy_read_struct(&png, &info, nullptr);
    fail(what, ": corrupt PNG (", src.error, ")");
  }
  png_set_read_fn(png, &src, png_read_from_memory);
  // CRC errors in ancillary chunks are errors too (a damaged file is refused, not guessed).
  png_set_crc_action(png, PNG_CRC_ERROR_QUIT, PNG_CRC_ERROR_QUIT);
  png_read_info(png, info);
  w = int(png_get_image_width(png, info));
  h = int(png_get_image_height(png, info));
  too_big = int64_t(w) * int64_t(h) > limits.max_pixels || w <= 0 || h <= 0;
  if (!too_big) {
    png_set_expand(png);  // palette -> RGB, grey < 8 bits -> 8, tRNS -> alpha
    png_set_strip_16(png);
    png_set_gray_to_rgb(png);
    png_set_interlace_handling(png);
    png_read_update_info(png, info);
    channels = int(png_get_channels(png, info));
    if (channels == 3 || channels == 4) {
      pixels.resize(size_t(w) * size_t(h) * size_t(channels));
      rows.resize(size_t(h));
      for (int y = 0; y < h; ++y) rows[size_t(y)] = pixels.data() + size_t(y) * size_t(w) * size_t(channels);
      png_read_image(png, rows.data());
      png_read_end(png, nullptr);
      png_bytep exif = nullptr;
      png_uint_32 exif_len = 0;
      if (png_get_eXIf_1(png, info, &exif_len, &exif) && exif) *orientation = exif_orientation({exif, exif_len});
    }
  }
  png_destroy_read_struct(&png, &info, nullptr);
  check_dimensions(what, w, h, limits);
  if (channels != 3 && channels != 4) fail(what, ": PNG with ", channels, " channels after expansion is unsupported");
  if (channels == 4) return rgb_from_rgba(pixels.data(), w, h);
  RgbImage img;
  img.width = w, img.height = h;
  img.rgb = std::move(pixels);
  return img;
}

}  // namespace gannet::vision
