#include "core/error.h"
#include "python/bindings.h"

namespace nb = nanobind;

NB_MODULE(_core, m) {
  m.doc() = "gannet's C++ engine (use the gannet package: gannet.LLM, gannet.SamplingParams)";
  // A problem the caller can act on (a bad field, prompt or model directory) is a
  // ValueError carrying the engine's message, which names what is wrong.
  nb::register_exception_translator([](const std::exception_ptr& p, void*) {
    try {
      std::rethrow_exception(p);
    } catch (const gannet::Error& e) {
      PyErr_SetString(PyExc_ValueError, e.what());
    }
  });
  gannet::python::bind_types(m);
  gannet::python::bind_engine(m);
}
