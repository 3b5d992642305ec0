// gannet._core: the C++ engine as a Python extension module (nanobind). The package in
// python/gannet builds vLLM-shaped objects (LLM, SamplingParams, RequestOutput) on top of
// what this module exposes: the engine's own structs, field for field, and an Engine whose
// step() runs with the GIL released.
#pragma once

#include <nanobind/nanobind.h>

namespace gannet::python {

// SamplingParams, StructuredOutput, EngineArgs and the output structs.
void bind_types(nanobind::module_& m);
// Engine (add_request / step / abort, tokenizer and chat-format calls).
void bind_engine(nanobind::module_& m);

}  // namespace gannet::python
