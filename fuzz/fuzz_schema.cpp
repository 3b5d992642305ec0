// Fuzz target: JSON Schema compilation rejects bad or unsupported schemas with
// gannet::Error, never crashes, and a schema that compiles gives a checked grammar.
#include <cstddef>
#include <cstdint>
#include <string>

#include "core/error.h"
#include "structured/json_schema.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  try {
    const auto g = gannet::structured::compile_json_schema(std::string(reinterpret_cast<const char*>(data), size));
    if (g.root() < 0) __builtin_trap();
  } catch (const gannet::Error&) {
  }
  return 0;
}
