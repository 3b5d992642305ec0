// DeepSeek-V4.1's vision path (deepseek-v41-vision.md §3-5): the ViT (patch embedding,
// 2D-RoPE bidirectional attention, SwiGLU, RMSNorm eps 1e-6), the 3x3 aligner into the
// text width, and the span an image occupies in the text stream: START, each aligner row
// followed by NEWLINE, END. Weights as released (vision.*, aligner.*, image_start /
// image_end / image_newline; BF16, no FP8 scales).
//
// An image is encoded alone: its rows depend on its own pixels only, never on other images
// or requests (each product is one canonical dot per output element, kernels/cpu).
#pragma once

#include <cstdint>
#include <vector>

#include "io/checkpoint.h"
#include "io/deepseek_v41_config.h"
#include "kernels/cpu/packed_weight.h"
#include "vision/image_processor.h"

namespace gannet {
class ThreadPool;
}

namespace gannet::model::deepseek_v41 {

struct VisionBlockWeights {
  std::vector<float> norm1, norm2;          // [C]
  kernels::PackedWeight wqkv;               // [3C, C]: q rows, k rows, v rows
  std::vector<float> bqkv;                  // [3C]
  kernels::PackedWeight wo;                 // [C, C]
  std::vector<float> bo;                    // [C]
  kernels::PackedWeight w1;                 // [2I, C]: gate rows, then up rows
  kernels::PackedWeight w2;                 // [C, I]
};

struct VisionWeights {
  kernels::PackedWeight patch_embed;        // [C, 3 p^2]
  std::vector<float> patch_bias;            // [C]
  std::vector<VisionBlockWeights> blocks;
  std::vector<float> norm;                  // [C]
  kernels::PackedWeight aligner_w1;         // [D, r^2 C]
  std::vector<float> aligner_b1;            // [D]
  kernels::PackedWeight aligner_w2;         // [D, D]
  std::vector<float> aligner_b2;            // [D]
  std::vector<float> start, end, newline;   // [D]
};

// The vision tensors' names, dtypes (BF16) and shapes, for the checkpoint check and sizes.
struct VisionTensor {
  std::string name;
  std::vector<int64_t> shape;
};
std::vector<VisionTensor> vision_tensors(const io::DeepseekV41Config& cfg);

VisionWeights load_vision_weights(const io::DeepseekV41Config& cfg, const io::Checkpoint& ckpt);

// The image processor a checkpoint asks for: its vision_config's patch, window, pixel and
// token budget, then dir/preprocessor_config.json when present (each key honoured or refused).
vision::ImageProcessorConfig image_processor_config(const io::DeepseekV41Config& cfg, const std::string& dir);

// Multiply-adds to encode one image of this patch grid (ViT, attention products, aligner;
// FLOPs = 2x), from the config alone.
double vision_macs(const io::DeepseekV41Config& cfg, int64_t grid_h, int64_t grid_w);

class VisionEncoder {
 public:
  VisionEncoder(const io::DeepseekV41Config& cfg, const VisionWeights& w) : c_(cfg), w_(w) {}

  // Rows of an image's span: Hh * (Ww + 1) + 2 with Hh = ceil(grid_h / r), Ww = ceil(grid_w / r).
  int64_t span_tokens(int64_t grid_h, int64_t grid_w) const;
  // pixels [grid_h * grid_w, 3 p^2] (row-major patches) -> the ViT's output after its final
  // norm [grid_h * grid_w, C].
  std::vector<float> vit(const float* pixels, int64_t grid_h, int64_t grid_w, ThreadPool* pool) const;
  // ViT output -> the aligner's rows [Hh * Ww, D] (reading order).
  std::vector<float> align(const float* features, int64_t grid_h, int64_t grid_w, ThreadPool* pool) const;
  // The whole path: pixels -> the span's embedding rows [span_tokens, D].
  std::vector<float> encode(const float* pixels, int64_t grid_h, int64_t grid_w, ThreadPool* pool) const;
  // Multiply-adds of encode() for one image (FLOPs = 2x): the benchmark's yardstick.
  double macs(int64_t grid_h, int64_t grid_w) const { return vision_macs(c_, grid_h, grid_w); }

 private:
  const io::DeepseekV41Config& c_;
  const VisionWeights& w_;
};

}  // namespace gannet::model::deepseek_v41
