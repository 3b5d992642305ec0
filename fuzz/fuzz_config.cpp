// Fuzz target: config.json parsing rejects bad input with gannet::Error, never crashes.
#include <cstdint>
#include <cstddef>
#include <string>

#include "core/error.h"
#include "io/model_config.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  try {
    auto cfg = gannet::io::parse_model_config(std::string(reinterpret_cast<const char*>(data), size), "config.json");
    if (cfg.head_dim <= 0 || cfg.num_key_value_heads <= 0) __builtin_trap();
  } catch (const gannet::Error&) {
  }
  return 0;
}
