// gannet bench vision: the time to encode one image (ViT + aligner + span) of a vision
// checkpoint, against the FLOPs it needs and the machine's arithmetic peak.
#pragma once

#include <string>

#include "bench/report.h"

namespace gannet::bench {

struct VisionBenchOptions {
  std::string model;
  int threads = 1;
  int image_w = 544, image_h = 544;
  int repeats = 3;
};

Report run_vision_bench(const VisionBenchOptions& o, const Roofline& roofline);

}  // namespace gannet::bench
