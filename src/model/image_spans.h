// The images of one prompt, for a vision model: each occupies a run of positions whose
// embedding rows come from the image (its span), not from the token ids there.
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

namespace gannet::model {

struct ImageSpan {
  int64_t start = 0, length = 0;  // positions [start, start + length) of the prompt
  int64_t grid_h = 0, grid_w = 0;  // the image's patch grid
  // Filled by the engine when the request is added; the executor encodes them at the first
  // step that computes a position of the span (then frees them), into `rows`.
  std::vector<float> pixels;  // [grid_h * grid_w, 3 * patch^2]
  std::vector<float> rows;    // [length, hidden] once encoded
  uint64_t hash_lo = 0, hash_hi = 0;  // the image's content (its pixels and grid)
};

// In position order, not overlapping. Shared by a request's samples and every re-add of its
// rows after preemption, so each image is encoded once per request.
using ImageSpans = std::vector<ImageSpan>;

}  // namespace gannet::model
