// data: URLs of images (RFC 2397 with base64, RFC 4648 section 4 alphabet).
#include "core/error.h"
#include "vision/image.h"

namespace gannet::vision {

namespace {

int base64_value(unsigned char c) {
  if (c >= 'A' && c <= 'Z') return c - 'A';
  if (c >= 'a' && c <= 'z') return c - 'a' + 26;
  if (c >= '0' && c <= '9') return c - '0' + 52;
  if (c == '+' || c == '-') return 62;  // '-' and '_': the URL-safe alphabet, as clients send it too
  if (c == '/' || c == '_') return 63;
  return -1;
}

}  // namespace

RgbImage decode_data_url(const std::string& url, const std::string& what, const DecodeLimits& limits) {
  if (url.rfind("data:", 0) != 0) {
    const size_t colon = url.find(':');
    const std::string scheme = colon != std::string::npos && colon < 16 ? url.substr(0, colon) : "";
    fail(what, ": only data: URLs are taken (base64 PNG, JPEG or WebP); ",
         scheme.empty() ? std::string("this is not a URL") : "'" + scheme + ":' URLs are refused", " (gannet fetches nothing)");
  }
  const size_t comma = url.find(',');
  if (comma == std::string::npos) fail(what, ": a data: URL needs a ',' before its data");
  const std::string head = url.substr(5, comma - 5);
  if (head.size() < 7 || head.compare(head.size() - 7, 7, ";base64") != 0)
    fail(what, ": the data: URL must be base64 (data:image/...;base64,...)");
  const std::string media = head.substr(0, head.find(';'));
  if (!media.empty() && media.rfind("image/", 0) != 0) fail(what, ": the data: URL's media type '", media, "' is not an image");
  std::vector<uint8_t> bytes;
  bytes.reserve((url.size() - comma) / 4 * 3);
  uint32_t acc = 0;
  int bits = 0;
  size_t pad = 0;
  for (size_t i = comma + 1; i < url.size(); ++i) {
    const unsigned char c = static_cast<unsigned char>(url[i]);
    if (c == '=') {
      ++pad;
      continue;
    }
    if (c == ' ' || c == '\n' || c == '\r' || c == '\t') continue;
    const int v = base64_value(c);
    if (v < 0 || pad) fail(what, ": the data: URL's base64 has an invalid character at offset ", i - comma - 1);
    acc = (acc << 6) | uint32_t(v);
    bits += 6;
    if (bits >= 8) {
      bits -= 8;
      bytes.push_back(uint8_t(acc >> bits));
    }
    if (bytes.size() > limits.max_bytes) fail(what, ": the image is more than ", limits.max_bytes, " bytes");
  }
  if (pad > 2 || bits >= 6) fail(what, ": the data: URL's base64 is truncated");
  return decode_image(bytes, what, limits);
}

}  // namespace gannet::vision
