// WebP (lossy and lossless) through libwebp; EXIF through its demuxer. Animations are
// refused: a prompt image is one picture.
#include <webp/decode.h>
#include <webp/demux.h>

#include <memory>

#include "core/error.h"
#include "vision/image_decoders.h"

namespace gannet::vision {

RgbImage decode_webp(std::span<const uint8_t> bytes, const std::string& what, const DecodeLimits& limits,
                     int* orientation) {
  WebPBitstreamFeatures f;
  const VP8StatusCode st = WebPGetFeatures(bytes.data(), bytes.size(), &f);
  if (st == VP8_STATUS_NOT_ENOUGH_DATA) fail(what, ": corrupt WebP (the file ends early, truncated)");
  if (st != VP8_STATUS_OK) fail(what, ": corrupt WebP (bad header, status ", int(st), ")");
  check_dimensions(what, f.width, f.height, limits);
  if (f.has_animation) fail(what, ": animated WebP images are unsupported (one picture per image)");
  const WebPData data{bytes.data(), bytes.size()};
  if (WebPDemuxer* demux = WebPDemux(&data)) {
    WebPChunkIterator it;
    if (WebPDemuxGetChunk(demux, "EXIF", 1, &it)) {
      *orientation = exif_orientation({it.chunk.bytes, it.chunk.size});
      WebPDemuxReleaseChunkIterator(&it);
    }
    WebPDemuxDelete(demux);
  }
  int w = 0, h = 0;
  std::unique_ptr<uint8_t, void (*)(void*)> rgba(WebPDecodeRGBA(bytes.data(), bytes.size(), &w, &h), WebPFree);
  if (!rgba) fail(what, ": corrupt WebP (the image data does not decode)");
  if (w != f.width || h != f.height) fail(what, ": corrupt WebP (size changed while decoding)");
  return rgb_from_rgba(rgba.get(), w, h);
}

}  // namespace gannet::vision
