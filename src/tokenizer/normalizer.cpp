#include "tokenizer/normalizer.h"

#include <nlohmann/json.hpp>

#include "core/error.h"
#include "tokenizer/nfc.h"

namespace gannet::tokenizer {

namespace {

void parse_into(const nlohmann::json& j, bool& nfc) {
  if (j.is_null()) return;
  if (!j.is_object() || !j.contains("type") || !j["type"].is_string())
    fail("normalizer: expected an object with a \"type\"");
  const std::string type = j["type"];
  if (type == "NFC") {
    nfc = true;
  } else if (type == "Sequence") {
    if (!j.contains("normalizers") || !j["normalizers"].is_array())
      fail("normalizer: Sequence needs a \"normalizers\" array");
    for (const auto& n : j["normalizers"]) parse_into(n, nfc);
  } else {
    fail("normalizer: type \"", type, "\" is unsupported (supported: NFC, Sequence)");
  }
}

}  // namespace

Normalizer Normalizer::from_json(const nlohmann::json& j) {
  Normalizer n;
  parse_into(j, n.nfc_);
  return n;
}

std::string Normalizer::apply(std::string_view text) const {
  return nfc_ ? nfc(text) : std::string(text);
}

}  // namespace gannet::tokenizer
