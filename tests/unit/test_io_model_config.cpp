// config.json fields that change the forward pass (docs/config-fields.md): each is
// honoured as transformers 5 reads it, or refused with an error naming the field.
#include <gtest/gtest.h>

#include <string>

#include "core/error.h"
#include "io/model_config.h"

using namespace gannet;
using Kind = io::RopeScaling::Kind;

namespace {

// A small Llama/Qwen config with `extra` spliced in (a JSON fragment starting with ',').
std::string cfg(const std::string& extra, const std::string& arch = "LlamaForCausalLM") {
  return R"({"architectures":[")" + arch +
         R"("],"hidden_size":64,"intermediate_size":128,"num_hidden_layers":4,"num_attention_heads":4,)"
         R"("num_key_value_heads":2,"vocab_size":100,"max_position_embeddings":4096)" +
         extra + "}";
}

io::ModelConfig parse(const std::string& extra, const std::string& arch = "LlamaForCausalLM") {
  return io::parse_model_config(cfg(extra, arch), "config.json");
}

std::string error_of(const std::string& extra, const std::string& arch = "LlamaForCausalLM") {
  try {
    parse(extra, arch);
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

#define EXPECT_ERROR_HAS(extra, arch, ...)                            \
  do {                                                                 \
    const std::string m = error_of(extra, arch);                       \
    EXPECT_FALSE(m.empty()) << "accepted: " << extra;                  \
    for (const char* want : {__VA_ARGS__}) EXPECT_NE(m.find(want), std::string::npos) << m; \
  } while (0)

bool same_rope(const io::ModelConfig& a, const io::ModelConfig& b) {
  const io::RopeScaling &x = a.rope_scaling, &y = b.rope_scaling;
  return a.rope_theta == b.rope_theta && x.kind == y.kind && x.factor == y.factor &&
         x.low_freq_factor == y.low_freq_factor && x.high_freq_factor == y.high_freq_factor &&
         x.original_max_position_embeddings == y.original_max_position_embeddings && x.beta_fast == y.beta_fast &&
         x.beta_slow == y.beta_slow && x.mscale == y.mscale && x.mscale_all_dim == y.mscale_all_dim &&
         x.attention_factor == y.attention_factor && x.truncate == y.truncate;
}

}  // namespace

// transformers 5 writes rope_theta inside rope_parameters and no top-level key: the theta
// must come from there (it used to fall back to 10000 silently).
TEST(ModelConfigRope, RopeParametersGiveThetaAndScaling) {
  auto c = parse(R"(,"rope_parameters":{"rope_type":"llama3","rope_theta":500000.0,"factor":32.0,)"
                 R"("low_freq_factor":1.0,"high_freq_factor":4.0,"original_max_position_embeddings":8192})");
  EXPECT_EQ(c.rope_theta, 500000.0);
  EXPECT_EQ(c.rope_scaling.kind, Kind::kLlama3);
  EXPECT_EQ(c.rope_scaling.factor, 32.0);
  EXPECT_EQ(c.rope_scaling.original_max_position_embeddings, 8192);
  EXPECT_EQ(c.rope_source, "rope_parameters");
  auto legacy = parse(R"(,"rope_theta":500000.0,"rope_scaling":{"rope_type":"llama3","factor":32.0,)"
                      R"("low_freq_factor":1.0,"high_freq_factor":4.0,"original_max_position_embeddings":8192})");
  EXPECT_TRUE(same_rope(c, legacy));
  EXPECT_EQ(legacy.rope_source, "rope_scaling");
  // Default rope in the new spelling.
  auto d = parse(R"(,"rope_parameters":{"rope_type":"default","rope_theta":1000000.0})");
  EXPECT_EQ(d.rope_theta, 1000000.0);
  EXPECT_EQ(d.rope_scaling.kind, Kind::kNone);
  EXPECT_EQ(parse("").rope_theta, 10000.0);
  EXPECT_EQ(parse("").rope_source, "default");
  // "type" is the old name of "rope_type".
  EXPECT_EQ(parse(R"(,"rope_scaling":{"type":"linear","factor":2.0})").rope_scaling.kind, Kind::kLinear);
}

TEST(ModelConfigRope, YarnFieldsAndDefaults) {
  auto y = parse(R"(,"rope_parameters":{"rope_type":"yarn","rope_theta":10000.0,"factor":4.0,)"
                 R"("original_max_position_embeddings":1024,"truncate":false,"beta_fast":16,"beta_slow":2,)"
                 R"("mscale":0.707,"mscale_all_dim":1.0})");
  EXPECT_EQ(y.rope_scaling.kind, Kind::kYarn);
  EXPECT_FALSE(y.rope_scaling.truncate);
  EXPECT_EQ(y.rope_scaling.beta_fast, 16.0);
  EXPECT_EQ(y.rope_scaling.beta_slow, 2.0);
  EXPECT_EQ(y.rope_scaling.mscale, 0.707);
  EXPECT_EQ(y.rope_scaling.mscale_all_dim, 1.0);
  EXPECT_EQ(y.rope_scaling.original_max_position_embeddings, 1024);
  // Defaults as transformers: truncate true, betas 32/1 (also for 0), original length =
  // the context, a null factor = context / original length.
  auto d = parse(R"(,"rope_scaling":{"rope_type":"yarn","factor":null,"beta_fast":0})");
  EXPECT_TRUE(d.rope_scaling.truncate);
  EXPECT_EQ(d.rope_scaling.beta_fast, 32.0);
  EXPECT_EQ(d.rope_scaling.beta_slow, 1.0);
  EXPECT_EQ(d.rope_scaling.original_max_position_embeddings, 4096);
  EXPECT_EQ(d.rope_scaling.factor, 1.0);
  auto r = parse(R"(,"rope_scaling":{"rope_type":"yarn","factor":null,"original_max_position_embeddings":1024})");
  EXPECT_EQ(r.rope_scaling.factor, 4.0);
  // A top-level original_max_position_embeddings wins (transformers' Phi-3 rule).
  auto t = parse(R"(,"original_max_position_embeddings":512,)"
                 R"("rope_scaling":{"rope_type":"yarn","factor":2.0,"original_max_position_embeddings":1024})");
  EXPECT_EQ(t.rope_scaling.original_max_position_embeddings, 512);
  // llama3 without an original length takes the context, as transformers does.
  auto l = parse(R"(,"rope_scaling":{"rope_type":"llama3","factor":8.0,"low_freq_factor":1,"high_freq_factor":4})");
  EXPECT_EQ(l.rope_scaling.original_max_position_embeddings, 4096);
}

TEST(ModelConfigRope, RefusesWhatItCannotHonour) {
  const char* L = "LlamaForCausalLM";
  EXPECT_ERROR_HAS(R"(,"rope_scaling":{"rope_type":"dynamic","factor":2.0})", L, "rope_scaling.rope_type", "dynamic");
  EXPECT_ERROR_HAS(R"(,"rope_parameters":{"rope_type":"longrope","factor":2.0})", L, "rope_parameters.rope_type",
                   "longrope");
  EXPECT_ERROR_HAS(R"(,"rope_parameters":{"rope_type":"mrope"})", L, "mrope");
  EXPECT_ERROR_HAS(R"(,"rope_scaling":{"rope_type":"linear"})", L, "rope_scaling.factor");
  EXPECT_ERROR_HAS(R"(,"rope_scaling":{"rope_type":"linear","factor":-1})", L, "factor");
  EXPECT_ERROR_HAS(R"(,"rope_scaling":{"rope_type":"llama3","factor":8.0,"high_freq_factor":4})", L,
                   "low_freq_factor");
  EXPECT_ERROR_HAS(R"(,"rope_scaling":{"rope_type":"yarn"})", L, "rope_scaling.factor");
  EXPECT_ERROR_HAS(R"(,"rope_scaling":{"rope_type":"yarn","factor":2,"truncate":"no"})", L, "rope_scaling.truncate");
  EXPECT_ERROR_HAS(R"(,"rope_scaling":{"rope_type":"yarn","factor":2,"attention_factor":0})", L, "attention_factor");
  EXPECT_ERROR_HAS(R"(,"rope_theta":10000.0,"rope_parameters":{"rope_type":"default","rope_theta":500000.0})", L,
                   "rope_theta", "disagrees");
  EXPECT_ERROR_HAS(R"(,"rope_scaling":{"rope_type":"linear","factor":2.0},)"
                   R"("rope_parameters":{"rope_type":"linear","factor":4.0})", L, "rope_scaling", "rope_parameters");
  EXPECT_ERROR_HAS(R"(,"rope_parameters":{"full_attention":{"rope_type":"default"}})", L, "nested");
  EXPECT_ERROR_HAS(R"(,"partial_rotary_factor":0.5)", L, "partial_rotary_factor", "0.5");
  EXPECT_ERROR_HAS(R"(,"rope_parameters":{"rope_type":"default","partial_rotary_factor":0.25})", L,
                   "partial_rotary_factor");
  EXPECT_ERROR_HAS(R"(,"rope_theta":"big")", L, "rope_theta");
  EXPECT_ERROR_HAS(R"(,"partial_rotary_factor":1e300)", L, "partial_rotary_factor", "(0, 1]");
  EXPECT_EQ(parse(R"(,"partial_rotary_factor":1.0)").head_dim, 16);  // the whole head: fine
  // Agreeing spellings are accepted.
  EXPECT_EQ(parse(R"(,"rope_theta":500000.0,"rope_parameters":{"rope_type":"default","rope_theta":500000.0})")
                .rope_theta,
            500000.0);
}

TEST(ModelConfigFields, HiddenActivation) {
  using A = io::HiddenAct;
  EXPECT_EQ(parse("").activation, A::kSilu);
  EXPECT_EQ(parse(R"(,"hidden_act":"swish")").activation, A::kSilu);
  EXPECT_EQ(parse(R"(,"hidden_act":"gelu")").activation, A::kGeluErf);
  EXPECT_EQ(parse(R"(,"hidden_act":"gelu_pytorch_tanh")").activation, A::kGeluTanh);
  EXPECT_EQ(parse(R"(,"hidden_act":"gelu_new")").activation, A::kGeluTanh);
  EXPECT_EQ(parse(R"(,"hidden_activation":"gelu_pytorch_tanh")").activation, A::kGeluTanh);
  EXPECT_ERROR_HAS(R"(,"hidden_act":"relu")", "LlamaForCausalLM", "hidden_act", "relu");
  EXPECT_ERROR_HAS(R"(,"hidden_act":"gelu_fast")", "LlamaForCausalLM", "gelu_fast");
  EXPECT_ERROR_HAS(R"(,"hidden_act":"silu","hidden_activation":"gelu")", "LlamaForCausalLM", "disagree");
}

TEST(ModelConfigFields, BiasesPerArchitecture) {
  auto l = parse(R"(,"attention_bias":true,"mlp_bias":true)");
  EXPECT_TRUE(l.attention_bias && l.o_proj_bias && l.mlp_bias);
  auto q3 = parse(R"(,"attention_bias":true)", "Qwen3ForCausalLM");
  EXPECT_TRUE(q3.attention_bias && q3.o_proj_bias && q3.qk_norm);
  // Qwen2: q/k/v biases always, never o_proj, whatever attention_bias says.
  auto q2 = parse(R"(,"attention_bias":false)", "Qwen2ForCausalLM");
  EXPECT_TRUE(q2.attention_bias);
  EXPECT_FALSE(q2.o_proj_bias);
  EXPECT_ERROR_HAS(R"(,"mlp_bias":true)", "Qwen2ForCausalLM", "mlp_bias");
  EXPECT_ERROR_HAS(R"(,"mlp_bias":true)", "Qwen3ForCausalLM", "mlp_bias");
  // Parameter count: o_proj bias (64) and MLP biases (128 + 128 + 64) per layer, 4 layers.
  auto base = parse("");
  EXPECT_EQ(parse(R"(,"attention_bias":true)").num_parameters() - base.num_parameters(), 4 * (64 + 32 + 32 + 64));
  EXPECT_EQ(l.num_parameters() - base.num_parameters(), 4 * (64 + 32 + 32 + 64 + 128 + 128 + 64));
}

TEST(ModelConfigFields, HeadDimDefaults) {
  EXPECT_EQ(parse("").head_dim, 16);                         // Llama: hidden / heads
  EXPECT_EQ(parse("", "Qwen2ForCausalLM").head_dim, 16);     // Qwen2: hidden / heads
  EXPECT_EQ(parse("", "Qwen3ForCausalLM").head_dim, 128);    // Qwen3Config's default
  EXPECT_EQ(parse(R"(,"head_dim":24)", "Qwen3ForCausalLM").head_dim, 24);
}

TEST(ModelConfigFields, SlidingWindowOnlyWhenInactive) {
  const char* Q = "Qwen2ForCausalLM";
  // Qwen2.5's shipped configs: the window is off.
  parse(R"(,"use_sliding_window":false,"sliding_window":131072,"max_window_layers":2)", Q);
  parse(R"(,"use_sliding_window":true,"sliding_window":4096,"max_window_layers":4)", Q);  // no layer >= 4
  parse(R"(,"use_sliding_window":true,"sliding_window":null,"max_window_layers":0)", Q);  // window null: off
  parse(R"(,"layer_types":["full_attention","full_attention","full_attention","full_attention"],)"
        R"("use_sliding_window":true)", Q);
  EXPECT_ERROR_HAS(R"(,"use_sliding_window":true,"sliding_window":4096,"max_window_layers":2)", Q,
                   "use_sliding_window", "layer 2", "4096");
  // The default max_window_layers (28) leaves all 4 layers full; 0 makes them all sliding.
  parse(R"(,"use_sliding_window":true)", "Qwen3ForCausalLM");
  EXPECT_ERROR_HAS(R"(,"use_sliding_window":true,"max_window_layers":0)", "Qwen3ForCausalLM", "use_sliding_window",
                   "layer 0");
  EXPECT_ERROR_HAS(R"(,"use_sliding_window":true,"sliding_window":64,)"
                   R"("layer_types":["full_attention","sliding_attention","full_attention","full_attention"])",
                   Q, "layer 1", "layer_types");
  EXPECT_ERROR_HAS(R"(,"layer_types":["full_attention"])", Q, "layer_types", "4");
  EXPECT_ERROR_HAS(R"(,"layer_types":["full_attention","chunked_attention","full_attention","full_attention"])", Q,
                   "layer_types[1]", "chunked_attention");
}

TEST(ModelConfigFields, DtypeAndQuantization) {
  EXPECT_EQ(parse(R"(,"torch_dtype":"bfloat16")").torch_dtype, "bfloat16");
  EXPECT_EQ(parse(R"(,"dtype":"float16")").torch_dtype, "float16");
  EXPECT_ERROR_HAS(R"(,"torch_dtype":"float8_e4m3fn")", "LlamaForCausalLM", "torch_dtype", "float8_e4m3fn");
  EXPECT_ERROR_HAS(R"(,"dtype":"int4")", "LlamaForCausalLM", "'dtype'", "int4");
  using M = io::WeightQuantization::Method;
  EXPECT_EQ(parse("").quantization.method, M::kNone);
  EXPECT_EQ(parse(R"(,"quantization_config":null)").quantization.method, M::kNone);
  // Fine-grained FP8: block size from weight_block_size, 128 by default.
  io::ModelConfig c = parse(R"(,"quantization_config":{"quant_method":"fp8"})");
  EXPECT_EQ(c.quantization.method, M::kFp8Block);
  EXPECT_EQ(c.quantization.block, 128);
  c = parse(R"(,"quantization_config":{"quant_method":"fp8","activation_scheme":"dynamic","fmt":"e4m3",)"
            R"("weight_block_size":[64,64],"modules_to_not_convert":["lm_head"]})");
  EXPECT_EQ(c.quantization.block, 64);
  const char* L = "LlamaForCausalLM";
  EXPECT_ERROR_HAS(R"(,"quantization_config":{"quant_method":"gptq","bits":4})", L, "quant_method", "gptq");
  EXPECT_ERROR_HAS(R"(,"quantization_config":{"bits":4})", L, "quant_method", "missing");
  EXPECT_ERROR_HAS(R"(,"quantization_config":{"quant_method":"fp8","activation_scheme":"static"})", L,
                   "activation_scheme", "static");
  EXPECT_ERROR_HAS(R"(,"quantization_config":{"quant_method":"fp8","fmt":"e5m2"})", L, "fmt", "e5m2");
  EXPECT_ERROR_HAS(R"(,"quantization_config":{"quant_method":"fp8","weight_block_size":[128,64]})", L,
                   "weight_block_size", "square");
  EXPECT_ERROR_HAS(R"(,"quantization_config":{"quant_method":"fp8","weight_block_size":[0,0]})", L,
                   "weight_block_size", "positive");
  EXPECT_ERROR_HAS(R"(,"quantization_config":{"quant_method":"fp8","kv_scheme":"x"})", L, "kv_scheme",
                   "not supported");
  // compressed-tensors: only channel-wise symmetric int8 weights without activation quantization.
  const std::string ct_head =
      R"(,"quantization_config":{"quant_method":"compressed-tensors","format":"int-quantized",)"
      R"("config_groups":{"group_0":{"targets":["Linear"],"weights":{"num_bits":8,"type":"int",)"
      R"("symmetric":true,"strategy":")";
  EXPECT_EQ(parse(ct_head + R"(channel"},"input_activations":null}},"ignore":["lm_head"]})").quantization.method,
            M::kInt8Row);
  EXPECT_ERROR_HAS(ct_head + R"(group","group_size":128}}}})", L, "strategy", "group");
  EXPECT_ERROR_HAS(ct_head + R"(channel"},"input_activations":{"num_bits":8}}}})", L, "input_activations");
  std::string four_bit = ct_head + R"(channel"}}}})";
  four_bit.replace(four_bit.find("\"num_bits\":8"), 12, "\"num_bits\":4");
  EXPECT_ERROR_HAS(four_bit, L, "num_bits", "4");
  EXPECT_ERROR_HAS(R"(,"quantization_config":{"quant_method":"compressed-tensors","format":"float-quantized",)"
                   R"("config_groups":{}})",
                   L, "format", "float-quantized");
}

TEST(ModelConfigFields, QuantizeFlag) {
  using M = io::WeightQuantization::Method;
  EXPECT_EQ(io::parse_quantize_flag(""), M::kNone);
  EXPECT_EQ(io::parse_quantize_flag("none"), M::kNone);
  EXPECT_EQ(io::parse_quantize_flag("fp8"), M::kFp8Block);
  EXPECT_EQ(io::parse_quantize_flag("int8"), M::kInt8Row);
  EXPECT_THROW(io::parse_quantize_flag("q4"), Error);
}

TEST(ModelConfigFields, ContextDefaults) {
  const std::string no_ctx =
      R"({"architectures":["Qwen3ForCausalLM"],"hidden_size":64,"intermediate_size":128,"num_hidden_layers":1,)"
      R"("num_attention_heads":4,"vocab_size":100})";
  EXPECT_EQ(io::parse_model_config(no_ctx, "c").max_position_embeddings, 32768);
  std::string llama = no_ctx;
  llama.replace(llama.find("Qwen3"), 5, "Llama");
  EXPECT_EQ(io::parse_model_config(llama, "c").max_position_embeddings, 2048);
}
