#include <map>
#include <mutex>

#include "core/error.h"
#include "model/model.h"

namespace gannet::model {

namespace {
std::map<std::string, ModelFactory>& registry() {
  static std::map<std::string, ModelFactory> r;
  return r;
}
std::mutex& registry_mutex() {
  static std::mutex m;
  return m;
}
void register_builtin_models();
std::once_flag g_builtin_once;
}  // namespace

std::vector<float> Model::encode_image(const float*, int64_t, int64_t, ThreadPool*) const {
  fail("this model takes no images (its checkpoint has no vision tower)");
}

void register_model(const std::string& architecture, ModelFactory factory) {
  std::lock_guard<std::mutex> lock(registry_mutex());
  registry()[architecture] = std::move(factory);
}

bool is_registered(const std::string& architecture) {
  std::call_once(g_builtin_once, register_builtin_models);
  std::lock_guard<std::mutex> lock(registry_mutex());
  return registry().count(architecture) > 0;
}

std::vector<std::string> registered_architectures() {
  std::call_once(g_builtin_once, register_builtin_models);
  std::lock_guard<std::mutex> lock(registry_mutex());
  std::vector<std::string> out;
  for (auto& [k, v] : registry()) out.push_back(k);
  return out;
}

std::unique_ptr<Model> create_model(const io::ModelConfig& cfg, const io::Checkpoint& ckpt) {
  std::call_once(g_builtin_once, register_builtin_models);
  ModelFactory f;
  {
    std::lock_guard<std::mutex> lock(registry_mutex());
    auto it = registry().find(cfg.architecture);
    if (it != registry().end()) f = it->second;
  }
  if (!f) {
    std::string names;
    for (auto& n : registered_architectures()) names += (names.empty() ? "" : ", ") + n;
    fail(ckpt.dir(), ": architecture '", cfg.architecture, "' is not supported (supported: ", names, ")");
  }
  return f(cfg, ckpt);
}

// Static libraries drop unreferenced registration objects, so built-in models are
// registered explicitly here.
std::unique_ptr<Model> make_dense_decoder(const io::ModelConfig& cfg, const io::Checkpoint& ckpt);
std::unique_ptr<Model> make_deepseek_v41(const io::ModelConfig& cfg, const io::Checkpoint& ckpt);
std::unique_ptr<Model> make_deepseek_v4(const io::ModelConfig& cfg, const io::Checkpoint& ckpt);

namespace {
void register_builtin_models() {
  for (const char* a : {"LlamaForCausalLM", "Qwen2ForCausalLM", "Qwen3ForCausalLM"})
    register_model(a, make_dense_decoder);
  register_model("DeepseekV41ForCausalLM", make_deepseek_v41);
  register_model("DeepseekV41ForConditionalGeneration", make_deepseek_v41);  // the same model, with images
  register_model("DeepseekV4ForCausalLM", make_deepseek_v4);
}
}  // namespace

}  // namespace gannet::model
