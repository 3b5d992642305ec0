#include "core/cpu_budget.h"
#include "bench/engine_benches.h"

#include "parallel/data_parallel.h"
#include "parallel/ep_report.h"

#include "kernels/cpu/matmul.h"

#include <algorithm>
#include <numeric>
#include <chrono>
#include <cmath>
#include <map>

#include "core/error.h"
#include "core/progress_bar.h"
#include "engine/engine.h"
#include "engine/flops_estimator.h"
#include "io/checkpoint.h"
#include "io/model_config.h"
#include "kernels/cpu/matmul.h"

namespace gannet::bench {

using nlohmann::ordered_json;

namespace {

double seconds(std::chrono::steady_clock::time_point a, std::chrono::steady_clock::time_point b) {
  return std::chrono::duration<double>(b - a).count();
}

// Bytes per weight element of the checkpoint (2 for bf16, 4 for f32).
double weight_elem_bytes(const std::string& model) {
  io::Checkpoint ck(model);
  return ck.total_elements() ? double(ck.total_bytes()) / double(ck.total_elements()) : 4.0;
}

// Deterministic synthetic prompt ids, past the first 1000 (often special or byte tokens)
// when the vocabulary is large enough.
std::vector<int32_t> synthetic_prompt(int64_t len, int64_t salt, int64_t vocab) {
  std::vector<int32_t> ids(static_cast<size_t>(len));
  const int64_t lo = vocab > 2000 ? 1000 : 0, span = std::min<int64_t>(vocab, 91000) - lo;
  uint64_t x = 0x9e3779b97f4a7c15ull * uint64_t(salt + 1);
  for (auto& id : ids) {
    x ^= x << 13, x ^= x >> 7, x ^= x << 17;
    id = int32_t(lo + int64_t(x % uint64_t(span)));
  }
  return ids;
}

// --weight-memory and what it did: decode speed depends on the pages the weights sit on.
void weight_meta(Report& rep, const engine::Engine& eng) {
  rep.meta["weight_memory"] = eng.args().weight_memory;
  rep.meta["weight_bytes_copied"] = eng.weight_page_in().copied;
  rep.meta["weight_bytes_on_small_pages"] = eng.weight_page_in().small_pages;
}

EngineArgs engine_args(const EngineBenchOptions& o, int64_t max_seqs, int64_t max_tokens_per_seq,
                       int64_t max_batched) {
  EngineArgs a;
  a.model = o.model;
  a.threads = o.threads;
  a.quiet = true;
  a.max_num_seqs = std::max<int64_t>(1, max_seqs);
  a.max_num_batched_tokens = std::max<int64_t>(2048, max_batched);
  a.max_model_len = max_tokens_per_seq + 1;
  a.kv_cache_memory = o.kv_cache_memory;
  a.async_scheduling = o.async_scheduling;
  a.quantize = o.quantize;
  a.weight_memory = o.weight_memory;
  a.speculative = o.speculative;
  a.num_speculative_tokens = o.num_speculative_tokens;
  a.speculative_verify = o.speculative_verify;
  a.speculative_sampling = o.speculative_sampling;
  a.ngram_min = o.ngram_min;
  a.ngram_max = o.ngram_max;
  a.enable_prefix_caching = o.prefix_caching;
  a.prefix_cache_dir = o.prefix_cache_dir;
  if (o.prefix_wait_steps >= 0) a.prefix_wait_steps = o.prefix_wait_steps;
  if (o.prefix_state_snapshots >= 0) a.prefix_state_snapshots = o.prefix_state_snapshots;
  if (a.kv_cache_memory == 0) {
    const io::ModelConfig cfg = io::load_model_config(o.model);
    const uint64_t tokens = uint64_t(max_seqs) * uint64_t(max_tokens_per_seq + 2 * a.block_size);
    a.kv_cache_memory = tokens * uint64_t(cfg.kv_bytes_per_token(4)) + (uint64_t(16) << 20);
  }
  return a;
}

// The arithmetic peak the model's products run against: the bf16 dot peak when most
// weight bytes are bf16 and the bf16 GEMM uses vdpbf16ps, the f32 FMA peak otherwise
// (f32 weights, every packed format, and bf16 on its FMA route).
double compute_peak(const Roofline& r, const model::Model& m) {
  uint64_t total = 0, bf16 = 0;
  for (const auto& [fmt, b] : m.weight_bytes_by_format()) {
    total += b;
    if (fmt == "bf16") bf16 += b;
  }
  const bool dp = 2 * bf16 > total && kernels::bf16_gemm_choice() == kernels::Bf16Gemm::kDpbf16;
  return dp && r.bf16_dot_gflop_per_s > 0 ? r.bf16_dot_gflop_per_s : r.f32_fma_gflop_per_s;
}

}  // namespace

Report run_decode_bench(const DecodeOptions& o, const Roofline& roofline) {
  if (o.batch_sizes.empty()) fail("--batch-sizes is empty");
  for (int64_t b : o.batch_sizes)
    if (b < 1) fail("batch sizes must be >= 1, got ", b);
  if (o.input_len < 1 || o.output_len < 4) fail("decode bench needs --input-len >= 1 and --output-len >= 4");
  const int64_t max_b = *std::max_element(o.batch_sizes.begin(), o.batch_sizes.end());
  engine::Engine eng([&] {
    EngineArgs a = engine_args(o, max_b, o.input_len + o.output_len, max_b * o.input_len);
    a.enable_prefix_caching = 0;  // the warm-up and forced-draft passes repeat the prompts
    return a;
  }());
  Report rep;
  rep.bench = "decode";
  rep.meta = make_meta(o.model, eng.args().threads > 0 ? eng.args().threads : usable_cpus(), roofline);
  rep.meta["input_len"] = o.input_len;
  rep.meta["output_len"] = o.output_len;
  rep.meta["async_scheduling"] = o.async_scheduling;
  rep.meta["quantize"] = o.quantize.empty() ? "none" : o.quantize;
  weight_meta(rep, eng);
  rep.columns = {{"batch_size", "batch", 0},         {"step_ms_p50", "step ms p50", 2},
                 {"step_ms_p90", "step ms p90", 2},  {"tokens_per_s", "tok/s", 1},
                 {"tokens_per_s_per_user", "tok/s/user", 2}, {"gb_per_s", "GB/s", 1},
                 {"read_gb_per_s", "read GB/s", 1},
                 {"pct_bandwidth", "% bw", 1},       {"gflop_per_s", "GFLOP/s", 1},
                 {"exposed_host_ms", "host ms", 3}};
  const bool spec = o.speculative != "off";
  rep.meta["speculative"] = o.speculative;
  if (spec) rep.meta["speculative_verify"] = o.speculative_verify;
  rep.meta["prompts"] = o.prompts;
  if (spec) {
    // Steps now yield 1 + accepted drafts per sequence: rates count the tokens generated
    // over every decode step, and each step splits into drafting, the verifying forward
    // pass with its sampling, and the host work the executor waited for.
    rep.meta["num_speculative_tokens"] = eng.args().speculative_tokens();
    rep.columns.push_back({"mean_acceptance_length", "accept len", 2});
    rep.columns.push_back({"drafts_per_step", "drafts/step", 2});
    if (o.speculative == "dspark") rep.columns.push_back({"calibration_error", "calib err", 3});
    rep.columns.push_back({"draft_ms", "draft ms", 3});
    rep.columns.push_back({"verify_ms", "verify ms", 2});
    rep.columns.push_back({"verify_pct_bandwidth", "verify % bw", 1});
  }
  if (o.prompts != "random" && o.prompts != "repeat") fail("--prompts must be random or repeat, got '", o.prompts, "'");
  // The machine is shared and its bandwidth drifts: each row is compared with read
  // bandwidth measured right before and right after it, in this run.
  const int threads = rep.meta["threads"].get<int>();
  auto bandwidth = [&] { return measure_read_bandwidth(threads, size_t(512) << 20, 3); };
  ProgressBar bar(o.quiet_progress ? "" : "decode sweep");
  int64_t done_steps = 0;
  const int64_t total_steps = int64_t(o.batch_sizes.size()) * o.output_len;
  const double elem = weight_elem_bytes(o.model);
  engine::FlopsEstimator est(eng.model().config(), elem);
  est.set_streamed_weight_bytes(double(eng.model().weight_bytes() - eng.model().output_weight_bytes()),
                                double(eng.model().output_weight_bytes()));
  if (o.force_accept && !spec) fail("--force-accept needs --speculative ngram or dspark");
  if (o.force_accept) rep.meta["force_accept"] = true;
  for (int64_t b : o.batch_sizes) {
    SamplingParams p;
    p.temperature = 0;
    p.ignore_eos = true;
    p.max_tokens = o.output_len;
    auto add_all = [&] {
      for (int64_t i = 0; i < b; ++i) {
        std::vector<int32_t> ids = synthetic_prompt(o.input_len, i, eng.model().config().vocab_size);
        if (o.prompts == "repeat")
          for (size_t j = 16; j < ids.size(); ++j) ids[j] = ids[j % 16];
        eng.add_request("d" + std::to_string(i), ids, p);
      }
    };
    if (o.force_accept) {
      // The greedy continuations, then the measured pass drafts exactly them.
      eng.set_forced_drafts({});
      add_all();
      std::map<std::vector<int32_t>, std::vector<int32_t>> forced;
      while (eng.has_unfinished())
        for (const RequestOutput& out : eng.step())
          if (out.finished) forced[out.prompt_token_ids] = out.outputs[0].token_ids;
      eng.set_forced_drafts(std::move(forced));
    }
    add_all();
    // Prefill until every sequence has its first token; then each step is a pure decode
    // of b sequences until they all finish together.
    const double bw_before = bandwidth();
    std::map<std::string, bool> started;
    while (int64_t(started.size()) < b && eng.has_unfinished())
      for (const RequestOutput& out : eng.step())
        if (!out.outputs.empty() && !out.outputs[0].token_ids.empty()) started[out.request_id] = true;
    std::vector<double> step_s, exec_s;
    const double draft0 = eng.draft_seconds();
    int64_t spec_steps = 0, spec_accepted = 0, spec_drafted = 0;
    std::vector<double> calib_conf(10, 0.0);
    std::vector<int64_t> calib_n(10, 0), calib_acc(10, 0);
    while (eng.has_unfinished()) {
      auto t0 = std::chrono::steady_clock::now();
      const double e0 = eng.executor_seconds();
      for (const RequestOutput& out : eng.step())
        if (out.finished) {
          const RequestMetrics& m = out.metrics;
          spec_steps += m.spec_steps, spec_accepted += m.spec_accepted, spec_drafted += m.spec_drafted;
          for (size_t k = 0; k < m.spec_calib_n.size() && k < 10; ++k) {
            calib_n[k] += m.spec_calib_n[k];
            calib_conf[k] += m.spec_calib_conf[k];
            calib_acc[k] += m.spec_calib_accepted[k];
          }
        }
      step_s.push_back(seconds(t0, std::chrono::steady_clock::now()));
      exec_s.push_back(eng.executor_seconds() - e0);
      bar.update(uint64_t(++done_steps), uint64_t(total_steps), "batch " + std::to_string(b));
    }
    if (spec) {
      double wall = 0, exec = 0;
      for (size_t k = 0; k < step_s.size(); ++k) wall += step_s[k], exec += exec_s[k];
      const double n = double(step_s.size()), draft = eng.draft_seconds() - draft0;
      const double tokens = double(b) * double(o.output_len - 1);  // the first came with the prompt
      ordered_json row;
      row["batch_size"] = b;
      row["steps_measured"] = int64_t(step_s.size());
      row["step_ms_p50"] = percentile(step_s, 0.5) * 1e3;
      row["step_ms_p90"] = percentile(step_s, 0.9) * 1e3;
      row["tokens_per_s"] = tokens / wall;
      row["tokens_per_s_per_user"] = tokens / wall / double(b);
      // Bytes and FLOPs as for one decode token per sequence and step (the weights, read
      // once per step, dominate at small batch); drafts verified add rows, not weights.
      double bytes = 0, flops = 0;
      for (size_t k = 0; k < step_s.size(); ++k) {
        const engine::StepCost c = est.decode_step(b, o.input_len + int64_t(k));
        bytes += c.total_bytes();
        flops += c.flops;
      }
      const double bw = 0.5 * (bw_before + bandwidth());
      row["gb_per_s"] = bytes / wall / 1e9;
      row["read_gb_per_s"] = bw;
      row["pct_bandwidth"] = 100.0 * bytes / wall / 1e9 / bw;
      row["gflop_per_s"] = flops / wall / 1e9;
      row["exposed_host_ms"] = std::max(0.0, wall - exec) / n * 1e3;
      row["mean_acceptance_length"] = spec_steps ? double(spec_steps + spec_accepted) / double(spec_steps) : 1.0;
      row["spec_steps"] = spec_steps;
      row["spec_accepted"] = spec_accepted;
      row["drafts_per_step"] = spec_steps ? double(spec_drafted) / double(spec_steps) : 0.0;
      if (o.speculative == "dspark") {
        // Expected calibration error over confidence deciles: sum |conf - accepted| / reached drafts.
        int64_t reached = 0;
        double gap = 0;
        for (size_t k = 0; k < 10; ++k) reached += calib_n[k], gap += std::fabs(calib_conf[k] - double(calib_acc[k]));
        row["calibration_error"] = reached ? gap / double(reached) : 0.0;
        row["drafts_reached"] = reached;
      }
      row["draft_ms"] = draft / n * 1e3;
      row["verify_ms"] = (exec - draft) / n * 1e3;
      // What the verifying forward reads: every sequence's 1 + drafts rows at once, so a
      // MoE model's experts are those any of the rows routes to (the estimator's expected
      // count for independent routing), against the read bandwidth.
      {
        const int64_t rows = 1 + int64_t(std::llround(row["drafts_per_step"].get<double>()));
        double vbytes = 0;
        for (size_t k = 0; k < step_s.size(); ++k) {
          engine::StepShape shape;
          shape.seqs.assign(size_t(b), engine::StepShape::Seq{rows, o.input_len + int64_t(k), true});
          vbytes += est.step(shape).total_bytes();
        }
        row["verify_gb_per_step"] = vbytes / n / 1e9;
        row["verify_pct_bandwidth"] = exec > draft ? 100.0 * vbytes / (exec - draft) / 1e9 / bw : 0.0;
      }
      rep.rows.push_back(row);
      continue;
    }
    const double bw = 0.5 * (bw_before + bandwidth());
    // Steady-state window: drop warm-up and tail steps.
    const size_t n = step_s.size();
    const size_t cut = std::min(n / 3, size_t(std::ceil(double(n) * o.trim)));
    double secs = 0, bytes = 0, flops = 0, exec = 0;
    std::vector<double> window;
    for (size_t k = cut; k < n - cut; ++k) {
      // Decode step k computes position input_len + k for every sequence.
      const engine::StepCost c = est.decode_step(b, o.input_len + int64_t(k));
      secs += step_s[k];
      exec += exec_s[k];
      bytes += c.total_bytes();
      flops += c.flops;
      window.push_back(step_s[k]);
    }
    ordered_json row;
    row["batch_size"] = b;
    row["steps_measured"] = int64_t(window.size());
    row["step_ms_p50"] = percentile(window, 0.5) * 1e3;
    row["step_ms_p90"] = percentile(window, 0.9) * 1e3;
    row["tokens_per_s"] = double(b) * double(window.size()) / secs;
    row["tokens_per_s_per_user"] = double(window.size()) / secs;
    row["gb_per_s"] = bytes / secs / 1e9;
    row["read_gb_per_s"] = bw;
    row["pct_bandwidth"] = 100.0 * bytes / secs / 1e9 / bw;
    row["gflop_per_s"] = flops / secs / 1e9;
    row["pct_compute_peak"] = 100.0 * flops / secs / 1e9 / compute_peak(roofline, eng.model());
    // Host time per step the executor did not overlap: the wall time of the window minus
    // the executor's own time (steps are back to back, so the rest is scheduling,
    // sampling bookkeeping and output processing it waited for).
    row["exposed_host_ms"] = std::max(0.0, secs - exec) / double(window.size()) * 1e3;
    rep.rows.push_back(row);
  }
  bar.finish();
  return rep;
}

Report run_prefill_bench(const PrefillOptions& o, const Roofline& roofline) {
  if (o.lengths.empty()) fail("--lengths is empty");
  for (int64_t l : o.lengths)
    if (l < 1) fail("prompt lengths must be >= 1, got ", l);
  if (o.repeats < 1) fail("--repeats must be >= 1");
  const int64_t max_len = *std::max_element(o.lengths.begin(), o.lengths.end());
  engine::Engine eng([&] {
    EngineArgs a = engine_args(o, 1, max_len + 1, max_len);
    a.enable_prefix_caching = 0;  // each length runs --repeats times: all computed
    return a;
  }());
  const double elem = weight_elem_bytes(o.model);
  engine::FlopsEstimator est(eng.model().config(), elem);
  est.set_streamed_weight_bytes(double(eng.model().weight_bytes() - eng.model().output_weight_bytes()),
                                double(eng.model().output_weight_bytes()));
  const double peak = compute_peak(roofline, eng.model());
  Report rep;
  rep.bench = "prefill";
  rep.meta = make_meta(o.model, eng.args().threads > 0 ? eng.args().threads : usable_cpus(), roofline);
  rep.meta["compute_peak_gflop_per_s"] = peak;
  if (eng.model().weight_bytes_by_format().count("bf16"))
    rep.meta["bf16_gemm"] = kernels::bf16_gemm_name(kernels::bf16_gemm_choice());
  rep.meta["weight_bytes_per_element"] = elem;
  weight_meta(rep, eng);
  rep.columns = {{"prompt_len", "prompt", 0},  {"seconds", "seconds", 3},         {"tokens_per_s", "tok/s", 1},
                 {"gflop_per_s", "GFLOP/s", 1}, {"pct_compute_peak", "% peak", 1}};
  ProgressBar bar(o.quiet_progress ? "" : "prefill");
  int64_t done = 0;
  for (int64_t len : o.lengths) {
    std::vector<double> times;
    SamplingParams p;
    p.temperature = 0;
    p.max_tokens = 1;
    for (int r = 0; r < o.repeats; ++r) {
      eng.add_request("p", synthetic_prompt(len, r, eng.model().config().vocab_size), p);
      auto t0 = std::chrono::steady_clock::now();
      while (eng.has_unfinished()) eng.step();  // one step: the whole prompt fits the budget
      times.push_back(seconds(t0, std::chrono::steady_clock::now()));
      bar.update(uint64_t(++done), uint64_t(o.lengths.size()) * uint64_t(o.repeats), "length " + std::to_string(len));
    }
    const double t = percentile(times, 0.5);
    const engine::StepCost c = est.prefill(len);
    ordered_json row;
    row["prompt_len"] = len;
    row["repeats"] = o.repeats;
    row["seconds"] = t;
    row["tokens_per_s"] = double(len) / t;
    row["gflop_per_s"] = c.flops / t / 1e9;
    row["pct_compute_peak"] = 100.0 * c.flops / t / 1e9 / peak;
    rep.rows.push_back(row);
  }
  bar.finish();
  return rep;
}

Report run_throughput_bench(const ThroughputOptions& o, const Roofline& roofline) {
  const bool synthetic = o.dataset.empty();
  if (synthetic && (o.num_prompts < 1 || o.input_len < 1 || o.output_len < 1))
    fail("throughput bench needs --num-prompts, --input-len and --output-len >= 1");
  if (!synthetic && (o.shared_prefix_len > 0 || o.turns > 1))
    fail("--shared-prefix-len and --turns shape synthetic requests; a --dataset brings its own prompts");
  if (o.shared_prefix_len < 0 || o.turns < 1) fail("--shared-prefix-len must be >= 0 and --turns >= 1");
  const int64_t convs = synthetic ? o.num_prompts : int64_t(o.dataset.size());
  const int64_t n = convs * o.turns;
  if (synthetic && ((o.input_len_max && o.input_len_max < o.input_len) ||
                    (o.output_len_max && o.output_len_max < o.output_len)))
    fail("--input-len-max / --output-len-max must be at least --input-len / --output-len");
  const int64_t in_max = std::max(o.input_len, o.input_len_max), out_max = std::max(o.output_len, o.output_len_max);
  // Request i's lengths, spread evenly over the ranges in a fixed shuffled order.
  // i -> (i * stride + salt) mod n is a permutation when the stride is coprime with n.
  int64_t stride = std::max<int64_t>(1, int64_t(double(n) * 0.618));
  while (std::gcd(stride, n) != 1) ++stride;
  auto spread = [&](int64_t lo, int64_t hi, int64_t i, int64_t salt) {
    if (hi <= lo || n <= 1) return lo;
    const int64_t k = (i * stride + salt) % n;
    return lo + (hi - lo) * k / (n - 1);
  };
  // The longest prompt: the shared prefix, then every turn's message and recorded answer.
  const int64_t longest = o.shared_prefix_len + o.turns * in_max + (o.turns - 1) * out_max + out_max;
  std::unique_ptr<Collective> solo;
  Collective& group = o.group ? *o.group : *(solo = single_rank());
  const int rank = group.rank(), ranks = group.size();
  // Each rank's conversations: by the tokens they queue (all turns' prompts and outputs).
  std::vector<int64_t> cost(size_t(convs), 0);
  for (int64_t c = 0; c < convs; ++c)
    for (int64_t t = 0; t < o.turns; ++t) {
      const int64_t i = c * o.turns + t;
      cost[size_t(c)] += synthetic ? o.shared_prefix_len + spread(o.input_len, in_max, i, 3) + spread(o.output_len, out_max, i, 7)
                                   : int64_t(o.dataset[size_t(c)].first.size() / 4) + o.dataset[size_t(c)].second.max_tokens;
    }
  const std::vector<int> owner = parallel::assign_by_tokens(cost, ranks);
  int64_t mine_convs = 0;
  for (int64_t c = 0; c < convs; ++c) mine_convs += owner[size_t(c)] == rank;
  engine::Engine eng([&] {
    EngineArgs a = engine_args(o, o.max_num_seqs > 0 ? o.max_num_seqs : std::min<int64_t>(std::max<int64_t>(1, mine_convs), 256),
                               synthetic ? longest : 0, 2048);
    if (!synthetic) a.max_model_len = 0;  // the dataset decides; the model's context applies
    if (!synthetic && o.kv_cache_memory == 0) a.kv_cache_memory = 0;
    if (ranks > 1 && !a.prefix_cache_dir.empty()) a.prefix_cache_dir += "/rank" + std::to_string(rank);  // its own blocks
    a.expert_parallel = o.expert_parallel;
    a.ep_redundant_experts = o.ep_redundant_experts;
    a.eplb_interval = o.eplb_interval;
    a.eplb_window = o.eplb_window;
    return a;
  }(), o.group);
  eng.set_streaming(false);  // only finished requests are measured
  const int64_t vocab = eng.model().config().vocab_size;
  const std::vector<int32_t> shared = synthetic_prompt(o.shared_prefix_len, -1000003, vocab);
  std::vector<std::vector<int32_t>> history(size_t(synthetic ? convs : 0));  // each conversation's prompt so far
  auto submit = [&](int64_t c, int64_t turn) {  // request c * turns + turn
    const int64_t i = c * o.turns + turn;
    if (!synthetic) {
      eng.add_request("t" + std::to_string(i), o.dataset[size_t(c)].first, o.dataset[size_t(c)].second);
      return;
    }
    SamplingParams p;
    p.temperature = 0;
    p.ignore_eos = true;
    p.max_tokens = spread(o.output_len, out_max, i, 7);
    std::vector<int32_t>& h = history[size_t(c)];
    if (turn == 0) h = shared;
    else {  // the previous turn's recorded answer
      const auto answer = synthetic_prompt(spread(o.output_len, out_max, i - 1, 7), 1000000 + i, vocab);
      h.insert(h.end(), answer.begin(), answer.end());
    }
    const auto message = synthetic_prompt(spread(o.input_len, in_max, i, 3), i, vocab);
    h.insert(h.end(), message.begin(), message.end());
    eng.add_request("t" + std::to_string(i), h, p);
  };
  const auto t0 = std::chrono::steady_clock::now();
  for (int64_t c = 0; c < convs; ++c)
    if (owner[size_t(c)] == rank) submit(c, 0);
  std::vector<double> ttft, tpot, e2e;
  uint64_t prompt_tokens = 0, output_tokens = 0, cached_tokens = 0;
  ProgressBar bar(o.quiet_progress || rank > 0 ? "" : "throughput");
  int64_t done = 0;
  const int64_t n_mine = mine_convs * o.turns;
  while (group.any(eng.has_unfinished())) {
    for (const RequestOutput& out : eng.step()) {
      if (!out.finished) continue;
      ++done;
      prompt_tokens += out.prompt_token_ids.size();
      const RequestMetrics& m = out.metrics;
      cached_tokens += uint64_t(m.cached_tokens);
      size_t outs = 0;
      for (const auto& c : out.outputs) outs += c.token_ids.size();
      output_tokens += outs;
      ttft.push_back(m.first_token_time - m.arrival_time);
      e2e.push_back(m.finished_time - m.arrival_time);
      const size_t n0 = out.outputs.at(0).token_ids.size();
      if (n0 > 1) tpot.push_back((m.finished_time - m.first_token_time) / double(n0 - 1));
      const int64_t i = std::stoll(out.request_id.substr(1));
      if (o.turns > 1 && i % o.turns + 1 < o.turns) submit(i / o.turns, i % o.turns + 1);  // the next turn
    }
    bar.update(uint64_t(done), uint64_t(ranks > 1 ? n_mine : n), "requests");
  }
  bar.finish();
  double secs = seconds(t0, std::chrono::steady_clock::now());
  // The job: the slowest rank's time, every rank's tokens and latencies.
  const nlohmann::json ep = parallel::expert_parallel_report(eng.expert_parallel(), group);
  int64_t steps = eng.num_steps();
  double exec_secs = eng.executor_seconds();
  if (ranks > 1) {
    int64_t sums[3] = {int64_t(prompt_tokens), int64_t(output_tokens), int64_t(cached_tokens)};
    group.all_reduce_sum(sums, 3);
    prompt_tokens = uint64_t(sums[0]), output_tokens = uint64_t(sums[1]), cached_tokens = uint64_t(sums[2]);
    double mx[3] = {secs, double(steps), -exec_secs};  // the least executor time: the most exposed host time
    group.all_reduce_max(mx, 3);
    secs = mx[0], steps = int64_t(mx[1]), exec_secs = -mx[2];
    const std::vector<std::string> parts = group.gather(nlohmann::json{{"ttft", ttft}, {"tpot", tpot}, {"e2e", e2e}}.dump());
    if (rank != 0) return Report{};
    ttft.clear(), tpot.clear(), e2e.clear();
    for (const std::string& p : parts) {
      const auto j = nlohmann::json::parse(p);
      for (auto [k, v] : {std::pair{"ttft", &ttft}, std::pair{"tpot", &tpot}, std::pair{"e2e", &e2e}})
        for (double x : j[k]) v->push_back(x);
    }
  }
  Report rep;
  rep.bench = "throughput";
  rep.meta = make_meta(o.model, eng.args().threads > 0 ? eng.args().threads : usable_cpus(), roofline);
  rep.meta["async_scheduling"] = o.async_scheduling;
  rep.meta["quantize"] = o.quantize.empty() ? "none" : o.quantize;
  weight_meta(rep, eng);
  const engine::PrefixCacheStats& pc = eng.scheduler().prefix_stats();
  const bool caching = eng.scheduler().config().prefix_caching;
  rep.meta["prefix_caching"] = caching;
  if (caching) rep.meta["prefix_wait_steps"] = eng.scheduler().config().prefix_wait_steps;
  if (caching) rep.meta["prefix_state_snapshots"] = eng.scheduler().config().num_snapshots;
  if (synthetic) {
    rep.meta["shared_prefix_len"] = o.shared_prefix_len;
    rep.meta["turns"] = o.turns;
  }
  rep.columns = {{"requests", "requests", 0},          {"requests_per_s", "req/s", 2},
                 {"output_tokens_per_s", "out tok/s", 1}, {"total_tokens_per_s", "total tok/s", 1},
                 {"ttft_ms_p50", "TTFT p50 ms", 1},     {"ttft_ms_p90", "TTFT p90 ms", 1},
                 {"tpot_ms_p50", "TPOT p50 ms", 2},     {"tpot_ms_p90", "TPOT p90 ms", 2},
                 {"exposed_host_ms_per_step", "host ms/step", 3}};
  if (caching)
    rep.columns.insert(rep.columns.end(), {{"prefix_hit_rate", "hit rate", 3},
                                           {"cached_tokens", "cached tok", 0},
                                           {"prefix_evictions", "evictions", 0},
                                           {"prefix_cache_us_per_admission", "cache us/adm", 1}});
  ordered_json row;
  row["requests"] = n;
  row["seconds"] = secs;
  row["prompt_tokens"] = prompt_tokens;
  row["output_tokens"] = output_tokens;
  row["requests_per_s"] = double(n) / secs;
  row["steps"] = steps;
  row["exposed_host_ms_per_step"] = std::max(0.0, secs - exec_secs) / double(std::max<int64_t>(1, steps)) * 1e3;
  row["output_tokens_per_s"] = double(output_tokens) / secs;
  row["total_tokens_per_s"] = double(prompt_tokens + output_tokens) / secs;
  for (auto [name, v] : {std::pair{"ttft", &ttft}, std::pair{"tpot", &tpot}, std::pair{"e2e", &e2e}})
    for (auto [q, qn] : {std::pair{0.5, "p50"}, std::pair{0.9, "p90"}, std::pair{0.99, "p99"}})
      row[std::string(name) + "_ms_" + qn] = percentile(*v, q) * 1e3;
  if (caching) {
    // Hit rate over the positions admissions would otherwise have computed (preempted
    // sequences' re-admissions included); cached_tokens: prompt positions the requests'
    // first admissions took from the cache.
    row["prefix_hit_rate"] = pc.queried_tokens ? double(pc.hit_tokens) / double(pc.queried_tokens) : 0.0;
    row["prefix_hit_tokens"] = pc.hit_tokens;
    row["prefix_queried_tokens"] = pc.queried_tokens;
    row["cached_tokens"] = cached_tokens;
    row["prefix_evictions"] = eng.block_manager().counters().evictions;
    row["prefix_admissions_hit"] = pc.admissions_hit;
    row["prefix_admission_waits"] = pc.admission_waits;  // steps requests waited for a block being computed
    row["prefix_replayed_tokens"] = pc.replayed_tokens;   // cached positions recomputed to rebuild state
    row["prefix_snapshot_restores"] = pc.snapshot_restores;  // hits that copied a saved state instead
    // Host time of the cache: lookups (hashing the prompt's blocks, matching them) per
    // admission, and lookups plus registration of written blocks as a share of the run.
    row["prefix_cache_us_per_admission"] = pc.admissions ? pc.lookup_seconds / double(pc.admissions) * 1e6 : 0.0;
    row["prefix_cache_ms_total"] = (pc.lookup_seconds + pc.register_seconds) * 1e3;
    row["prefix_cache_share_of_time"] = (pc.lookup_seconds + pc.register_seconds) / secs;
    if (cache::DiskTier* disk = eng.disk_tier()) {
      const cache::DiskTierStats ds = disk->stats();
      row["disk_hit_blocks"] = pc.disk_hit_blocks;
      row["disk_writes"] = ds.writes;
      row["disk_write_bytes"] = ds.write_bytes;
      row["disk_files"] = ds.files;
      row["disk_corrupt"] = ds.corrupt;
      rep.columns.push_back({"disk_hit_blocks", "disk hits", 0});
    }
  }
  if (ranks > 1) {
    rep.meta["ranks"] = ranks;
    rep.meta["expert_parallel"] = !ep.is_null();
    row["ranks"] = ranks;
    rep.columns.insert(rep.columns.begin() + 1, {"ranks", "ranks", 0});
  }
  if (!ep.is_null()) {
    for (auto it = ep.begin(); it != ep.end(); ++it) row["ep_" + it.key()] = it.value();
    rep.meta["ep_redundant_experts"] = o.ep_redundant_experts;
    rep.meta["eplb_interval"] = o.eplb_interval;
    rep.columns.insert(rep.columns.end(), {{"ep_rank_load_max_over_mean", "rank load max/mean", 3},
                                           {"ep_rank_load_max_over_mean_recent", "since EPLB", 3},
                                           {"ep_bytes_per_step_per_rank", "a2a B/step/rank", 0},
                                           {"ep_all_to_all_ms_per_layer", "a2a ms/layer", 3}});
  }
  rep.rows.push_back(row);
  return rep;
}

}  // namespace gannet::bench
