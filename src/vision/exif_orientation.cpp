// EXIF orientation: a TIFF header, IFD0, tag 0x0112. Only this one tag is read.
#include <algorithm>

#include "vision/image.h"

namespace gannet::vision {

int exif_orientation(std::span<const uint8_t> e) {
  if (e.size() >= 6 && std::equal(e.begin(), e.begin() + 6, reinterpret_cast<const uint8_t*>("Exif\0\0")))
    e = e.subspan(6);
  if (e.size() < 8) return 1;
  const bool le = e[0] == 'I' && e[1] == 'I';
  if (!le && !(e[0] == 'M' && e[1] == 'M')) return 1;
  auto u16 = [&](size_t at) -> uint32_t {
    return le ? uint32_t(e[at]) | uint32_t(e[at + 1]) << 8 : uint32_t(e[at]) << 8 | uint32_t(e[at + 1]);
  };
  auto u32 = [&](size_t at) -> uint32_t {
    return le ? u16(at) | u16(at + 2) << 16 : u16(at) << 16 | u16(at + 2);
  };
  if (u16(2) != 42) return 1;
  const size_t ifd = u32(4);
  if (ifd + 2 > e.size()) return 1;
  const size_t n = u16(ifd);
  for (size_t i = 0; i < n; ++i) {
    const size_t entry = ifd + 2 + 12 * i;
    if (entry + 12 > e.size()) return 1;
    if (u16(entry) != 0x0112) continue;
    const uint32_t v = u16(entry + 8);  // SHORT, left-justified in the value field
    return v >= 1 && v <= 8 ? int(v) : 1;
  }
  return 1;
}

RgbImage apply_orientation(RgbImage img, int o) {
  if (o <= 1 || o > 8) return img;
  const bool swap = o >= 5;  // 5-8 transpose the axes
  RgbImage out;
  out.width = swap ? img.height : img.width;
  out.height = swap ? img.width : img.height;
  out.rgb.resize(img.rgb.size());
  const int W = img.width, H = img.height;
  for (int y = 0; y < out.height; ++y)
    for (int x = 0; x < out.width; ++x) {
      int sx = 0, sy = 0;  // the source pixel shown at (x, y)
      switch (o) {
        case 2: sx = W - 1 - x, sy = y; break;              // mirrored
        case 3: sx = W - 1 - x, sy = H - 1 - y; break;      // rotated 180
        case 4: sx = x, sy = H - 1 - y; break;              // flipped
        case 5: sx = y, sy = x; break;                      // transposed
        case 6: sx = y, sy = H - 1 - x; break;              // rotated 90 clockwise to view
        case 7: sx = W - 1 - y, sy = H - 1 - x; break;      // transverse
        case 8: sx = W - 1 - y, sy = x; break;              // rotated 90 counter-clockwise to view
      }
      for (int c = 0; c < 3; ++c)
        out.rgb[(size_t(y) * size_t(out.width) + size_t(x)) * 3 + size_t(c)] = img.at(sy, sx, c);
    }
  return out;
}

}  // namespace gannet::vision
