// The step-time profile confidence-scheduled verification (--speculative-verify varlen)
// chooses by: seconds one forward step takes against the number of tokens it computes
// (all of them with logits, as a verify step's), measured once at start-up on the engine's
// own model, cache and threads, and cached on disk like the roofline (keyed by the model
// directory, its weight bytes, the threads and the kernel path).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "cache/cache_engine.h"
#include "core/thread_pool.h"
#include "model/model.h"

namespace gannet::engine {

// seconds[b - 1] for b = 1 .. max_tokens: medians of timed forwards at a geometric set of
// sizes, linear in between. Uses state slot 0 and the first blocks of the cache, so it
// must run before any request does.
std::vector<double> measure_step_profile(model::Model& model, cache::CacheEngine& cache, ThreadPool* pool,
                                         int64_t max_tokens);

// The cached profile for `key` with at least max_tokens entries, or a fresh measurement
// (then cached). GANNET_STEP_PROFILE_CACHE names the file ("off": never cache); by default
// $XDG_CACHE_HOME/gannet/step_profile.json or ~/.cache/gannet/step_profile.json.
std::vector<double> step_profile(const std::string& key, model::Model& model, cache::CacheEngine& cache,
                                 ThreadPool* pool, int64_t max_tokens);

}  // namespace gannet::engine
