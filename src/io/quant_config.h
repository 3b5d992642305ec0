// config.json's `quantization_config`: which stored weight formats a checkpoint declares.
// Two schemes are read, every field checked; anything else is refused naming the field:
//   quant_method "fp8" (transformers' fine-grained FP8: DeepSeek-V3, Qwen3-FP8):
//     E4M3 weights with f32 `weight_scale_inv` per weight_block_size tile (square);
//     activation_scheme "dynamic" only; fmt "e4m3" only. The products use the dequantized
//     weights with float activations, as transformers computes on a CPU.
//   quant_method "compressed-tensors", format "int-quantized", one group of Linear targets
//     with 8-bit symmetric int weights, strategy "channel" (one scale per output row),
//     no activation quantization.
#pragma once

#include <cstdint>
#include <nlohmann/json_fwd.hpp>
#include <string>

namespace gannet::io {

struct WeightQuantization {
  enum class Method { kNone, kFp8Block, kInt8Row };
  Method method = Method::kNone;
  int64_t block = 0;  // kFp8Block: weight_block_size
  // kFp8Block: scale_fmt "ue8m0": the GPU kernel rounds activation scales up to powers of
  // two (used by the exact activation mode only).
  bool pow2_activation_scales = false;
};

// The --quantize / GANNET_QUANTIZE value: "" or "none", "fp8", "int8"; throws naming the flag.
WeightQuantization::Method parse_quantize_flag(const std::string& value);

const char* quant_method_name(WeightQuantization::Method m);

// q: the value of quantization_config (null = none); file names the source in messages.
WeightQuantization parse_quantization_config(const nlohmann::json& q, const std::string& file);

}  // namespace gannet::io
