// preprocessor_config.json of a DeepSeek-V4.1 checkpoint (DeepseekV41ImageProcessor):
// every key is honoured or refused by name. `base` carries the vision_config's values
// (patch size, downsample ratio, pixel and token budget), which the file may restate
// ("size": {"shortest_edge": min_pixels, "longest_edge": max_image_tokens}).
#pragma once

#include <nlohmann/json_fwd.hpp>
#include <string>

#include "vision/image_processor.h"

namespace gannet::vision {

ImageProcessorConfig parse_preprocessor_config(const nlohmann::json& j, const std::string& file,
                                               ImageProcessorConfig base);

// Reads dir/preprocessor_config.json when it exists (else returns base).
ImageProcessorConfig load_preprocessor_config(const std::string& dir, ImageProcessorConfig base);

}  // namespace gannet::vision
