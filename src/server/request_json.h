// JSON <-> requests and outputs for the command line (prompts files, --json output).
#pragma once

#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "gannet/request_output.h"
#include "gannet/sampling_params.h"

namespace gannet::server {

struct PromptLine {
  std::string prompt;
  std::vector<int32_t> prompt_token_ids;  // instead of prompt (tokenizer-less checkpoints)
  bool has_ids = false;
  std::vector<std::string> images;  // image files, one placeholder each in the prompt (vision models)
  SamplingParams params;
};

// One prompts-file line: {"prompt": ..., <SamplingParams fields>}, or
// {"prompt_token_ids": [ids], ...} instead of "prompt", and "images": [PATH, ...] for a
// vision model (one image placeholder per image in the prompt). Throws gannet::Error
// naming the field for bad JSON, unknown fields, wrong types and invalid values.
PromptLine parse_prompt_line(const std::string& line, const SamplingParams& defaults);

// {"prompt", "text", "token_ids", "finish_reason", "stop_reason", "seed", ["logprobs"],
//  ["cumulative_logprob"], ["prompt_logprobs"], ["outputs" when n > 1]}
nlohmann::json output_to_json(const RequestOutput& out, const SamplingParams& params);

// dump() that replaces invalid UTF-8 instead of throwing.
std::string dump_line(const nlohmann::json& j);

}  // namespace gannet::server
