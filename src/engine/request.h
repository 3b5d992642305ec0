// A request as the engine holds it: its prompt, parameters, samples and metrics.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "engine/sequence.h"
#include "gannet/request_output.h"
#include "gannet/sampling_params.h"
#include "model/image_spans.h"
#include "structured/matcher.h"

namespace gannet::engine {

struct Request {
  std::string id;
  std::string prompt;  // text, when given as text
  std::vector<int32_t> prompt_ids;
  SamplingParams params;
  uint64_t seed = 0;
  // Structured output: the compiled grammar (set before the scheduler sees the request).
  std::shared_ptr<structured::Automaton> grammar;
  // Image input (vision models): the prompt's image spans, or null.
  std::shared_ptr<model::ImageSpans> images;
  std::vector<std::unique_ptr<Sequence>> seqs;  // [n] once forked, [1] before
  std::vector<std::optional<PositionLogprobs>> prompt_logprobs;  // [prompt_len] when asked
  RequestMetrics metrics;
  bool output_sent = false;  // a streamed output has carried the prompt fields
  uint64_t progress_mark = 0;  // the last step in which it progressed (engine bookkeeping)

  bool finished() const {
    if (int64_t(seqs.size()) < params.n) return false;
    for (auto& s : seqs)
      if (!s->finished()) return false;
    return true;
  }
};

}  // namespace gannet::engine
