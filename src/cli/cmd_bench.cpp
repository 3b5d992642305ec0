#include <cstdio>
#include <fstream>
#include <sstream>
#include <thread>

#include "core/cpu_budget.h"
#include "bench/engine_benches.h"
#include "bench/grammar_bench.h"
#include "bench/roofline.h"
#include "bench/vision_bench.h"
#include "cli/bench_agent.h"
#include "cli/commands.h"
#include "cli/flags.h"
#include "parallel/data_parallel.h"
#include "parallel/mpi_world.h"
#include "server/request_json.h"
#include "core/error.h"
#include "core/thread_pool.h"
#include "gannet/engine_args.h"
#include "io/checkpoint.h"
#include "io/quant_config.h"

namespace gannet::cli {

using server::dump_line;
using server::output_to_json;
using server::parse_prompt_line;
using server::PromptLine;

namespace {

const char* kBenchUsage =
    "usage: gannet bench <roofline|decode|prefill|throughput|agent|grammar|vision> [flags]\n"
    "\n"
    "  roofline                     measure read bandwidth and arithmetic peaks; cached as JSON\n"
    "  decode --model DIR [--batch-sizes 1,2,4,8,16,32,64] [--input-len 128] [--output-len 32]\n"
    "  prefill --model DIR [--lengths 128,512,2048] [--repeats 3]\n"
    "  throughput --model DIR [--num-prompts 64] [--input-len 128] [--output-len 64] [--dataset FILE.jsonl]\n"
    "             [--input-len-max N] [--output-len-max N]   (lengths spread over [len, max])\n"
    "             [--max-num-seqs N]   sequences per step (default: all, up to 256)\n"
    "             [--shared-prefix-len N]   every prompt starts with the same N tokens (a system prompt)\n"
    "             [--turns T]   multi-turn chat replay: --num-prompts conversations of T turns, each turn's\n"
    "                           prompt the previous one plus a recorded answer and a new message\n"
    "             [--no-prefix-caching | --enable-prefix-caching]   (default: the engine's, on for dense models)\n"
    "             [--prefix-cache-dir DIR]   the prefix cache's disk tier (run twice: hits from disk)\n"
    "             [--prefix-wait-steps N]   prefix-aware admission's bound (0: plain FCFS)\n"
    "             [--prefix-state-snapshots N]   DeepSeek: saved states hits copy instead of replaying\n"
    "             under mpirun -np N (one engine per rank, rank 0 reports the job): [--dp N]\n"
    "             [--expert-parallel on|off] [--ep-redundant-experts R --eplb-interval K [--eplb-window W]]\n"
    "             [--mpi-timeout SECONDS]   (README: Several processes)\n"
    "  agent --model DIR [--conversations 4] [--turns 8] [--system-len 3000] [--tool-result-len 150]\n"
    "             [--output-len 160] [--thinking]   coding-agent conversations through an in-process\n"
    "             OpenAI server: each turn's tool call and a tool result extend the conversation;\n"
    "             hit rate, recomputed tokens and TTFT per turn. Takes the engine flags of serve\n"
    "             (--max-num-seqs, --kv-cache-memory, --no-prefix-caching, --prefix-cache-dir, ...)\n"
    "  vision --model DIR [--image-size 544x544] [--repeats 3]\n"
    "             time to encode one image with a vision checkpoint's ViT and aligner, against its FLOPs\n"
    "  grammar --suite FILE.jsonl [--tokenizer tokenizer.json] [--vocab-size N] [--write-tokens FILE]\n"
    "             JSON Schema compile and per-token mask times on a schema suite (default tokenizer:\n"
    "             assets/tokenizers/deepseek-v3, vocabulary 129280); --write-tokens saves the token\n"
    "             sequences for tools/bench_grammar_xgrammar.py; [--no-precompute] leaves out what the\n"
    "             engine precomputes at compile (the masks' first visits then fall on decoding)\n"
    "\n"
    "common flags:\n"
    "  --threads N            threads (default: the usable CPUs)\n"
    "  --async-scheduling on|off  plan step N+1 while step N runs (default on)\n"
    "  --quantize none|fp8|int8   convert float linear weights at load (default none)\n"
    "  --weight-memory auto|map|copy  weights in the file mapping or copied on 2 MiB pages (default auto)\n"
    "  --json FILE            write the result as JSON\n"
    "  --csv FILE             write the rows as CSV\n"
    "  --kv-cache-memory SIZE KV budget (default: what the bench needs)\n"
    "  --remeasure            measure the roofline again instead of using the cache\n"
    "  --speculative off|ngram|dspark  speculative decoding (with --num-speculative-tokens K, --ngram-min/max N,\n"
    "                         --speculative-verify fixed|varlen);\n"
    "                         decode then reports mean acceptance length and draft / verify time per step\n"
    "  --prompts random|repeat  decode: random ids, or a 16-token segment repeated (default random)\n"
    "  --force-accept         decode with speculation: draft each request's greedy continuation (from a\n"
    "                         first, unmeasured pass), so every draft is accepted: the machinery's ceiling\n"
    "\n"
    "Every result is printed next to the machine's measured limits: GB/s against read\n"
    "bandwidth for decode, GFLOP/s against the bf16 (or f32) arithmetic peak for prefill.\n";

std::vector<int64_t> parse_list(const std::string& flag, const std::string& text) {
  std::vector<int64_t> out;
  std::stringstream ss(text);
  std::string item;
  while (std::getline(ss, item, ',')) out.push_back(parse_int(flag, item));
  if (out.empty()) throw UsageError(flag + " needs a comma-separated list of integers");
  return out;
}

void emit(const bench::Report& rep, const Flags& f) {
  const auto& r = rep.meta["roofline"];
  std::printf("gannet bench %s  (%s, %d threads, %s, rev %s)\n", rep.bench.c_str(),
              rep.meta["model"].get<std::string>().c_str(), rep.meta["threads"].get<int>(),
              rep.meta["kernel_path"].get<std::string>().c_str(), rep.meta["git_revision"].get<std::string>().c_str());
  std::printf("machine: read %.1f GB/s (%d threads), %.1f GB/s (1 thread); f32 FMA %.0f GFLOP/s; bf16 dot %.0f GFLOP/s\n\n",
              r["read_gb_per_s"].get<double>(), r["threads"].get<int>(), r["read_gb_per_s_1t"].get<double>(),
              r["f32_fma_gflop_per_s"].get<double>(), r["bf16_dot_gflop_per_s"].get<double>());
  rep.print_table(stdout);
  if (auto p = f.get("json")) rep.write_json(*p);
  if (auto p = f.get("csv")) rep.write_csv(*p);
}

}  // namespace

int cmd_bench(const Args& args) {
  if (args.empty() || args[0] == "--help" || args[0] == "-h") {
    std::fputs(kBenchUsage, args.empty() ? stderr : stdout);
    return args.empty() ? 2 : 0;
  }
  const std::string which = args[0];
  const Args rest(args.begin() + 1, args.end());
  Flags f(rest,
          {"model", "threads", "json", "csv", "batch-sizes", "input-len", "output-len", "lengths", "repeats",
           "num-prompts", "dataset", "kv-cache-memory", "async-scheduling", "quantize", "weight-memory", "input-len-max", "output-len-max",
           "speculative", "num-speculative-tokens", "speculative-verify", "speculative-sampling", "ngram-min",
           "ngram-max", "prompts", "suite", "tokenizer", "vocab-size", "write-tokens", "max-num-seqs",
           "shared-prefix-len", "turns", "prefix-cache-dir", "prefix-wait-steps", "prefix-state-snapshots", "expert-parallel", "ep-redundant-experts", "eplb-interval",
           "eplb-window", "dp", "mpi-timeout", "image-size", "conversations", "system-len", "tool-result-len"},
          {"remeasure", "help", "force-accept", "no-prefix-caching", "enable-prefix-caching", "no-precompute", "thinking"});
  if (f.has("force-accept") && which != "decode") throw UsageError("--force-accept applies to bench decode only");
  for (const char* flag : {"max-num-seqs", "turns", "no-prefix-caching", "enable-prefix-caching", "prefix-cache-dir",
                           "prefix-wait-steps", "prefix-state-snapshots"})
    if (f.has(flag) && which != "throughput" && which != "agent")
      throw UsageError(std::string("--") + flag + " applies to bench throughput and agent only");
  for (const char* flag : {"shared-prefix-len", "expert-parallel", "ep-redundant-experts", "eplb-interval", "eplb-window",
                           "dp", "mpi-timeout"})
    if (f.has(flag) && which != "throughput")
      throw UsageError(std::string("--") + flag + " applies to bench throughput only");
  for (const char* flag : {"conversations", "system-len", "tool-result-len", "thinking"})
    if (f.has(flag) && which != "agent") throw UsageError(std::string("--") + flag + " applies to bench agent only");
  if (f.has("no-prefix-caching") && f.has("enable-prefix-caching"))
    throw UsageError("--enable-prefix-caching and --no-prefix-caching contradict each other");
  if (f.has("help")) {
    std::fputs(kBenchUsage, stdout);
    return 0;
  }
  if (f.has("no-precompute") && which != "grammar") throw UsageError("--no-precompute applies to bench grammar only");
  if (f.has("image-size") && which != "vision") throw UsageError("--image-size applies to bench vision only");
  if (which == "grammar") {
    bench::GrammarBenchOptions o;
    o.suite = f.require("suite");
    o.tokenizer = f.get("tokenizer").value_or("assets/tokenizers/deepseek-v3/tokenizer.json");
    o.vocab_size = f.get_int_in("vocab-size", f.has("tokenizer") ? 0 : 129280, 0, int64_t(1) << 24);
    o.write_tokens = f.get("write-tokens").value_or("");
    o.precompute = !f.has("no-precompute");
    const nlohmann::json r = bench::run_grammar_bench(o);
    const auto& c = r["compile_ms"];
    const auto& m = r["mask_us"];
    std::printf("gannet bench grammar  (%s, %lld schemas, %zu compile failures, %zu token failures)\n",
                o.suite.c_str(), (long long)r["schemas"].get<int64_t>(), r["compile_failures"].size(),
                r["token_failures"].size());
    if (!c.empty())
      std::printf("compile ms: p50 %.3f  p99 %.3f  max %.3f  mean %.3f\n", c["p50"].get<double>(), c["p99"].get<double>(),
                  c["max"].get<double>(), c["mean"].get<double>());
    if (!m.empty())
      std::printf("mask us:    p50 %.2f  p99 %.2f  max %.2f  mean %.2f  (%lld masks, %.2f%% over 100 us)\n",
                  m["p50"].get<double>(), m["p99"].get<double>(), m["max"].get<double>(), m["mean"].get<double>(),
                  (long long)m["n"].get<int64_t>(), 100 * m["over_100us"].get<double>());
    if (auto p = f.get("json")) {
      std::ofstream out(*p);
      if (!out) fail("cannot write ", *p);
      out << r.dump(1) << "\n";
    }
    return 0;
  }
  const parallel::World& job = parallel::world();
  if (job.size > 1 && which != "throughput")
    throw UsageError("bench " + which + " measures one engine; only bench throughput runs as ranks of an mpirun job");
  const int threads = int(f.get_int_in("threads", std::max(1, usable_cpus() / job.local_size), 1, 1024));
  auto progress = [](const std::string& stage) { std::fprintf(stderr, "roofline: measuring %s...\n", stage.c_str()); };
  auto roofline = [&] {
    if (f.has("remeasure") || which == "roofline") {
      bench::Roofline r = bench::measure_roofline(threads, progress);
      bench::save_roofline(r);
      return r;
    }
    return bench::roofline_for(threads, progress);
  };
  auto common = [&](bench::EngineBenchOptions& o) {
    o.model = f.require("model");
    o.threads = threads;
    if (auto q = f.get("quantize")) {
      try {
        io::parse_quantize_flag(*q);
      } catch (const Error& e) {
        throw UsageError(e.what());
      }
      o.quantize = *q;
    }
    if (auto w = f.get("weight-memory")) {
      try {
        io::parse_weight_memory(*w);
      } catch (const Error& e) {
        throw UsageError(e.what());
      }
      o.weight_memory = *w;
    }
    if (auto a = f.get("async-scheduling")) {
      try {
        o.async_scheduling = parse_on_off("--async-scheduling", *a);
      } catch (const Error& e) {
        throw UsageError(e.what());
      }
    }
    try {
      EngineArgs ea;
      ea.model = o.model;
      apply_speculative_flags(f, ea);
      ea.validate();
      o.speculative = ea.speculative;
      o.num_speculative_tokens = ea.num_speculative_tokens;
      o.speculative_verify = ea.speculative_verify;
      o.speculative_sampling = ea.speculative_sampling;
      o.ngram_min = ea.ngram_min;
      o.ngram_max = ea.ngram_max;
    } catch (const UsageError&) {
      throw;
    } catch (const Error& e) {
      throw UsageError(e.what());
    }
    if (auto m = f.get("kv-cache-memory")) {
      try {
        o.kv_cache_memory = parse_memory_size(*m);
      } catch (const Error& e) {
        throw UsageError(e.what());
      }
    }
  };
  if (which == "roofline") {
    bench::Roofline r = roofline();
    bench::Report rep;
    rep.bench = "roofline";
    rep.meta = bench::make_meta("", threads, r);
    rep.columns = {{"measure", "measure", 0}, {"value", "value", 1}, {"unit", "unit", 0}};
    rep.rows = {{{"measure", "read bandwidth, 1 thread"}, {"value", r.read_gb_per_s_1t}, {"unit", "GB/s"}},
                {{"measure", "read bandwidth, " + std::to_string(threads) + " threads"}, {"value", r.read_gb_per_s}, {"unit", "GB/s"}},
                {{"measure", "f32 FMA peak"}, {"value", r.f32_fma_gflop_per_s}, {"unit", "GFLOP/s"}},
                {{"measure", "bf16 dot peak (vdpbf16ps)"}, {"value", r.bf16_dot_gflop_per_s}, {"unit", "GFLOP/s"}},
                {{"measure", "int8 dot peak (vpdpbusd)"}, {"value", r.int8_dot_gop_per_s}, {"unit", "GOP/s"}}};
    std::fprintf(stderr, "cached in %s\n", bench::roofline_cache_path().c_str());
    emit(rep, f);
    return 0;
  }
  if (which == "decode") {
    bench::DecodeOptions o;
    common(o);
    if (auto v = f.get("batch-sizes")) o.batch_sizes = parse_list("--batch-sizes", *v);
    o.input_len = f.get_int("input-len", o.input_len);
    o.output_len = f.get_int("output-len", o.output_len);
    if (auto v = f.get("prompts")) o.prompts = *v;
    o.force_accept = f.has("force-accept");
    emit(bench::run_decode_bench(o, roofline()), f);
    return 0;
  }
  if (which == "vision") {
    bench::VisionBenchOptions o;
    o.model = f.require("model");
    o.threads = threads;
    o.repeats = int(f.get_int_in("repeats", o.repeats, 1, 1000));
    if (auto v = f.get("image-size")) {
      char x = 0;
      std::istringstream in(*v);
      if (!(in >> o.image_w >> x >> o.image_h) || x != 'x' || o.image_w <= 0 || o.image_h <= 0 || !in.eof())
        throw UsageError("--image-size must be WIDTHxHEIGHT in pixels, e.g. 544x544");
    }
    const bench::Report rep = bench::run_vision_bench(o, roofline());
    emit(rep, f);
    std::printf("image %dx%d: %lldx%lld patches, %lld tokens, %.1f GFLOP; median %.3f s (%.1f GFLOP/s; f32 FMA peak %.1f)\n",
                o.image_w, o.image_h, (long long)rep.meta["patch_grid"][0].get<int64_t>(),
                (long long)rep.meta["patch_grid"][1].get<int64_t>(), (long long)rep.meta["tokens_per_image"].get<int64_t>(),
                rep.meta["flops_per_image"].get<double>() / 1e9, rep.meta["median_s"].get<double>(),
                rep.meta["median_gflop_per_s"].get<double>(), rep.meta["roofline"]["f32_fma_gflop_per_s"].get<double>());
    return 0;
  }
  if (which == "prefill") {
    bench::PrefillOptions o;
    common(o);
    if (auto v = f.get("lengths")) o.lengths = parse_list("--lengths", *v);
    o.repeats = int(f.get_int_in("repeats", o.repeats, 1, 1000));
    emit(bench::run_prefill_bench(o, roofline()), f);
    return 0;
  }
  if (which == "throughput") {
    bench::ThroughputOptions o;
    common(o);
    o.num_prompts = f.get_int("num-prompts", o.num_prompts);
    o.input_len = f.get_int("input-len", o.input_len);
    o.output_len = f.get_int("output-len", o.output_len);
    o.input_len_max = f.get_int("input-len-max", 0);
    o.output_len_max = f.get_int("output-len-max", 0);
    o.max_num_seqs = f.get_int_in("max-num-seqs", 0, 0, 1 << 20);
    o.shared_prefix_len = f.get_int_in("shared-prefix-len", 0, 0, 1 << 24);
    o.turns = f.get_int_in("turns", 1, 1, 1 << 16);
    if (f.has("no-prefix-caching")) o.prefix_caching = 0;
    if (f.has("enable-prefix-caching")) o.prefix_caching = 1;
    o.prefix_cache_dir = f.get_or("prefix-cache-dir", "");
    if (f.has("prefix-cache-dir") && o.prefix_cache_dir.empty()) throw UsageError("--prefix-cache-dir is empty");
    o.prefix_wait_steps = f.get_int_in("prefix-wait-steps", -1, 0, 1 << 20);
    o.prefix_state_snapshots = f.get_int_in("prefix-state-snapshots", -1, 0, 1 << 20);
    if ((f.has("shared-prefix-len") || f.has("turns")) && f.has("dataset"))
      throw UsageError("--shared-prefix-len and --turns shape synthetic requests; --dataset brings its own");
    if (auto d = f.get("dataset")) {
      std::ifstream in(*d);
      if (!in) throw Error(*d + ": cannot open");
      SamplingParams defaults;
      defaults.temperature = 0;
      defaults.max_tokens = o.output_len;
      std::string line;
      int64_t lineno = 0;
      while (std::getline(in, line)) {
        ++lineno;
        if (line.find_first_not_of(" \t\r") == std::string::npos) continue;
        try {
          PromptLine pl = parse_prompt_line(line, defaults);
          o.dataset.emplace_back(pl.prompt, pl.params);
        } catch (const Error& e) {
          throw Error(*d + ": line " + std::to_string(lineno) + ": " + e.what());
        }
      }
      if (o.dataset.empty()) throw Error(*d + ": no requests");
    }
    std::unique_ptr<Collective> group;
    {
      EngineArgs ea;
      const auto dp = f.get("dp"), tmo = f.get("mpi-timeout");
      try {
        parallel::apply_job_options(dp ? &*dp : nullptr, tmo ? &*tmo : nullptr, ea);
      } catch (const Error& e) {
        throw UsageError(e.what());
      }
    }
    if (job.size > 1) {
      group = parallel::world_collective();
      o.group = group.get();
      if (job.rank > 0) o.quiet_progress = true;
    }
    if (auto a = f.get("expert-parallel")) {
      try {
        o.expert_parallel = parse_on_off("--expert-parallel", *a) ? 1 : 0;
      } catch (const Error& e) {
        throw UsageError(e.what());
      }
    }
    o.ep_redundant_experts = f.get_int_in("ep-redundant-experts", 0, 0, 1 << 16);
    o.eplb_interval = f.get_int_in("eplb-interval", 0, 0, int64_t(1) << 40);
    o.eplb_window = f.get_int_in("eplb-window", 0, 0, int64_t(1) << 40);
    // Rank 0 measures the machine and reports; the others only run their share.
    const bench::Report rep = bench::run_throughput_bench(o, job.rank == 0 ? roofline() : bench::Roofline{});
    if (job.rank == 0) emit(rep, f);
    return 0;
  }
  if (which == "agent") {
    AgentBenchOptions o;
    o.engine.model = f.require("model");
    apply_engine_flags(f, o.engine);
    o.engine.threads = threads;
    o.conversations = f.get_int_in("conversations", o.conversations, 1, 4096);
    o.turns = f.get_int_in("turns", o.turns, 1, 1 << 16);
    o.system_words = f.get_int_in("system-len", o.system_words, 0, 1 << 24);
    o.tool_result_words = f.get_int_in("tool-result-len", o.tool_result_words, 0, 1 << 24);
    o.max_tokens = f.get_int_in("output-len", o.max_tokens, 1, 1 << 20);
    o.thinking = f.has("thinking");
    emit(run_agent_bench(o, roofline()), f);
    return 0;
  }
  throw UsageError("unknown bench '" + which + "' (roofline, decode, prefill, throughput, agent, grammar, vision)");
}

}  // namespace gannet::cli
