// Golden test: tiny random-weight checkpoints of each dense architecture, written by
// make-model (some with --config-overrides), give the logits at every prompt position and the greedy continuation that
// Hugging Face transformers computed in float32 on CPU (tests/golden/*.json, made by
// tools/make_goldens.py). Tolerance: |ours - ref| <= 5e-5 + 5e-5 * |ref| per logit —
// both sides compute in f32, differing only in summation order (observed: < 4e-6).
// labels: exact
// sanitized build: -O1
#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <nlohmann/json.hpp>

#include "core/thread_pool.h"
#include "cache/cache_engine.h"
#include "engine/engine.h"
#include "io/checkpoint.h"
#include "io/model_config.h"
#include "model/model.h"
#include "model/random_checkpoint.h"
#include "tokenizer/tokenizer.h"
#include "../integration/model_logits.h"

namespace fs = std::filesystem;
using namespace gannet;

namespace {

fs::path source_dir() {
  if (const char* s = std::getenv("GANNET_SOURCE_DIR")) return s;
  return fs::path(__FILE__).parent_path().parent_path().parent_path();
}

void check_golden(const std::string& name) {
  const fs::path golden_path = source_dir() / "tests" / "golden" / (name + ".json");
  ASSERT_TRUE(fs::exists(golden_path)) << golden_path;
  nlohmann::json g = nlohmann::json::parse(io::read_file(golden_path.string()));

  model::RandomCheckpointOptions opt;
  opt.arch = g["make_model"]["arch"];
  opt.preset = g["make_model"]["preset"];
  opt.seed = g["make_model"]["seed"];
  if (g["make_model"].contains("dtype")) {
    const std::string d = g["make_model"]["dtype"];
    if (d == "fp8" || d == "int8") opt.weight_quant = d;  // linears quantized, the rest the preset's
    else opt.dtype_override = int(d == "f16" ? DType::F16 : d == "bf16" ? DType::BF16 : DType::F32);
  }
  if (g["make_model"].contains("config_overrides")) opt.config_overrides = g["make_model"]["config_overrides"].dump();
  const fs::path dir = fs::temp_directory_path() / ("gannet_golden_" + name + "_" + std::to_string(::getpid()));
  fs::remove_all(dir);
  model::write_random_checkpoint(opt, dir.string());

  io::ModelConfig cfg = io::load_model_config(dir.string());
  cfg.exact_activations = g.value("exact_activations", false);
  ASSERT_EQ(cfg.architecture, g["architecture"].get<std::string>());
  io::Checkpoint ckpt(dir.string());
  auto m = model::create_model(cfg, ckpt);
  ThreadPool pool(2);

  const std::vector<int32_t> prompt = g["prompt_ids"].get<std::vector<int32_t>>();
  // Our tokenizer must produce the reference ids for the golden's prompt (BOS + text).
  auto tok = tokenizer::Tokenizer::from_dir(dir.string());
  EXPECT_EQ(tok.encode(g["prompt"].get<std::string>(), /*add_special_tokens=*/true), prompt);
  const std::vector<int32_t> cols = g["logit_columns"].get<std::vector<int32_t>>();
  const int64_t v = cfg.vocab_size;
  std::vector<float> logits = test_support::prompt_logits(*m, prompt, /*chunk=*/5, &pool);  // chunked on purpose
  double worst = 0;
  for (size_t p = 0; p < prompt.size(); ++p) {
    const float* row = logits.data() + p * size_t(v);
    const auto& ref = g["logits"][p];
    for (size_t c = 0; c < cols.size(); ++c) {
      const double r = ref[c].get<double>(), o = row[cols[c]];
      const double err = std::abs(o - r);
      worst = std::max(worst, err);
      ASSERT_LE(err, 5e-5 + 5e-5 * std::abs(r)) << "position " << p << " token " << cols[c];
    }
    double mx = -INFINITY, s = 0;
    for (int64_t i = 0; i < v; ++i) mx = std::max(mx, double(row[i]));
    for (int64_t i = 0; i < v; ++i) s += std::exp(double(row[i]) - mx);
    const double lse = mx + std::log(s), ref_lse = g["logsumexp"][p].get<double>();
    EXPECT_LE(std::abs(lse - ref_lse), 5e-5 + 5e-5 * std::abs(ref_lse)) << "position " << p;
    int32_t am = 0;
    for (int64_t i = 1; i < v; ++i)
      if (row[i] > row[am]) am = int32_t(i);
    EXPECT_EQ(am, g["argmax"][p].get<int32_t>()) << "position " << p;
  }
  // The greedy continuation goes through the whole engine (scheduler, paged cache, sampler).
  EngineArgs ea;
  ea.model = dir.string();
  ea.quiet = true;
  ea.threads = 2;
  ea.kv_cache_memory = 16ull << 20;
  ea.max_num_batched_tokens = 7;
  ea.exact_activations = cfg.exact_activations;
  engine::Engine eng(ea);
  SamplingParams sp;
  sp.temperature = 0;
  sp.ignore_eos = true;
  sp.max_tokens = int64_t(g["greedy_ids"].size());
  eng.add_request("golden", prompt, sp);
  std::vector<int32_t> greedy;
  while (eng.has_unfinished())
    for (const RequestOutput& o : eng.step())
      if (o.finished) greedy = o.outputs[0].token_ids;
  EXPECT_EQ(greedy, g["greedy_ids"].get<std::vector<int32_t>>());
  std::printf("%s: max |logit error| %.3g over %zu positions x %zu columns\n", name.c_str(), worst, prompt.size(),
              cols.size());
  fs::remove_all(dir);
}

}  // namespace

TEST(GoldenDense, LlamaTiny) { check_golden("llama-tiny"); }
TEST(GoldenDense, Qwen2Tiny) { check_golden("qwen2-tiny"); }
TEST(GoldenDense, Qwen3Tiny) { check_golden("qwen3-tiny"); }
// Configurations unlike the presets (tools/make_config_goldens.sh): each field below was
// once misread or never exercised.
TEST(GoldenDense, LlamaMhaHeadDim24LinearRopeF16) { check_golden("cfg-llama-mha-linear"); }
TEST(GoldenDense, LlamaBiasesGeluTanhLlama3RopeParameters) { check_golden("cfg-llama-bias-gelu-tanh"); }
TEST(GoldenDense, Qwen3YarnNoTruncateGeluErf) { check_golden("cfg-qwen3-yarn-notrunc-gelu"); }
TEST(GoldenDense, Qwen2YarnTruncateGeluNew) { check_golden("cfg-qwen2-yarn-trunc-gelu-new"); }
// Quantized linears: transformers dequantizes the FP8 checkpoint itself (q * weight_scale_inv
// per 128x128 block; whole blocks only, see tools/make_config_goldens.sh); the int8 one is dequantized to float32
// by tools/make_goldens.py (q * weight_scale per row) before transformers reads it.
TEST(GoldenDense, LlamaFp8BlockScaled) { check_golden("cfg-llama-fp8"); }
TEST(GoldenDense, Qwen3Int8PerRow) { check_golden("cfg-qwen3-int8"); }
// --exact-activations: the reference fake-quantizes the input of every FP8 linear (FQ8, f32
// scales per 128, tools/make_goldens.py --exact-activations) as the GPU kernel does.
TEST(GoldenDense, LlamaFp8ExactActivations) { check_golden("cfg-llama-fp8-exact"); }
