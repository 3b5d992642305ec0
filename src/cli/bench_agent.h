// `gannet bench agent`: coding-agent conversations replayed through the OpenAI server's
// code path (an in-process server on a loopback port, driven over HTTP as a client
// would). Each of N conversations runs T turns: the prompt is the conversation so far
// (a shared system prompt, the tools, the task), the model answers with a tool call
// (tool_choice "required", so random weights still call), the call is sent back as the
// assistant's message with a tool result, and the chat encoder renders the next prompt
// from those messages. Per turn: prefix-cache hit rate, positions recomputed and time to
// first token, which show whether the conversation's history stays cached.
#pragma once

#include <cstdint>

#include "bench/report.h"
#include "gannet/engine_args.h"

namespace gannet::cli {

struct AgentBenchOptions {
  EngineArgs engine;                 // the server's engine (model, threads, cache flags)
  int64_t conversations = 4;         // run concurrently
  int64_t turns = 8;
  int64_t system_words = 3000;       // the shared system prompt, in words (~1.3 tokens each)
  int64_t task_words = 40;           // each conversation's first user message
  int64_t tool_result_words = 150;   // each tool result
  int64_t max_tokens = 160;          // per answer
  bool thinking = false;             // DeepSeek thinking mode (reasoning sent back in the loop)
  bool quiet_progress = false;
};

bench::Report run_agent_bench(const AgentBenchOptions& o, const bench::Roofline& roofline);

}  // namespace gannet::cli
