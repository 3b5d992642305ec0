#include <nanobind/stl/optional.h>
#include <nanobind/stl/string.h>
#include <nanobind/stl/vector.h>

#include "core/error.h"
#include "gannet/engine_args.h"
#include "gannet/request_output.h"
#include "gannet/sampling_params.h"
#include "python/bindings.h"

namespace nb = nanobind;

namespace gannet::python {

namespace {

using Kind = StructuredOutput::Kind;

Kind kind_from_name(const std::string& name) {
  for (Kind k : {Kind::kNone, Kind::kJsonSchema, Kind::kRegex, Kind::kGrammar, Kind::kJsonObject})
    if (name == StructuredOutput::kind_name(k)) return k;
  fail("structured output kind must be none, json_schema, regex, grammar or json_object, got '", name, "'");
}

nb::object stop_reason_of(const CompletionOutput& c) {
  if (const auto* s = std::get_if<std::string>(&c.stop_reason)) return nb::str(s->data(), s->size());
  if (const auto* id = std::get_if<int32_t>(&c.stop_reason)) return nb::int_(*id);
  return nb::none();
}

// Text may hold bytes that are not UTF-8 (a token cut in the middle of a character at the
// end of an output): those become U+FFFD, as vLLM's detokeniser shows them.
nb::str text_of(const std::string& s) {
  PyObject* o = PyUnicode_DecodeUTF8(s.data(), Py_ssize_t(s.size()), "replace");
  if (!o) throw nb::python_error();
  return nb::steal<nb::str>(o);
}

}  // namespace

void bind_types(nb::module_& m) {
  nb::class_<StructuredOutput>(m, "StructuredOutput")
      .def(nb::init<>())
      .def_prop_rw(
          "kind", [](const StructuredOutput& s) { return std::string(StructuredOutput::kind_name(s.kind)); },
          [](StructuredOutput& s, const std::string& k) { s.kind = kind_from_name(k); })
      .def_rw("spec", &StructuredOutput::spec)
      .def_rw("trigger", &StructuredOutput::trigger)
      .def_rw("max_whitespace", &StructuredOutput::max_whitespace);

  nb::class_<SamplingParams>(m, "SamplingParams")
      .def(nb::init<>())
      .def(nb::init<const SamplingParams&>())
      .def_ro_static("max_logprobs", &SamplingParams::kMaxLogprobs)
      .def_rw("n", &SamplingParams::n)
      .def_rw("max_tokens", &SamplingParams::max_tokens)
      .def_rw("min_tokens", &SamplingParams::min_tokens)
      .def_rw("temperature", &SamplingParams::temperature)
      .def_rw("top_p", &SamplingParams::top_p)
      .def_rw("top_k", &SamplingParams::top_k)
      .def_rw("min_p", &SamplingParams::min_p)
      .def_rw("repetition_penalty", &SamplingParams::repetition_penalty)
      .def_rw("presence_penalty", &SamplingParams::presence_penalty)
      .def_rw("frequency_penalty", &SamplingParams::frequency_penalty)
      .def_rw("stop", &SamplingParams::stop)
      .def_rw("stop_token_ids", &SamplingParams::stop_token_ids)
      .def_rw("ignore_eos", &SamplingParams::ignore_eos)
      .def_rw("seed", &SamplingParams::seed, nb::arg().none())
      .def_rw("logprobs", &SamplingParams::logprobs, nb::arg().none())
      .def_rw("prompt_logprobs", &SamplingParams::prompt_logprobs, nb::arg().none())
      .def_rw("num_speculative_tokens", &SamplingParams::num_speculative_tokens, nb::arg().none())
      .def_rw("structured", &SamplingParams::structured)
      .def_rw("skip_special_tokens", &SamplingParams::skip_special_tokens)
      .def_rw("include_stop_str_in_output", &SamplingParams::include_stop_str_in_output)
      .def("validate", &SamplingParams::validate);

  nb::class_<EngineArgs>(m, "EngineArgs")
      .def(nb::init<>())
      .def_rw("model", &EngineArgs::model)
      .def_rw("threads", &EngineArgs::threads)
      .def_rw("kv_cache_memory", &EngineArgs::kv_cache_memory)
      .def_rw("max_num_seqs", &EngineArgs::max_num_seqs)
      .def_rw("max_num_batched_tokens", &EngineArgs::max_num_batched_tokens)
      .def_rw("block_size", &EngineArgs::block_size)
      .def_rw("max_model_len", &EngineArgs::max_model_len)
      .def_rw("limit_images_per_prompt", &EngineArgs::limit_images_per_prompt)
      .def_rw("max_image_pixels", &EngineArgs::max_image_pixels)
      .def_rw("enable_chunked_prefill", &EngineArgs::enable_chunked_prefill)
      .def_rw("watermark", &EngineArgs::watermark)
      .def_rw("async_scheduling", &EngineArgs::async_scheduling)
      .def_rw("quantize", &EngineArgs::quantize)
      .def_rw("exact_activations", &EngineArgs::exact_activations)
      .def_rw("yoco_keep_tokens", &EngineArgs::yoco_keep_tokens)
      .def_rw("yoco_replay", &EngineArgs::yoco_replay)
      .def_rw("kv_fake_quant", &EngineArgs::kv_fake_quant)
      .def_rw("kv_cache_dtype", &EngineArgs::kv_cache_dtype)
      .def_rw("weight_memory", &EngineArgs::weight_memory)
      .def_rw("speculative", &EngineArgs::speculative)
      .def_rw("num_speculative_tokens", &EngineArgs::num_speculative_tokens)
      .def_rw("speculative_verify", &EngineArgs::speculative_verify)
      .def_rw("speculative_sampling", &EngineArgs::speculative_sampling)
      .def_rw("ngram_min", &EngineArgs::ngram_min)
      .def_rw("ngram_max", &EngineArgs::ngram_max)
      .def_rw("enable_prefix_caching", &EngineArgs::enable_prefix_caching)
      .def_rw("prefix_cache_dir", &EngineArgs::prefix_cache_dir)
      .def_rw("prefix_cache_disk_size", &EngineArgs::prefix_cache_disk_size)
      .def_rw("prefix_wait_steps", &EngineArgs::prefix_wait_steps)
      .def_rw("prefix_state_snapshots", &EngineArgs::prefix_state_snapshots)
      .def_rw("expert_parallel", &EngineArgs::expert_parallel)
      .def_rw("ep_redundant_experts", &EngineArgs::ep_redundant_experts)
      .def_rw("eplb_interval", &EngineArgs::eplb_interval)
      .def_rw("eplb_window", &EngineArgs::eplb_window)
      .def_rw("quiet", &EngineArgs::quiet)
      .def("apply_environment", &EngineArgs::apply_environment)
      .def("validate", &EngineArgs::validate)
      .def("describe", &EngineArgs::describe);
  m.def("parse_memory_size", &parse_memory_size);

  nb::class_<TokenLogprob>(m, "TokenLogprob")
      .def_ro("id", &TokenLogprob::id)
      .def_ro("logprob", &TokenLogprob::logprob);
  nb::class_<PositionLogprobs>(m, "PositionLogprobs")
      .def_ro("id", &PositionLogprobs::id)
      .def_ro("logprob", &PositionLogprobs::logprob)
      .def_ro("top", &PositionLogprobs::top);
  nb::class_<CompletionOutput>(m, "CompletionOutput")
      .def_ro("index", &CompletionOutput::index)
      .def_prop_ro("text", [](const CompletionOutput& c) { return text_of(c.text); })
      .def_ro("token_ids", &CompletionOutput::token_ids)
      .def_ro("cumulative_logprob", &CompletionOutput::cumulative_logprob)
      .def_ro("logprobs", &CompletionOutput::logprobs)
      .def_ro("finish_reason", &CompletionOutput::finish_reason)
      .def_prop_ro("stop_reason", &stop_reason_of);
  nb::class_<RequestMetrics>(m, "RequestMetrics")
      .def_ro("arrival_time", &RequestMetrics::arrival_time)
      .def_ro("first_scheduled_time", &RequestMetrics::first_scheduled_time)
      .def_ro("first_token_time", &RequestMetrics::first_token_time)
      .def_ro("finished_time", &RequestMetrics::finished_time)
      .def_ro("spec_steps", &RequestMetrics::spec_steps)
      .def_ro("spec_drafted", &RequestMetrics::spec_drafted)
      .def_ro("spec_accepted", &RequestMetrics::spec_accepted)
      .def_ro("spec_drafted_at", &RequestMetrics::spec_drafted_at)
      .def_ro("spec_accepted_at", &RequestMetrics::spec_accepted_at)
      .def_ro("spec_calib_n", &RequestMetrics::spec_calib_n)
      .def_ro("spec_calib_accepted", &RequestMetrics::spec_calib_accepted)
      .def_ro("spec_calib_conf", &RequestMetrics::spec_calib_conf)
      .def_ro("cached_tokens", &RequestMetrics::cached_tokens);
  nb::class_<RequestOutput>(m, "RequestOutput")
      .def_ro("request_id", &RequestOutput::request_id)
      .def_prop_ro("prompt", [](const RequestOutput& o) { return text_of(o.prompt); })
      .def_ro("prompt_token_ids", &RequestOutput::prompt_token_ids)
      .def_ro("prompt_logprobs", &RequestOutput::prompt_logprobs)
      .def_ro("outputs", &RequestOutput::outputs)
      .def_ro("finished", &RequestOutput::finished)
      .def_ro("error", &RequestOutput::error)
      .def_ro("seed", &RequestOutput::seed)
      .def_ro("metrics", &RequestOutput::metrics);
}

}  // namespace gannet::python
