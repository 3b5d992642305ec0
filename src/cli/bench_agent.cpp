#include "cli/bench_agent.h"

#include <httplib.h>

#include <atomic>
#include <chrono>
#include <cstdlib>
#include <map>
#include <mutex>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "core/error.h"
#include "core/progress_bar.h"
#include "server/http_server.h"

namespace gannet::cli {

using nlohmann::json;
using nlohmann::ordered_json;

namespace {

// Words for synthetic prose: a system prompt, tasks and tool results that tokenize like
// English (about 1.3 tokens a word with DeepSeek's tokenizer).
const char* const kWords[] = {
    "the",      "build",   "test",     "function", "returns",  "value",    "when",     "file",     "error",
    "module",   "should",  "check",    "before",   "after",    "change",   "code",     "review",   "line",
    "compile",  "config",  "path",     "output",   "input",    "request",  "response", "server",   "client",
    "memory",   "cache",   "thread",   "lock",     "queue",    "update",   "write",    "read",     "commit",
    "branch",   "merge",   "diff",     "patch",    "version",  "package",  "install",  "remove",   "rename",
    "class",    "method",  "field",    "type",     "string",   "number",   "list",     "map",      "index",
    "loop",     "call",    "result",   "status",   "failed",   "passed",   "warning",  "debug",    "trace",
    "stack",    "frame",   "pointer",  "buffer",   "size",     "length",   "offset",   "token",    "parse",
    "format",   "schema",  "field",    "optional", "required", "default",  "option",   "flag",     "command",
    "shell",    "script",  "directory", "project", "repository", "user",   "agent",    "tool",     "answer",
    "always",   "never",   "only",     "each",     "every",    "first",    "last",     "next",     "previous",
    "careful",  "exact",   "small",    "large",    "fast",     "slow",     "safe",     "clear",    "short",
};
constexpr size_t kNumWords = sizeof(kWords) / sizeof(kWords[0]);

std::string prose(int64_t words, uint64_t seed) {
  std::string s;
  uint64_t x = 0x9e3779b97f4a7c15ull * (seed + 1) | 1;
  for (int64_t i = 0; i < words; ++i) {
    x ^= x << 13, x ^= x >> 7, x ^= x << 17;
    if (i) s += (i % 14 == 13) ? ".\n" : " ";
    s += kWords[x % kNumWords];
  }
  return s + ".";
}

// The agent's tools: arguments from short enums, so that even random weights finish a
// call in a few dozen tokens.
json agent_tools() {
  auto fn = [](const char* name, const char* desc, const char* param, std::vector<std::string> values) {
    return json{{"type", "function"},
                {"function",
                 {{"name", name},
                  {"description", desc},
                  {"parameters",
                   {{"type", "object"},
                    {"properties", {{param, {{"type", "string"}, {"enum", values}}}}},
                    {"required", {param}}}}}}};
  };
  return json::array({fn("read_file", "Read a file of the repository.", "path",
                         {"README.md", "src/main.cpp", "src/server.cpp", "tests/test_main.py", "Makefile"}),
                      fn("run_command", "Run a shell command in the repository.", "command",
                         {"make test", "git status", "git diff", "ls src"})});
}

// One turn as the client saw it.
struct TurnResult {
  int64_t prompt_tokens = 0, cached_tokens = 0, completion_tokens = 0;
  double ttft = 0, latency = 0;  // seconds from sending the request
  bool tool_call = false;  // the answer held a call (its name at least)
  bool whole_call = false;  // ... with arguments that parse as a non-empty JSON object
};

struct StreamedAnswer {
  std::string content, reasoning;
  json calls = json::array();  // [{id, type, function: {name, arguments}}]
  json usage;
  double first_token = -1;
};

// Reads one chat.completion.chunk into the answer being assembled.
void absorb(const json& chunk, StreamedAnswer& a, double now) {
  if (chunk.contains("error")) throw Error("the server answered with an error: " + chunk["error"].dump());
  if (chunk.contains("usage") && !chunk["usage"].is_null()) a.usage = chunk["usage"];
  if (!chunk.contains("choices")) return;
  for (const json& c : chunk["choices"]) {
    const json& d = c["delta"];
    const bool token = (c.contains("logprobs") && c["logprobs"].is_object() && !c["logprobs"]["content"].empty()) ||
                       d.contains("reasoning_content") || d.contains("tool_calls") ||
                       (d.contains("content") && d["content"].is_string() && !d["content"].get<std::string>().empty());
    if (token && a.first_token < 0) a.first_token = now;
    if (d.contains("content") && d["content"].is_string()) a.content += d["content"].get<std::string>();
    if (d.contains("reasoning_content") && d["reasoning_content"].is_string())
      a.reasoning += d["reasoning_content"].get<std::string>();
    if (d.contains("tool_calls"))
      for (const json& t : d["tool_calls"]) {
        const size_t i = t["index"].get<size_t>();
        while (a.calls.size() <= i)
          a.calls.push_back({{"id", ""}, {"type", "function"}, {"function", {{"name", ""}, {"arguments", ""}}}});
        json& call = a.calls[i];
        if (t.contains("id")) call["id"] = t["id"];
        if (t.contains("function")) {
          const json& f = t["function"];
          if (f.contains("name")) call["function"]["name"] = f["name"];
          if (f.contains("arguments"))
            call["function"]["arguments"] = call["function"]["arguments"].get<std::string>() + f["arguments"].get<std::string>();
        }
      }
  }
}

// Runs one conversation over its own connection; results[turn] filled in order.
void converse(int port, const std::string& model, const AgentBenchOptions& o, int64_t conv, const std::string& system,
              std::vector<TurnResult>& results, std::atomic<int64_t>& done) {
  httplib::Client cli("127.0.0.1", port);
  cli.set_read_timeout(3600, 0);
  cli.set_write_timeout(600, 0);
  json messages = json::array({{{"role", "system"}, {"content", system}},
                               {{"role", "user"}, {"content", "Task " + std::to_string(conv) + ": " +
                                                                  prose(o.task_words, 1000 + uint64_t(conv))}}});
  const json tools = agent_tools();
  for (int64_t turn = 0; turn < o.turns; ++turn) {
    json body = {{"model", model},       {"messages", messages},  {"tools", tools},
                 {"tool_choice", "required"}, {"parallel_tool_calls", false}, {"max_tokens", o.max_tokens},
                 {"temperature", 0},     {"stream", true},        {"stream_options", {{"include_usage", true}}},
                 {"logprobs", true}};
    if (o.thinking) body["chat_template_kwargs"] = {{"thinking", true}};
    StreamedAnswer a;
    std::string pending, failure;
    int status = 0;
    const auto t0 = std::chrono::steady_clock::now();
    auto since = [&] { return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count(); };
    httplib::Request req;
    req.method = "POST";
    req.path = "/v1/chat/completions";
    req.body = body.dump();
    req.set_header("Content-Type", "application/json");
    req.response_handler = [&](const httplib::Response& r) {
      status = r.status;
      return true;
    };
    req.content_receiver = [&](const char* data, size_t len, uint64_t, uint64_t) {
      pending.append(data, len);
      if (status != 200) return true;  // the error body is read whole below
      for (size_t end; (end = pending.find("\n\n")) != std::string::npos;) {
        const std::string event = pending.substr(0, end);
        pending.erase(0, end + 2);
        if (event.rfind("data: ", 0) != 0) continue;
        const std::string payload = event.substr(6);
        if (payload == "[DONE]") continue;
        try {
          absorb(json::parse(payload), a, since());
        } catch (const std::exception& e) {
          failure = e.what();
          return false;
        }
      }
      return true;
    };
    const httplib::Result r = cli.send(req);
    if (!failure.empty()) throw Error("bench agent: conversation " + std::to_string(conv) + ": " + failure);
    if (!r) throw Error("bench agent: the request failed: " + httplib::to_string(r.error()));
    if (status != 200) throw Error("bench agent: the server answered " + std::to_string(status) + ": " + pending);
    if (a.usage.is_null()) throw Error("bench agent: the stream carried no usage");
    TurnResult& t = results[size_t(turn)];
    t.latency = since();
    t.ttft = a.first_token >= 0 ? a.first_token : t.latency;
    t.prompt_tokens = a.usage["prompt_tokens"].get<int64_t>();
    t.completion_tokens = a.usage["completion_tokens"].get<int64_t>();
    if (a.usage.contains("prompt_tokens_details") && a.usage["prompt_tokens_details"].is_object())
      t.cached_tokens = a.usage["prompt_tokens_details"].value("cached_tokens", int64_t(0));
    // The answer goes back as the assistant's message, as an agent sends it; the next
    // prompt is rendered from it by the chat encoder.
    json reply = {{"role", "assistant"}, {"content", a.content.empty() ? json(nullptr) : json(a.content)}};
    if (o.thinking) reply["reasoning_content"] = a.reasoning;
    const std::string result_text = prose(o.tool_result_words, uint64_t(conv) * 7919 + uint64_t(turn));
    if (!a.calls.empty() && !a.calls[0]["function"]["name"].get<std::string>().empty()) {
      t.tool_call = true;
      try {
        const json args = json::parse(a.calls[0]["function"]["arguments"].get<std::string>());
        t.whole_call = args.is_object() && !args.empty();
      } catch (const json::exception&) {
      }
      reply["tool_calls"] = a.calls;
      messages.push_back(reply);
      for (const json& call : a.calls)
        messages.push_back({{"role", "tool"}, {"tool_call_id", call["id"]}, {"content", result_text}});
    } else {  // cut off before a whole call (max_tokens): the user answers instead
      messages.push_back(reply);
      messages.push_back({{"role", "user"}, {"content", result_text}});
    }
    ++done;
  }
}

}  // namespace

bench::Report run_agent_bench(const AgentBenchOptions& o, const bench::Roofline& roofline) {
  if (o.conversations < 1 || o.turns < 1) fail("bench agent needs --conversations and --turns >= 1");
  if (o.max_tokens < 1) fail("bench agent: --output-len must be >= 1");
  EngineArgs ea = o.engine;
  ea.quiet = true;
  server::ServerOptions so;
  so.served_model_name = "agent-bench";
  so.http_threads = int(std::max<int64_t>(8, o.conversations + 4));
  server::LocalServer srv(ea, so);
  const std::string system =
      "You are a coding agent working in a software repository. Call one tool per turn.\n" + prose(o.system_words, 7);
  std::vector<std::vector<TurnResult>> results(size_t(o.conversations), std::vector<TurnResult>(size_t(o.turns)));
  std::atomic<int64_t> done{0};
  std::vector<std::thread> threads;
  std::mutex err_m;
  std::string err;
  const auto t0 = std::chrono::steady_clock::now();
  for (int64_t c = 0; c < o.conversations; ++c)
    threads.emplace_back([&, c] {
      try {
        converse(srv.port(), srv.model_name(), o, c, system, results[size_t(c)], done);
      } catch (const std::exception& e) {
        std::lock_guard<std::mutex> lock(err_m);
        if (err.empty()) err = e.what();
      }
    });
  {
    ProgressBar bar(o.quiet_progress ? "" : "agent");
    const uint64_t total = uint64_t(o.conversations * o.turns);
    for (;;) {
      {
        std::lock_guard<std::mutex> lock(err_m);
        if (!err.empty()) break;
      }
      if (uint64_t(done.load()) >= total) break;
      bar.update(uint64_t(done.load()), total, "turns");
      std::this_thread::sleep_for(std::chrono::milliseconds(100));
    }
    bar.finish();
  }
  for (std::thread& t : threads) t.join();
  if (!err.empty()) fail(err);
  const double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  // The prefix cache's counters, from the server's /metrics (Prometheus text).
  std::map<std::string, double> counters;
  {
    httplib::Client cli("127.0.0.1", srv.port());
    if (const httplib::Result r = cli.Get("/metrics"); r && r->status == 200) {
      std::istringstream in(r->body);
      std::string line;
      while (std::getline(in, line)) {
        if (line.empty() || line[0] == '#' || line.rfind("gannet_prefix_cache_", 0) != 0) continue;
        const size_t sp = line.find(' ');
        if (sp != std::string::npos) counters[line.substr(20, sp - 20)] = std::strtod(line.c_str() + sp + 1, nullptr);
      }
    }
  }

  bench::Report rep;
  rep.bench = "agent";
  rep.meta = bench::make_meta(o.engine.model, o.engine.threads, roofline);
  rep.meta["conversations"] = o.conversations;
  rep.meta["turns"] = o.turns;
  rep.meta["system_words"] = o.system_words;
  rep.meta["tool_result_words"] = o.tool_result_words;
  rep.meta["max_tokens"] = o.max_tokens;
  rep.meta["thinking"] = o.thinking;
  rep.meta["prefix_caching"] = srv.prefix_caching();
  rep.meta["prefix_cache_dir"] = o.engine.prefix_cache_dir;
  rep.meta["prefix_state_snapshots"] = o.engine.prefix_state_snapshots;  // -1: the engine's default
  rep.meta["async_scheduling"] = o.engine.async_scheduling;
  rep.columns = {{"turn", "turn", 0},
                 {"prompt_tokens_mean", "prompt tok", 0},
                 {"hit_rate", "hit rate", 3},
                 {"recomputed_tokens_mean", "recomputed tok", 0},
                 {"ttft_ms_p50", "TTFT p50 ms", 1},
                 {"ttft_ms_p90", "TTFT p90 ms", 1},
                 {"latency_ms_p50", "turn p50 ms", 1},
                 {"tool_calls", "tool calls", 0},
                 {"whole_tool_calls", "whole calls", 0}};
  int64_t all_prompt = 0, all_cached = 0, all_out = 0, later_prompt = 0, later_cached = 0;
  std::vector<double> ttft_p50(size_t(o.turns));
  for (int64_t t = 0; t < o.turns; ++t) {
    int64_t prompt = 0, cached = 0, completion = 0, calls = 0, whole = 0;
    std::vector<double> ttft, lat;
    for (int64_t c = 0; c < o.conversations; ++c) {
      const TurnResult& r = results[size_t(c)][size_t(t)];
      prompt += r.prompt_tokens;
      cached += r.cached_tokens;
      completion += r.completion_tokens;
      calls += r.tool_call;
      whole += r.whole_call;
      ttft.push_back(r.ttft);
      lat.push_back(r.latency);
    }
    all_prompt += prompt;
    all_cached += cached;
    all_out += completion;
    if (t > 0) later_prompt += prompt, later_cached += cached;
    ttft_p50[size_t(t)] = bench::percentile(ttft, 0.5);
    ordered_json row;
    row["turn"] = t + 1;
    row["requests"] = o.conversations;
    row["prompt_tokens_mean"] = double(prompt) / double(o.conversations);
    row["cached_tokens_mean"] = double(cached) / double(o.conversations);
    row["completion_tokens_mean"] = double(completion) / double(o.conversations);
    row["hit_rate"] = prompt ? double(cached) / double(prompt) : 0.0;
    row["recomputed_tokens_mean"] = double(prompt - cached) / double(o.conversations);
    row["ttft_ms_p50"] = ttft_p50[size_t(t)] * 1e3;
    row["ttft_ms_p90"] = bench::percentile(ttft, 0.9) * 1e3;
    row["latency_ms_p50"] = bench::percentile(lat, 0.5) * 1e3;
    row["tool_calls"] = calls;
    row["whole_tool_calls"] = whole;
    rep.rows.push_back(row);
  }
  rep.meta["seconds"] = secs;
  rep.meta["hit_rate"] = all_prompt ? double(all_cached) / double(all_prompt) : 0.0;
  rep.meta["hit_rate_from_turn_2"] = later_prompt ? double(later_cached) / double(later_prompt) : 0.0;
  rep.meta["recomputed_tokens"] = all_prompt - all_cached;
  rep.meta["output_tokens_per_s"] = double(all_out) / secs;
  for (const char* k : {"evictions_total", "disk_hits_total", "disk_writes_total", "replayed_total", "snapshot_restores_total"})
    if (counters.count(k)) rep.meta[std::string("prefix_cache_") + k] = counters[k];
  if (o.turns >= 2) rep.meta["ttft_last_over_turn_2"] = ttft_p50.back() / std::max(1e-9, ttft_p50[1]);
  return rep;
}

}  // namespace gannet::cli
