// JSON text exactly as Python's json.dumps(value, ensure_ascii=False) writes it, with its
// default separators (", " between items, ": " after keys), keys in the order given and
// floats as Python's repr (shortest round trip; exponent form below 1e-4 and from 1e16).
// DeepSeek's chat encoders write tool schemas and tool-call arguments this way, so a
// prompt gannet renders is byte for byte the one the model was trained on.
#pragma once

#include <string>

#include <nlohmann/json.hpp>

namespace gannet::chat {

std::string python_json_dumps(const nlohmann::ordered_json& value);
// A JSON string literal of `text` (quotes included), escaped as json.dumps escapes it.
std::string python_json_string(const std::string& text);
// Python's repr of a float, as json.dumps writes it (NaN, Infinity, -Infinity for those).
std::string python_float_repr(double x);
// Python truthiness of a JSON value: null, false, 0, "", [] and {} are false.
bool python_truthy(const nlohmann::ordered_json& value);

}  // namespace gannet::chat
