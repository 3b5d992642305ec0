#include "model/presets.h"

#include "core/error.h"

namespace gannet::model {

namespace {
// Vocabulary of the DeepSeek V3 tokenizer that generated models carry (128000 BPE tokens,
// 818 added tokens, padded to 129280 as in DeepSeek-V3's config).
constexpr int64_t kVocab = 129280;
}  // namespace

Preset find_preset(const std::string& name) {
  if (name == "tiny") return {"tiny", 64, 128, 2, 4, 2, 16, kVocab, 4096, true, DType::F32};
  if (name == "small") return {"small", 512, 1408, 6, 8, 4, 64, kVocab, 32768, true, DType::BF16};
  if (name == "1b") return {"1b", 2048, 8192, 16, 32, 8, 64, kVocab, 131072, true, DType::BF16};
  fail("unknown preset '", name, "' (expected tiny, small or 1b)");
}

std::string architecture_for(const std::string& arch) {
  if (arch == "llama") return "LlamaForCausalLM";
  if (arch == "qwen2") return "Qwen2ForCausalLM";
  if (arch == "qwen3") return "Qwen3ForCausalLM";
  fail("unknown architecture '", arch, "' (expected llama, qwen2 or qwen3)");
}

}  // namespace gannet::model
