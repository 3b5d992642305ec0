#include <cstdio>
#include <fstream>
#include <nlohmann/json.hpp>
#include <optional>

#include "cli/commands.h"
#include "cli/flags.h"
#include "core/cpu_features.h"
#include "core/progress_bar.h"
#include "core/thread_pool.h"
#include "engine/generator.h"
#include "io/checkpoint.h"
#include "io/model_config.h"
#include "tokenizer/incremental_detokenizer.h"
#include "tokenizer/tokenizer.h"

namespace gannet::cli {

namespace {

const char* kUsage =
    "usage: gannet generate --model DIR (--prompt TEXT | --prompts FILE.jsonl) [flags]\n"
    "\n"
    "  --max-tokens N     tokens to generate per prompt (default 64)\n"
    "  --temperature T    0 = greedy (default 1.0)\n"
    "  --top-p P          nucleus sampling, in (0, 1] (default 1)\n"
    "  --top-k K          keep the K most likely tokens, 0 = off (default 0)\n"
    "  --seed S           sampling seed (default: drawn at random and reported)\n"
    "  --threads N        worker threads (default: all cores)\n"
    "  --json             one JSON line per prompt: prompt, text, token_ids, finish_reason\n"
    "\n"
    "FILE.jsonl has one {\"prompt\": ...} object per line, optionally with max_tokens,\n"
    "temperature, top_p, top_k, seed. A bad line gets {\"error\": ...} in its place.\n";

using nlohmann::json;

json to_json_line(const std::string& prompt, const std::string& text, const engine::GenerationResult& r) {
  json j;
  j["prompt"] = prompt;
  j["text"] = text;
  j["token_ids"] = r.token_ids;
  j["finish_reason"] = r.finish_reason;
  j["seed"] = r.seed;
  return j;
}

std::string dump(const json& j) { return j.dump(-1, ' ', false, json::error_handler_t::replace); }

// Reads one prompts-file line into (prompt, params); throws gannet::Error naming the field.
std::pair<std::string, SamplingParams> parse_prompt_line(const std::string& line, const SamplingParams& defaults) {
  json j;
  try {
    j = json::parse(line);
  } catch (const json::exception& e) {
    fail("bad JSON: ", e.what());
  }
  if (!j.is_object()) fail("each line must be a JSON object");
  SamplingParams p = defaults;
  std::string prompt;
  bool have_prompt = false;
  for (auto it = j.begin(); it != j.end(); ++it) {
    const std::string& k = it.key();
    const json& v = it.value();
    auto need_num = [&] { if (!v.is_number()) fail("'", k, "' must be a number"); };
    auto need_int = [&] { if (!v.is_number_integer()) fail("'", k, "' must be an integer"); };
    if (k == "prompt") {
      if (!v.is_string()) fail("'prompt' must be a string");
      prompt = v.get<std::string>();
      have_prompt = true;
    } else if (k == "max_tokens") { need_int(); p.max_tokens = v.get<int64_t>(); }
    else if (k == "temperature") { need_num(); p.temperature = v.get<double>(); }
    else if (k == "top_p") { need_num(); p.top_p = v.get<double>(); }
    else if (k == "top_k") { need_int(); p.top_k = v.get<int64_t>(); }
    else if (k == "seed") {
      if (!v.is_number_unsigned()) fail("'seed' must be a non-negative integer");
      p.seed = v.get<uint64_t>();
    } else fail("unknown field '", k, "'");
  }
  if (!have_prompt) fail("missing 'prompt'");
  if (prompt.empty()) fail("the prompt is empty");
  p.validate();
  return {prompt, p};
}

}  // namespace

int cmd_generate(const Args& args) {
  Flags f(args, {"model", "prompt", "prompts", "max-tokens", "temperature", "top-p", "top-k", "seed", "threads"},
          {"json", "help"});
  if (f.has("help")) {
    std::fputs(kUsage, stdout);
    return 0;
  }
  const std::string dir = f.require("model");
  if (f.has("prompt") == f.has("prompts")) throw UsageError("give exactly one of --prompt and --prompts");
  SamplingParams defaults;
  defaults.max_tokens = f.get_int("max-tokens", 64);
  defaults.temperature = f.get_double("temperature", 1.0);
  defaults.top_p = f.get_double("top-p", 1.0);
  defaults.top_k = f.get_int("top-k", 0);
  if (f.has("seed")) {
    int64_t s = f.get_int("seed", 0);
    if (s < 0) throw UsageError("--seed must be >= 0");
    defaults.seed = uint64_t(s);
  }
  try {
    defaults.validate();
  } catch (const Error& e) {
    throw UsageError(e.what());
  }
  const int64_t threads = f.get_int("threads", 0);
  if (threads < 0) throw UsageError("--threads must be >= 1");
  if (threads > 0) set_default_threads(int(threads));
  const bool as_json = f.has("json");

  // Prompts: (text, params) or an error message for that line.
  struct Item {
    std::string prompt;
    SamplingParams params;
    std::optional<std::string> error;
  };
  std::vector<Item> items;
  if (auto p = f.get("prompt")) {
    if (p->empty()) throw UsageError("--prompt is empty");
    items.push_back({*p, defaults, std::nullopt});
  } else {
    std::ifstream in(*f.get("prompts"));
    if (!in) throw Error(*f.get("prompts") + ": cannot open");
    std::string line;
    int64_t lineno = 0;
    while (std::getline(in, line)) {
      ++lineno;
      if (line.find_first_not_of(" \t\r") == std::string::npos) continue;
      try {
        auto [text, params] = parse_prompt_line(line, defaults);
        items.push_back({text, params, std::nullopt});
      } catch (const Error& e) {
        items.push_back({"", defaults, "line " + std::to_string(lineno) + ": " + e.what()});
      }
    }
  }

  io::ModelConfig cfg = io::load_model_config(dir);
  io::Checkpoint ckpt(dir);
  {
    ProgressBar bar("loading " + dir, true);
    ckpt.prefault([&](uint64_t done, uint64_t total) { bar.update(done, total); });
  }
  auto model = model::create_model(cfg, ckpt);
  auto tok = tokenizer::Tokenizer::from_dir(dir);
  engine::Generator gen(*model, &default_pool());

  int failures = 0;
  for (const Item& it : items) {
    if (it.error) {
      std::printf("%s\n", dump(json{{"error", *it.error}}).c_str());
      ++failures;
      continue;
    }
    try {
      std::vector<int32_t> ids = tok.encode(it.prompt, /*add_special_tokens=*/true);
      tokenizer::IncrementalDetokenizer detok(tok);
      std::string text;
      auto on_token = [&](int32_t id) {
        std::string piece = detok.push(id);
        text += piece;
        if (!as_json) {
          std::fputs(piece.c_str(), stdout);
          std::fflush(stdout);
        }
      };
      if (!as_json) std::fputs(it.prompt.c_str(), stdout);
      engine::GenerationResult r = gen.generate(ids, it.params, on_token);
      std::string rest = detok.flush();
      text += rest;
      if (as_json) {
        std::printf("%s\n", dump(to_json_line(it.prompt, text, r)).c_str());
      } else {
        std::printf("%s\n", rest.c_str());
        std::fprintf(stderr, "[%zu prompt tokens, %zu generated (%s), prefill %.1f tok/s, decode %.2f tok/s, seed %llu]\n",
                     ids.size(), r.token_ids.size(), r.finish_reason.c_str(), double(ids.size()) / r.prefill_seconds,
                     r.token_ids.size() > 1 ? double(r.token_ids.size() - 1) / r.decode_seconds : 0.0,
                     (unsigned long long)r.seed);
      }
    } catch (const Error& e) {
      if (!as_json && items.size() == 1) throw;
      std::printf("%s\n", dump(json{{"error", e.what()}}).c_str());
      ++failures;
    }
    std::fflush(stdout);
  }
  return failures ? 1 : 0;
}

}  // namespace gannet::cli
