// Fuzz target: the safetensors header parser must reject bad input with gannet::Error,
// never crash, read out of bounds or hang.
#include <cstdint>
#include <cstddef>

#include "core/error.h"
#include "io/safetensors.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  try {
    uint64_t start = 0;
    auto tensors = gannet::io::parse_safetensors_header(data, size, size, "fuzz.safetensors", &start);
    // Accepted headers must describe tensors inside the input.
    for (auto& t : tensors)
      if (start + t.end > size) __builtin_trap();
  } catch (const gannet::Error&) {
  }
  return 0;
}
