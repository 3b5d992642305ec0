#include "kernels/cpu/scratch.h"

#include <cstdint>
#include <vector>

namespace gannet::kernels {

float* thread_scratch(ScratchSlot slot, size_t n) {
  thread_local std::vector<float> bufs[size_t(ScratchSlot::kCount)];
  std::vector<float>& b = bufs[size_t(slot)];
  if (b.size() < n + 15) b.resize(n + 15);
  // On a 64-byte boundary: malloc gives 16, and a vector load from a buffer 16 bytes off
  // a line spans two lines (Intel then takes two of its load slots).
  float* const p = b.data();
  return p + ((64 - reinterpret_cast<uintptr_t>(p) % 64) % 64) / 4;
}

}  // namespace gannet::kernels
