#include "gannet/llm.h"

#include <chrono>

#include "core/error.h"
#include "core/progress_bar.h"
#include "engine/engine.h"

namespace gannet {

LLM::LLM(const EngineArgs& args) : engine_(std::make_unique<engine::Engine>(args)) {}
LLM::~LLM() = default;

namespace {

template <typename Prompt>
std::vector<RequestOutput> run_all(engine::Engine& eng, const std::vector<Prompt>& prompts,
                                   const std::vector<SamplingParams>& params, const std::string& prefix) {
  if (params.size() != prompts.size() && params.size() != 1)
    fail("generate: ", params.size(), " SamplingParams for ", prompts.size(), " prompts");
  // Validate everything before queueing anything, so a bad prompt leaves no work behind.
  for (size_t i = 0; i < prompts.size(); ++i) params[params.size() == 1 ? 0 : i].validate();
  std::vector<RequestOutput> outs(prompts.size());
  for (size_t i = 0; i < prompts.size(); ++i) {
    try {
      eng.add_request(prefix + std::to_string(i), prompts[i], params[params.size() == 1 ? 0 : i]);
    } catch (...) {
      for (size_t j = 0; j < i; ++j) eng.abort(prefix + std::to_string(j));
      throw;
    }
  }
  // Whatever goes wrong below, no request of this call stays queued in the engine.
  struct AbortLeftovers {
    engine::Engine& eng;
    const std::string& prefix;
    size_t n;
    ~AbortLeftovers() {
      for (size_t i = 0; i < n; ++i) eng.abort(prefix + std::to_string(i));
    }
  } guard{eng, prefix, prompts.size()};
  eng.set_streaming(false);  // only finished requests are collected
  ProgressBar bar(eng.args().quiet ? "" : "generating");
  const auto t0 = std::chrono::steady_clock::now();
  size_t done = 0;
  uint64_t tokens = 0;
  while (eng.has_unfinished()) {
    for (RequestOutput& o : eng.step()) {
      if (!o.finished) continue;
      if (o.request_id.compare(0, prefix.size(), prefix) != 0) continue;  // not ours
      const size_t idx = std::stoul(o.request_id.substr(prefix.size()));
      for (auto& c : o.outputs) tokens += c.token_ids.size();
      outs[idx] = std::move(o);
      outs[idx].request_id = std::to_string(idx);
      ++done;
    }
    const double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    char extra[64];
    std::snprintf(extra, sizeof extra, "requests, %.1f tok/s", secs > 0 ? double(tokens) / secs : 0.0);
    if (!eng.args().quiet) bar.update(done, prompts.size(), extra);
  }
  return outs;
}

}  // namespace

std::vector<RequestOutput> LLM::generate(const std::vector<std::string>& prompts, const SamplingParams& params) {
  return run_all(*engine_, prompts, std::vector<SamplingParams>{params}, "llm" + std::to_string(next_call_++) + "-");
}

std::vector<RequestOutput> LLM::generate(const std::vector<std::string>& prompts,
                                         const std::vector<SamplingParams>& params) {
  return run_all(*engine_, prompts, params, "llm" + std::to_string(next_call_++) + "-");
}

std::vector<RequestOutput> LLM::generate(const std::vector<std::vector<int32_t>>& prompt_token_ids,
                                         const std::vector<SamplingParams>& params) {
  return run_all(*engine_, prompt_token_ids, params, "llm" + std::to_string(next_call_++) + "-");
}

}  // namespace gannet
