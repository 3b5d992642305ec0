// JPEG through libjpeg(-turbo): baseline and progressive, grey or YCbCr to RGB; EXIF from
// APP1. A warning (corrupt data, a truncated file filled with grey) is an error here.
#include <cstdio>
#include <jpeglib.h>

#include <csetjmp>
#include <cstring>

#include "core/error.h"
#include "vision/image_decoders.h"

namespace gannet::vision {

namespace {

struct JpegErrors {
  jpeg_error_mgr mgr;
  std::jmp_buf jump;
  char message[JMSG_LENGTH_MAX];
};

void jpeg_on_error(j_common_ptr cinfo) {
  auto* e = reinterpret_cast<JpegErrors*>(cinfo->err);
  (*cinfo->err->format_message)(cinfo, e->message);
  std::longjmp(e->jump, 1);
}

void jpeg_on_message(j_common_ptr cinfo, int level) {
  if (level < 0) jpeg_on_error(cinfo);  // a warning: the data is damaged
}

}  // namespace

RgbImage decode_jpeg(std::span<const uint8_t> bytes, const std::string& what, const DecodeLimits& limits,
                     int* orientation) {
  jpeg_decompress_struct cinfo;
  JpegErrors err;
  std::memset(err.message, 0, sizeof(err.message));
  cinfo.err = jpeg_std_error(&err.mgr);
  err.mgr.error_exit = jpeg_on_error;
  err.mgr.emit_message = jpeg_on_message;
  std::vector<uint8_t> pixels;
  int w = 0, h = 0;
  bool too_big = false, cmyk = false;
  if (setjmp(err.jump)) {
    jpeg_destroy_decompress(&cinfo);
    fail(what, ": corrupt JPEG (", err.message, ")");
  }
  jpeg_create_decompress(&cinfo);
  jpeg_mem_src(&cinfo, bytes.data(), static_cast<unsigned long>(bytes.size()));
  jpeg_save_markers(&cinfo, JPEG_APP0 + 1, 0xFFFF);
  jpeg_read_header(&cinfo, TRUE);
  w = int(cinfo.image_width), h = int(cinfo.image_height);
  too_big = int64_t(w) * int64_t(h) > limits.max_pixels || w <= 0 || h <= 0;
  cmyk = cinfo.jpeg_color_space == JCS_CMYK || cinfo.jpeg_color_space == JCS_YCCK;
  if (!too_big && !cmyk) {
    for (jpeg_saved_marker_ptr m = cinfo.marker_list; m; m = m->next)
      if (m->marker == JPEG_APP0 + 1 && m->data_length >= 6 && std::memcmp(m->data, "Exif\0\0", 6) == 0)
        *orientation = exif_orientation({m->data, m->data_length});
    cinfo.out_color_space = JCS_RGB;
    jpeg_start_decompress(&cinfo);
    pixels.resize(size_t(w) * size_t(h) * 3);
    while (cinfo.output_scanline < cinfo.output_height) {
      JSAMPROW row = pixels.data() + size_t(cinfo.output_scanline) * size_t(w) * 3;
      jpeg_read_scanlines(&cinfo, &row, 1);
    }
    jpeg_finish_decompress(&cinfo);
  }
  jpeg_destroy_decompress(&cinfo);
  check_dimensions(what, w, h, limits);
  if (cmyk) fail(what, ": CMYK JPEG images are unsupported (convert to RGB)");
  RgbImage img;
  img.width = w, img.height = h;
  img.rgb = std::move(pixels);
  return img;
}

}  // namespace gannet::vision
