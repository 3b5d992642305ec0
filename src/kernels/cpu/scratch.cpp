#include "kernels/cpu/scratch.h"

#include <vector>

namespace gannet::kernels {

float* thread_scratch(ScratchSlot slot, size_t n) {
  thread_local std::vector<float> bufs[size_t(ScratchSlot::kCount)];
  std::vector<float>& b = bufs[size_t(slot)];
  if (b.size() < n) b.resize(n);
  return b.data();
}

}  // namespace gannet::kernels
