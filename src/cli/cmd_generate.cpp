#include <chrono>
#include <cstdio>
#include <fstream>
#include <map>
#include <optional>
#include <sstream>
#include <tuple>

#include "cli/commands.h"
#include "cli/flags.h"
#include "server/request_json.h"
#include "vision/image.h"
#include "server/wire.h"
#include "core/error.h"
#include "core/progress_bar.h"
#include "engine/engine.h"
#include "parallel/data_parallel.h"
#include "parallel/ep_report.h"
#include "parallel/mpi_world.h"

namespace gannet::cli {

using server::dump_line;
using server::output_to_json;
using server::parse_prompt_line;
using server::PromptLine;

namespace {

const char* kGenerateUsage =
    "usage: gannet generate --model DIR (--prompt TEXT | --prompts FILE.jsonl) [flags]\n"
    "\n"
    "FILE.jsonl: one request a line, {\"prompt\": TEXT} or {\"prompt_token_ids\": [...]} with\n"
    "sampling fields; a vision model (DeepSeek-V4.1) also takes \"images\": [PATH, ...] (PNG,\n"
    "JPEG, WebP), one <｜deepseek_image｜> in the text (or image_token_id among the ids) per image.\n"
    "\n"
    "sampling (defaults for every prompt):\n"
    "  --max-tokens N     tokens to generate per prompt (default 64)\n"
    "  --temperature T    0 = greedy (default 1.0)\n"
    "  --top-p P          nucleus sampling, in (0, 1] (default 1)\n"
    "  --top-k K          keep the K most likely tokens, 0 = off (default 0)\n"
    "  --min-p P          drop tokens below P x the top probability (default 0)\n"
    "  --n N              samples per prompt (default 1)\n"
    "  --stop STR         stop when STR appears (cut from the text)\n"
    "  --seed S           sampling seed (default: drawn per request and reported)\n"
    "  --logprobs N       report the top-N logprobs of each generated token\n"
    "engine:\n"
    "  --threads N                  worker threads (default: all cores)\n"
    "  --kv-cache-memory SIZE       KV budget, e.g. 4GiB, 512MiB (default: 40% of free memory)\n"
    "  --max-num-seqs N             sequences per step (default 256)\n"
    "  --max-num-batched-tokens N   tokens per step (default 2048)\n"
    "  --block-size N               tokens per KV block (default 64)\n"
    "  --max-model-len N            context limit (default: the model's)\n"
    "  --limit-images-per-prompt N  images one prompt may carry (vision models; default 8)\n"
    "  --max-image-pixels N         largest image, width x height, refused before decoding (default 89478485)\n"
    "  --async-scheduling on|off    plan step N+1 while step N runs (default on)\n"
    "  --quantize none|fp8|int8     convert float linear weights at load (default none)\n"
    "  --weight-memory auto|map|copy  where weights live: the file mapping, or a copy on 2 MiB pages of\n"
    "                               this process's own; auto copies what the page cache holds in 4 KiB\n"
    "                               pages (faster decode), map never copies, copy always (default auto)\n"
    "  --exact-activations on|off   FP8-quantize activations before FP8/MXFP4 products (default off)\n"
    "  --act-quant none|fp8         the same under the DeepSeek reference's name (fp8 = on)\n"
    "  --yoco-keep-tokens N         DeepSeek-V4.1: prefill runs the decoder layers on the last N prompt\n"
    "                               positions only (bounded replay; default 140)\n"
    "  --no-yoco-replay             DeepSeek-V4.1: run the full prefill (exact; needed for prompt logprobs)\n"
    "  --no-kv-fake-quant           DeepSeek-V4: leave out the KV / indexer fake quantizations (as transformers)\n"
    "  --kv-cache-dtype auto|f32|bf16  dense models: K/V element type (bf16 halves the cache; default f32)\n"
    "  --enable-prefix-caching      reuse cached KV blocks of earlier requests with the same prefix (default\n"
    "                               on for dense models; bit-identical results)\n"
    "  --no-prefix-caching          compute every prompt in full\n"
    "  --prefix-cache-dir DIR       disk tier: blocks evicted from memory are kept there (across restarts)\n"
    "  --prefix-cache-disk-size SIZE  its budget (default 20GiB)\n"
    "  --prefix-wait-steps N        a request whose next uncached block another request is computing\n"
    "                               waits for it, up to N steps without progress (default 4; 0: never)\n"
    "  --prefix-state-snapshots N   DeepSeek: keep N states (after a prompt's or an answer's last full\n"
    "                               block) that a hit copies instead of recomputing the positions that\n"
    "                               rebuild it (default 4 x --max-num-seqs; 0: off)\n"
    "  --speculative off|ngram|dspark  speculative decoding (default off); outputs stay bit-identical\n"
    "  --num-speculative-tokens K   drafts verified per step (default 4)\n"
    "  --speculative-verify fixed|varlen  verify every draft, or choose by DSpark confidences (default fixed)\n"
    "  --speculative-sampling exact|rejection  DSpark with temperature > 0: argmax drafts and outputs identical\n"
    "                               to plain decoding (default), or sampled drafts with rejection sampling\n"
    "  --ngram-min N, --ngram-max N n-gram drafting: suffix lengths looked up, longest first (default 1, 4)\n"
    "  --expert-parallel on|off     in an mpirun job: spread MoE experts over the ranks (default on for MoE)\n"
    "  --ep-redundant-experts N     spare expert slots per rank for EPLB's replicas (default 0)\n"
    "  --eplb-interval N            rebalance experts every N forwards from their recent load (default 0: off)\n"
    "  --eplb-window N              forwards of load history a rebalance uses (default: the interval)\n"
    "  --dp N                       check that mpirun started N ranks (each runs an engine on its share)\n"
    "  --mpi-timeout SECONDS        end the job when a rank waits this long for the others (default 600)\n"
    "output:\n"
    "  --json             one JSON line per prompt: prompt, text, token_ids, finish_reason, ...\n"
    "\n"
    "FILE.jsonl has one {\"prompt\": ...} (or {\"prompt_token_ids\": [ids]}) object per line with optional\n"
    "SamplingParams fields\n"
    "(max_tokens, temperature, top_p, top_k, min_p, seed, n, stop, stop_token_ids, logprobs,\n"
    "prompt_logprobs, min_tokens, ignore_eos, repetition/presence/frequency_penalty, num_speculative_tokens, ...).\n"
    "All prompts run as one continuous batch; output lines keep the input order, and a bad\n"
    "line gets {\"error\": ...} in its place while the others complete.\n";

}  // namespace

int cmd_generate(const Args& args) {
  // The engine's flags are the ones serve takes too (flags.h).
  std::set<std::string> values = {"model", "prompt", "prompts", "max-tokens", "temperature", "top-p", "top-k",
                                  "min-p", "seed", "n", "stop", "logprobs"};
  values.insert(kEngineValueFlags.begin(), kEngineValueFlags.end());
  std::set<std::string> bools = {"json", "help"};
  bools.insert(kEngineBoolFlags.begin(), kEngineBoolFlags.end());
  Flags f(args, values, bools);
  if (f.has("help")) {
    std::fputs(kGenerateUsage, stdout);
    return 0;
  }
  EngineArgs ea;
  ea.model = f.require("model");
  if (f.has("prompt") == f.has("prompts")) throw UsageError("give exactly one of --prompt and --prompts");
  SamplingParams defaults;
  defaults.max_tokens = f.get_int("max-tokens", 64);
  defaults.temperature = f.get_double("temperature", 1.0);
  defaults.top_p = f.get_double("top-p", 1.0);
  defaults.top_k = f.get_int("top-k", 0);
  defaults.min_p = f.get_double("min-p", 0.0);
  defaults.n = f.get_int_in("n", 1, 1, 1024);
  if (auto st = f.get("stop")) defaults.stop = {*st};
  if (f.has("seed")) {
    const int64_t s = f.get_int("seed", 0);
    if (s < 0) throw UsageError("--seed must be >= 0");
    defaults.seed = uint64_t(s);
  }
  if (f.has("logprobs")) {
    const int64_t lp = f.get_int("logprobs", 0);
    if (lp < 0 || lp > SamplingParams::kMaxLogprobs)
      throw UsageError("--logprobs must be in [0, " + std::to_string(SamplingParams::kMaxLogprobs) + "], got " +
                       std::to_string(lp));
    defaults.logprobs = int(lp);
  }
  try {
    defaults.validate();
  } catch (const Error& e) {
    throw UsageError(e.what());
  }
  apply_engine_flags(f, ea);
  {
    const auto dp = f.get("dp"), tmo = f.get("mpi-timeout");
    parallel::apply_job_options(dp ? &*dp : nullptr, tmo ? &*tmo : nullptr, ea);
  }
  const bool as_json = f.has("json");
  // In an mpirun job rank 0 reads the input and prints everything; each rank runs the
  // requests it is given (parallel/data_parallel.h).
  std::unique_ptr<Collective> group = parallel::world_collective();
  const int rank = group->rank(), ranks = group->size();

  // Each input line: a request, or the error message that takes its place.
  struct Item {
    PromptLine line;
    std::optional<std::string> error;
    std::optional<RequestOutput> output;
  };
  std::vector<Item> items;
  if (auto p = f.get("prompt")) {
    if (p->empty()) throw UsageError("--prompt is empty");
    items.push_back({{*p, {}, false, {}, defaults}, std::nullopt, std::nullopt});
  } else {
    std::string all;
    bool opened = true;
    if (rank == 0) {
      std::ifstream in(*f.get("prompts"));
      opened = bool(in);
      all.assign(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
    }
    if (ranks > 1) {
      all = group->broadcast((opened ? "1" : "0") + all);
      opened = all[0] == '1';
      all.erase(0, 1);
    }
    if (!opened) throw Error(*f.get("prompts") + ": cannot open");
    std::istringstream in(all);
    std::string text;
    int64_t lineno = 0;
    while (std::getline(in, text)) {
      ++lineno;
      if (text.find_first_not_of(" \t\r") == std::string::npos) continue;
      Item it;
      try {
        it.line = parse_prompt_line(text, defaults);
      } catch (const Error& e) {
        it.error = "line " + std::to_string(lineno) + ": " + e.what();
      }
      items.push_back(std::move(it));
    }
  }

  engine::Engine eng(ea, group.get());
  const bool stream = ranks == 1 && !as_json && items.size() == 1 && items[0].line.params.n == 1;
  // Owners: rank 0 weighs each request by the tokens it queues and tells the others.
  std::vector<int> owner(items.size(), 0);
  if (ranks > 1) {
    std::string plan;
    if (rank == 0) {
      std::vector<int64_t> cost(items.size(), 0);
      for (size_t i = 0; i < items.size(); ++i) {
        const Item& it = items[i];
        if (it.error) continue;
        int64_t prompt = int64_t(it.line.prompt_token_ids.size());
        if (!it.line.has_ids && eng.tokenizer()) prompt = int64_t(eng.tokenizer()->encode(it.line.prompt, true).size());
        cost[i] = prompt + it.line.params.max_tokens * it.line.params.n;
      }
      for (int o : parallel::assign_by_tokens(cost, ranks)) plan += std::to_string(o) + ",";
    }
    plan = group->broadcast(plan);
    std::istringstream ps(plan);
    std::string tok;
    for (size_t i = 0; std::getline(ps, tok, ',') && i < owner.size(); ++i) owner[i] = std::stoi(tok);
  }
  for (size_t i = 0; i < items.size(); ++i) {
    if (items[i].error || owner[i] != rank) continue;
    try {
      std::vector<vision::RgbImage> images;
      vision::DecodeLimits limits;
      limits.max_pixels = ea.max_image_pixels;
      for (const std::string& path : items[i].line.images) images.push_back(vision::load_image_file(path, limits));
      if (items[i].line.has_ids)
        eng.add_request(std::to_string(i), items[i].line.prompt_token_ids, items[i].line.params, images);
      else eng.add_request(std::to_string(i), items[i].line.prompt, items[i].line.params, images);
    } catch (const Error& e) {
      items[i].error = e.what();
      if (items.size() == 1) throw;
    }
  }
  eng.set_streaming(stream);
  if (stream) std::fputs(items[0].line.prompt.c_str(), stdout);
  ProgressBar bar(items.size() > 1 ? "generating" : "");
  const auto t0 = std::chrono::steady_clock::now();
  size_t done = 0, streamed = 0;
  uint64_t gen_tokens = 0;
  size_t mine = 0;
  for (size_t i = 0; i < items.size(); ++i) mine += owner[i] == rank;
  while (group->any(eng.has_unfinished())) {
    for (RequestOutput& o : eng.step()) {
      // Streamed outputs are deltas; the final one is complete, so only its part past what
      // was printed is new.
      if (stream && !o.outputs.empty()) {
        const std::string& t = o.outputs[0].text;
        const size_t from = o.finished ? streamed : 0;
        if (t.size() > from) std::fputs(t.c_str() + from, stdout), std::fflush(stdout);
        streamed = o.finished ? t.size() : streamed + t.size();
      }
      if (!o.finished) continue;
      for (auto& c : o.outputs) gen_tokens += c.token_ids.size();
      items[std::stoul(o.request_id)].output = std::move(o);
      ++done;
    }
    const double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    char extra[64];
    std::snprintf(extra, sizeof extra, "requests, %.1f tok/s", double(gen_tokens) / std::max(secs, 1e-9));
    if (items.size() > 1 && rank == 0) bar.update(done, ranks > 1 ? mine : items.size(), extra);
  }
  bar.finish();
  const double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();

  // Each item's printed text, made by the rank that owns it; rank 0 prints them in order.
  int64_t failures = 0, spec_steps = 0, spec_drafted = 0, spec_accepted = 0;
  std::map<size_t, std::string> printed;
  for (size_t i = 0; i < items.size(); ++i) {
    const Item& it = items[i];
    if (owner[i] != rank) continue;
    if (it.output) {
      spec_steps += it.output->metrics.spec_steps;
      spec_drafted += it.output->metrics.spec_drafted;
      spec_accepted += it.output->metrics.spec_accepted;
    }
    std::string out;
    if (it.error) {
      out = dump_line(nlohmann::json{{"error", *it.error}}) + "\n";
      ++failures;
    } else if (as_json) {
      out = dump_line(output_to_json(*it.output, it.line.params)) + "\n";
    } else if (stream) {
      out = "\n";
    } else {
      for (const CompletionOutput& c : it.output->outputs) {
        if (it.output->outputs.size() > 1) out += "[sample " + std::to_string(c.index) + "]\n";
        out += it.output->prompt + c.text + "\n\n";
      }
    }
    printed[i] = std::move(out);
  }
  const nlohmann::json ep = parallel::expert_parallel_report(eng.expert_parallel(), *group);
  int64_t totals[6] = {failures, spec_steps, spec_drafted, spec_accepted, int64_t(gen_tokens), int64_t(done)};
  int64_t preemptions = eng.scheduler().num_preemptions(), steps = eng.num_steps();
  if (ranks > 1) {
    group->all_reduce_sum(totals, 6);
    group->all_reduce_sum(&preemptions, 1);
    double st = double(steps);
    group->all_reduce_max(&st, 1);
    steps = int64_t(st);
    // Raw bytes (a text may hold any bytes a token decodes to): index and text per item.
    server::WireWriter w;
    w.u64(printed.size());
    for (const auto& [i, text] : printed) w.u64(i), w.str(text);
    const std::vector<std::string> parts = group->gather(w.bytes());
    for (size_t r = 1; r < parts.size(); ++r) {
      server::WireReader rd(parts[r]);
      for (uint64_t n = rd.count(), k = 0; k < n; ++k) {
        const uint64_t i = rd.u64();
        printed[size_t(i)] = rd.str();
      }
    }
  }
  std::tie(failures, spec_steps, spec_drafted, spec_accepted) = std::tuple(totals[0], totals[1], totals[2], totals[3]);
  gen_tokens = uint64_t(totals[4]);
  done = size_t(totals[5]);
  if (rank != 0) return failures ? 1 : 0;
  for (size_t i = 0; i < items.size(); ++i) std::fwrite(printed[i].data(), 1, printed[i].size(), stdout);
  std::fflush(stdout);
  if (items.size() == 1 && items[0].output) {
    // One request: split its time into prefill (to the first token) and decode.
    const RequestOutput& o = *items[0].output;
    const double prefill = o.metrics.first_token_time - o.metrics.first_scheduled_time;
    const double decode = o.metrics.finished_time - o.metrics.first_token_time;
    const size_t outs = o.outputs.at(0).token_ids.size();
    std::fprintf(stderr, "[prefill %zu tokens in %.3f s (%.1f tok/s); decode %zu tokens in %.3f s (%.2f tok/s)]\n",
                 o.prompt_token_ids.size(), prefill, double(o.prompt_token_ids.size()) / std::max(prefill, 1e-9),
                 outs > 0 ? outs - 1 : 0, decode, outs > 1 ? double(outs - 1) / std::max(decode, 1e-9) : 0.0);
  }
  std::fprintf(stderr, "[%zu requests, %llu tokens generated in %.2f s (%.1f tok/s), %lld steps, %lld preemptions%s]\n",
               done, (unsigned long long)gen_tokens, secs, double(gen_tokens) / std::max(secs, 1e-9), (long long)steps,
               (long long)preemptions, ranks > 1 ? (", " + std::to_string(ranks) + " ranks").c_str() : "");
  if (!ep.is_null())
    std::fprintf(stderr,
                 "[expert parallel: %d ranks, rank load max/mean %.3f (%.3f from the first rebalance on), expert load "
                 "max/mean %.2f, %.0f bytes per step and rank, %.3f ms all-to-all per layer, %lld rebalances moving %s]\n",
                 ep["ranks"].get<int>(), ep["rank_load_max_over_mean"].get<double>(),
                 ep["rank_load_max_over_mean_recent"].get<double>(), ep["expert_load_max_over_mean"].get<double>(),
                 ep["bytes_per_step_per_rank"].get<double>(), ep["all_to_all_ms_per_layer"].get<double>(),
                 (long long)ep["rebalances"].get<int64_t>(), format_bytes(ep["weight_bytes_moved"].get<uint64_t>()).c_str());
  if (spec_steps > 0)
    std::fprintf(stderr, "[speculative: %lld drafts, %lld accepted (%.1f%%), mean acceptance length %.2f]\n",
                 (long long)spec_drafted, (long long)spec_accepted,
                 spec_drafted ? 100.0 * double(spec_accepted) / double(spec_drafted) : 0.0,
                 double(spec_steps + spec_accepted) / double(spec_steps));
  return failures ? 1 : 0;
}

}  // namespace gannet::cli
