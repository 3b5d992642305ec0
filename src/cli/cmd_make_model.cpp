#include <cstdio>

#include "cli/commands.h"
#include "cli/flags.h"
#include "core/progress_bar.h"
#include "model/deepseek_v41/random_checkpoint.h"
#include "model/deepseek_v4/tensor_plan.h"
#include "model/presets.h"
#include "model/random_checkpoint.h"

namespace gannet::cli {

namespace {
const char* kMakeModelUsage =
    "usage: gannet make-model --arch llama|qwen2|qwen3|deepseek_v4|deepseek_v41 --preset tiny|small|1b --out DIR\n"
    "                         [--seed N] [--dtype f32|bf16|f16|fp8|int8] [--shard-size BYTES]\n"
    "                         [--config-overrides JSON]\n"
    "\n"
    "Writes a checkpoint with random weights in the Hugging Face layout. The same flags give\n"
    "byte-identical files. The weights are random: generated text is noise.\n"
    "--dtype fp8 quantizes the linear layers to FP8 E4M3 with 128x128 f32 block scales\n"
    "(Hugging Face fine-grained FP8), --dtype int8 to int8 with one scale per row\n"
    "(compressed-tensors); embeddings and norms keep the preset's float type.\n"
    "--config-overrides takes a JSON object merged into the preset's config.json (null\n"
    "removes a key); the tensors follow the merged config, e.g.\n"
    "  --config-overrides '{\"head_dim\": 48, \"hidden_act\": \"gelu\", \"mlp_bias\": true}'\n"
    "\n"
    "--arch deepseek_v41 --preset tiny|small writes DeepSeek-V4.1 in its released formats (FP8\n"
    "linears with E8M0 32x32 scales, MXFP4 experts, FP8 Engram table; tiny = the spec's test\n"
    "config, small = ~1.3 B parameters for benchmarks), without a tokenizer: prompts are token\n"
    "ids. --config-overrides then applies to text_config; --dtype and --shard-size do not apply.\n"
    "--router-skew S (deepseek_v41) raises the routers' selection bias of expert e by S * (E-1-e)/(E-1):\n"
    "a skewed workload for expert load balancing (EPLB).\n"
    "--arch deepseek_v4 --preset tiny|small writes DeepSeek-V4-Flash the same way (FP8 linears with\n"
    "E8M0 128x128 scales, MXFP4 experts, I64 hash-routing tables; no mtp.* drafter).\n";
}  // namespace

int cmd_make_model(const Args& args) {
  Flags f(args, {"arch", "preset", "seed", "out", "dtype", "shard-size", "config-overrides", "router-skew"}, {"help"});
  if (f.has("help")) {
    std::fputs(kMakeModelUsage, stdout);
    return 0;
  }
  model::RandomCheckpointOptions opt;
  opt.arch = f.require("arch");
  if (opt.arch == "deepseek_v4") {
    for (const char* flag : {"dtype", "shard-size", "router-skew"})
      if (f.has(flag)) throw UsageError(std::string("--") + flag + " does not apply to deepseek_v4 (its formats are the released ones)");
    const std::string preset = f.get_or("preset", "tiny");
    if (preset != "tiny" && preset != "small")
      throw UsageError("--preset must be tiny or small for deepseek_v4, got '" + preset + "'");
    const int64_t seed = f.get_int("seed", 0);
    if (seed < 0) throw UsageError("--seed must be >= 0");
    const std::string out = f.require("out");
    ProgressBar bar("writing " + out, /*unit_bytes=*/true);
    model::deepseek_v4::write_random_deepseek_v4(preset, uint64_t(seed), f.get_or("config-overrides", ""), out,
                                                 [&](uint64_t done, uint64_t total) { bar.update(done, total); });
    bar.finish();
    std::fprintf(stderr, "wrote %s (DeepseekV4ForCausalLM, preset %s, seed %lld)\n", out.c_str(), preset.c_str(),
                 (long long)seed);
    return 0;
  }
  if (opt.arch == "deepseek_v41") {
    if (f.has("dtype")) throw UsageError("--dtype does not apply to deepseek_v41 (its formats are the released ones)");
    if (f.has("shard-size")) throw UsageError("--shard-size does not apply to deepseek_v41");
    const std::string preset = f.get_or("preset", "tiny");
    if (preset != "tiny" && preset != "small")
      throw UsageError("--preset must be tiny or small for deepseek_v41, got '" + preset + "'");
    const int64_t seed = f.get_int("seed", 0);
    if (seed < 0) throw UsageError("--seed must be >= 0");
    const double skew = f.get_double("router-skew", 0.0);
    if (!(skew >= 0 && skew <= 100)) throw UsageError("--router-skew must be in [0, 100]");
    const std::string out = f.require("out");
    ProgressBar bar("writing " + out, /*unit_bytes=*/true);
    model::deepseek_v41::write_random_deepseek_v41(preset, uint64_t(seed), f.get_or("config-overrides", ""), out,
                                                   [&](uint64_t done, uint64_t total) { bar.update(done, total); },
                                                   float(skew));
    bar.finish();
    std::fprintf(stderr, "wrote %s (DeepseekV41ForCausalLM, preset %s, seed %lld)\n", out.c_str(), preset.c_str(),
                 (long long)seed);
    return 0;
  }
  if (f.has("router-skew")) throw UsageError("--router-skew applies to --arch deepseek_v41 (the MoE preset)");
  opt.preset = f.get_or("preset", "tiny");
  int64_t seed = f.get_int("seed", 0);
  if (seed < 0) throw UsageError("--seed must be >= 0");
  opt.seed = uint64_t(seed);
  try {
    model::architecture_for(opt.arch);
    model::find_preset(opt.preset);
  } catch (const Error& e) {
    throw UsageError(e.what());
  }
  if (auto d = f.get("dtype")) {
    if (*d == "f32") opt.dtype_override = int(DType::F32);
    else if (*d == "bf16") opt.dtype_override = int(DType::BF16);
    else if (*d == "f16") opt.dtype_override = int(DType::F16);
    else if (*d == "fp8" || *d == "int8") opt.weight_quant = *d;  // the rest keeps the preset's dtype
    else throw UsageError("--dtype must be f32, bf16, f16, fp8 or int8, got '" + *d + "'");
  }
  int64_t shard = f.get_int("shard-size", 0);
  if (shard < 0) throw UsageError("--shard-size must be >= 0");
  opt.shard_bytes = uint64_t(shard);
  opt.config_overrides = f.get_or("config-overrides", "");
  std::string out = f.require("out");
  ProgressBar bar("writing " + out, /*unit_bytes=*/true);
  model::write_random_checkpoint(opt, out, [&](uint64_t done, uint64_t total) { bar.update(done, total); });
  bar.finish();
  std::fprintf(stderr, "wrote %s (%s, preset %s, seed %lld)\n", out.c_str(), model::architecture_for(opt.arch).c_str(),
               opt.preset.c_str(), (long long)seed);
  return 0;
}

}  // namespace gannet::cli
