#include <chrono>
#include <memory>
#include <optional>

#include <nanobind/stl/optional.h>
#include <nanobind/stl/string.h>
#include <nanobind/stl/vector.h>

#include "core/error.h"
#include "engine/engine.h"
#include "vision/image.h"
#include "python/bindings.h"
#include "chat/chat_format.h"
#include "chat/output_parser.h"

namespace nb = nanobind;

namespace gannet::python {

namespace {

// One engine for offline batches: it returns finished requests only (streaming off).
class PyEngine {
 public:
  explicit PyEngine(const EngineArgs& args) : engine_(std::make_unique<engine::Engine>(args)) {
    engine_->set_streaming(false);
  }

  engine::Engine& engine() { return *engine_; }
  // step() calls, and those that ran while this thread did not hold the GIL (tests).
  int64_t step_calls = 0, steps_without_gil = 0;
  double step_seconds = 0;  // wall time inside step() (tools/python_overhead.py)

  const tokenizer::Tokenizer& tokenizer() const {
    if (!engine_->tokenizer())
      fail(engine_->args().model, " has no tokenizer.json, so prompts must be token ids (prompt_token_ids)");
    return *engine_->tokenizer();
  }

  // The prompt text of a conversation, in the checkpoint's chat format or `source` (a
  // Jinja template) when given.
  std::string render_chat(const std::string& messages, bool add_generation_prompt, const std::string& kwargs,
                          const std::string& tools, const std::optional<std::string>& source) {
    chat::ChatOptions options;
    options.add_generation_prompt = add_generation_prompt;
    options.kwargs = parse_json("chat_template_kwargs", kwargs);
    if (!options.kwargs.is_object()) fail("chat_template_kwargs must be a dict");
    options.tools = parse_json("tools", tools);
    const nlohmann::ordered_json msgs = parse_json("messages", messages);
    if (source) {
      chat::ChatTemplate t(*source, chat::chat_special_tokens(engine_->args().model));
      return t.render(msgs, options);
    }
    if (!chat_) chat_ = chat::ChatFormat::load(engine_->args().model, "");
    if (!chat_->available())
      fail(engine_->args().model, " has no chat template (chat_template.jinja or tokenizer_config.json's "
           "\"chat_template\"): give one with chat_template=...");
    return chat_->render(msgs, options, nullptr);
  }

  // The assistant message a chat completion stands for, as the server returns it: content,
  // reasoning_content (when there was reasoning) and tool_calls (read back in the family's
  // syntax when the request had tools), as JSON text.
  std::string parse_chat_output(const std::string& prompt, const std::string& text, bool tools) {
    if (!chat_) chat_ = chat::ChatFormat::load(engine_->args().model, "");
    const chat::ChatOutputParser::Options o = chat_->output_options(prompt, tools);
    chat::ChatOutputParser parser(o);
    std::string reasoning, content;
    nlohmann::ordered_json calls = nlohmann::ordered_json::array();
    for (const chat::ChatDelta& d : {parser.feed(text), parser.finish()}) {
      reasoning += d.reasoning;
      content += d.content;
      for (const chat::ToolCallDelta& t : d.tool_calls) {
        if (t.index >= calls.size())
          calls.push_back({{"id", t.id}, {"type", "function"}, {"function", {{"name", t.name}, {"arguments", ""}}}});
        calls[t.index]["function"]["arguments"] = calls[t.index]["function"]["arguments"].get<std::string>() + t.arguments;
      }
    }
    nlohmann::ordered_json msg = {{"role", "assistant"}};
    msg["content"] = parser.in_reasoning() || (content.empty() && !calls.empty()) ? nlohmann::ordered_json(nullptr)
                                                                                 : nlohmann::ordered_json(content);
    if (o.starts_in_reasoning || !reasoning.empty()) msg["reasoning_content"] = reasoning;
    if (!calls.empty()) msg["tool_calls"] = calls;
    return msg.dump(-1, ' ', false, nlohmann::ordered_json::error_handler_t::replace);
  }

 private:
  static nlohmann::ordered_json parse_json(const char* what, const std::string& text) {
    try {
      return nlohmann::ordered_json::parse(text);
    } catch (const nlohmann::json::exception& e) {
      fail(what, ": not JSON-serialisable (", e.what(), ")");
    }
  }

  std::unique_ptr<engine::Engine> engine_;
  std::optional<chat::ChatFormat> chat_;
};

}  // namespace

std::vector<vision::RgbImage> decode_images(PyEngine& e, const std::vector<nb::bytes>& images) {
  vision::DecodeLimits limits;
  limits.max_pixels = e.engine().args().max_image_pixels;
  std::vector<vision::RgbImage> out;
  for (size_t i = 0; i < images.size(); ++i)
    out.push_back(vision::decode_image({reinterpret_cast<const uint8_t*>(images[i].c_str()), images[i].size()},
                                       "image " + std::to_string(i), limits));
  return out;
}

void bind_engine(nb::module_& m) {
  nb::class_<PyEngine>(m, "Engine")
      // Loading maps the checkpoint and may take a while: other Python threads run meanwhile.
      .def(nb::init<const EngineArgs&>(), nb::call_guard<nb::gil_scoped_release>())
      .def(
          "add_request",
          [](PyEngine& e, const std::string& id, const std::string& prompt, const SamplingParams& p) {
            e.engine().add_request(id, prompt, p);
          },
          nb::arg("request_id"), nb::arg("prompt"), nb::arg("params"))
      .def(
          "add_request",
          [](PyEngine& e, const std::string& id, const std::vector<int32_t>& ids, const SamplingParams& p) {
            e.engine().add_request(id, ids, p);
          },
          nb::arg("request_id"), nb::arg("prompt_token_ids"), nb::arg("params"))
      // With images (vision models): each an encoded PNG / JPEG / WebP file's bytes.
      .def(
          "add_request",
          [](PyEngine& e, const std::string& id, const std::string& prompt, const SamplingParams& p,
             const std::vector<nb::bytes>& images) { e.engine().add_request(id, prompt, p, decode_images(e, images)); },
          nb::arg("request_id"), nb::arg("prompt"), nb::arg("params"), nb::arg("images"))
      .def(
          "add_request",
          [](PyEngine& e, const std::string& id, const std::vector<int32_t>& ids, const SamplingParams& p,
             const std::vector<nb::bytes>& images) { e.engine().add_request(id, ids, p, decode_images(e, images)); },
          nb::arg("request_id"), nb::arg("prompt_token_ids"), nb::arg("params"), nb::arg("images"))
      .def_prop_ro("image_token_id", [](PyEngine& e) { return e.engine().image_token_id(); })
      // One step with the GIL released; the requests that finished in it.
      .def("step",
           [](PyEngine& e) {
             std::vector<RequestOutput> done;
             {
               nb::gil_scoped_release release;
               const auto t0 = std::chrono::steady_clock::now();
               ++e.step_calls;
               if (!PyGILState_Check()) ++e.steps_without_gil;
               for (RequestOutput& o : e.engine().step()) done.push_back(std::move(o));
               e.step_seconds += std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
             }
             return done;
           })
      .def(
          "abort",
          [](PyEngine& e, const std::string& id) {
            nb::gil_scoped_release release;  // waits for the steps in flight
            return e.engine().abort(id);
          },
          nb::arg("request_id"))
      .def("has_unfinished", [](PyEngine& e) { return e.engine().has_unfinished(); })
      .def_ro("steps_without_gil", &PyEngine::steps_without_gil)
      .def_ro("step_calls", &PyEngine::step_calls)
      .def_ro("step_seconds", &PyEngine::step_seconds)
      .def_prop_ro("has_tokenizer", [](PyEngine& e) { return e.engine().tokenizer() != nullptr; })
      .def_prop_ro("args", [](PyEngine& e) { return e.engine().args(); })
      .def(
          "encode",
          [](const PyEngine& e, const std::string& text, bool add_special_tokens) {
            return e.tokenizer().encode(text, add_special_tokens);
          },
          nb::arg("text"), nb::arg("add_special_tokens") = true)
      // A vision model's image markers as placeholder ids (Engine::encode_with_image_markers).
      .def(
          "encode_with_image_markers",
          [](PyEngine& e, const std::string& text, bool add_special_tokens) {
            return e.engine().encode_with_image_markers(text, add_special_tokens);
          },
          nb::arg("text"), nb::arg("add_special_tokens"))
      .def(
          "decode",
          [](const PyEngine& e, const std::vector<int32_t>& ids, bool skip_special_tokens) {
            const std::string s = e.tokenizer().decode(ids, skip_special_tokens);
            PyObject* o = PyUnicode_DecodeUTF8(s.data(), Py_ssize_t(s.size()), "replace");
            if (!o) throw nb::python_error();
            return nb::steal<nb::str>(o);
          },
          nb::arg("token_ids"), nb::arg("skip_special_tokens") = false)
      // The bytes a token stands for (possibly part of a UTF-8 character).
      .def("token_bytes",
           [](const PyEngine& e, int32_t id) {
             const std::string& s = e.tokenizer().id_to_token(id);
             return nb::bytes(s.data(), s.size());
           })
      .def("render_chat", &PyEngine::render_chat, nb::arg("messages_json"), nb::arg("add_generation_prompt"),
           nb::arg("chat_template_kwargs_json"), nb::arg("tools_json"), nb::arg("chat_template").none())
      .def("parse_chat_output", &PyEngine::parse_chat_output, nb::arg("prompt"), nb::arg("text"), nb::arg("tools"));
}

}  // namespace gannet::python
