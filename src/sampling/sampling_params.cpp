#include "gannet/sampling_params.h"

#include <cmath>

#include "core/error.h"

namespace gannet {

void SamplingParams::validate() const {
  if (max_tokens < 1) fail("max_tokens must be >= 1, got ", max_tokens);
  if (!(temperature >= 0) || !std::isfinite(temperature)) fail("temperature must be >= 0, got ", temperature);
  if (!(top_p > 0 && top_p <= 1)) fail("top_p must be in (0, 1], got ", top_p);
  if (top_k < -1) fail("top_k must be -1, 0 (off) or positive, got ", top_k);
}

}  // namespace gannet
