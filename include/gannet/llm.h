// Offline batch generation: all prompts run as one continuous batch; outputs come back in
// input order.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "gannet/engine_args.h"
#include "gannet/request_output.h"
#include "gannet/sampling_params.h"

namespace gannet {

namespace engine {
class Engine;
}

class LLM {
 public:
  explicit LLM(const EngineArgs& args);
  ~LLM();

  std::vector<RequestOutput> generate(const std::vector<std::string>& prompts, const SamplingParams& params);
  // One SamplingParams per prompt.
  std::vector<RequestOutput> generate(const std::vector<std::string>& prompts,
                                      const std::vector<SamplingParams>& params);
  std::vector<RequestOutput> generate(const std::vector<std::vector<int32_t>>& prompt_token_ids,
                                      const std::vector<SamplingParams>& params);

  engine::Engine& engine() { return *engine_; }

 private:
  std::unique_ptr<engine::Engine> engine_;
  uint64_t next_call_ = 0;  // request ids of call k are "llm<k>-<index>"
};

}  // namespace gannet
