// The same checkpoint described by different config.json spellings computes the same bits;
// a spelling that changes the rope really changes the logits (nothing is ignored).
// labels: exact sanitize
#include <gtest/gtest.h>
#include <unistd.h>

#include <cstring>
#include <filesystem>

#include "core/thread_pool.h"
#include "io/checkpoint.h"
#include "io/model_config.h"
#include "model/model.h"
#include "model/random_checkpoint.h"
#include "model_logits.h"

namespace fs = std::filesystem;
using namespace gannet;

namespace {

std::vector<float> logits_for(const std::string& arch, const std::string& overrides) {
  static int counter = 0;
  const fs::path dir = fs::temp_directory_path() /
                       ("gannet_cfgvar_" + std::to_string(::getpid()) + "_" + std::to_string(counter++));
  fs::remove_all(dir);
  model::RandomCheckpointOptions o;
  o.arch = arch;
  o.seed = 11;
  o.config_overrides = overrides;
  model::write_random_checkpoint(o, dir.string());
  io::ModelConfig cfg = io::load_model_config(dir.string());
  io::Checkpoint ckpt(dir.string());
  auto m = model::create_model(cfg, ckpt);
  ThreadPool pool(2);
  // 40 positions, so low rope frequencies (where scaling acts) turn visibly.
  std::vector<int32_t> prompt;
  for (int i = 0; i < 40; ++i) prompt.push_back(int32_t((i * 7919 + 13) % 5000));
  auto out = test_support::prompt_logits(*m, prompt, 16, &pool);
  fs::remove_all(dir);
  return out;
}

bool same_bits(const std::vector<float>& a, const std::vector<float>& b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0;
}

}  // namespace

// transformers 5 saves rope_theta and the scaling inside rope_parameters; transformers 4
// saved top-level rope_theta and rope_scaling. Both must give identical bits.
TEST(ConfigVariants, RopeParametersSpellingIsBitIdenticalToLegacy) {
  struct Case {
    const char* arch;
    const char* legacy;
    const char* v5;
  };
  const Case cases[] = {
      {"llama", R"({"rope_theta": 500000.0, "rope_scaling": {"rope_type": "llama3", "factor": 32.0,
          "low_freq_factor": 1.0, "high_freq_factor": 4.0, "original_max_position_embeddings": 8192}})",
       R"({"rope_theta": null, "rope_scaling": null, "rope_parameters": {"rope_type": "llama3",
          "rope_theta": 500000.0, "factor": 32.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0,
          "original_max_position_embeddings": 8192}})"},
      {"qwen3", R"({"rope_theta": 1000000.0})",
       R"({"rope_theta": null, "rope_parameters": {"rope_type": "default", "rope_theta": 1000000.0}})"},
      {"qwen2", R"({"rope_theta": 10000.0, "rope_scaling": {"type": "yarn", "factor": 4.0,
          "original_max_position_embeddings": 1024, "truncate": false}})",
       R"({"rope_theta": null, "rope_scaling": null, "rope_parameters": {"rope_type": "yarn",
          "rope_theta": 10000.0, "factor": 4.0, "original_max_position_embeddings": 1024, "truncate": false}})"},
      {"llama", R"({"rope_theta": 20000.0, "rope_scaling": {"rope_type": "linear", "factor": 3.0}})",
       R"({"rope_theta": null, "rope_scaling": null,
          "rope_parameters": {"rope_type": "linear", "factor": 3.0, "rope_theta": 20000.0}})"},
  };
  for (const Case& c : cases) {
    const auto a = logits_for(c.arch, c.legacy), b = logits_for(c.arch, c.v5);
    EXPECT_TRUE(same_bits(a, b)) << c.arch << " " << c.v5;
  }
  // The control: dropping the rope settings (theta 10000, no scaling) changes the logits,
  // so the comparisons above are not vacuous.
  EXPECT_FALSE(same_bits(logits_for("llama", cases[0].v5), logits_for("llama", R"({"rope_theta": null,
      "rope_scaling": null})")));
  // ... and so does yarn's truncate flag on its own.
  EXPECT_FALSE(same_bits(logits_for("qwen2", cases[2].legacy),
                         logits_for("qwen2", R"({"rope_theta": 10000.0, "rope_scaling": {"type": "yarn",
                             "factor": 4.0, "original_max_position_embeddings": 1024, "truncate": true}})")));
}
