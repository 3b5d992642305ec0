// The "normalizer" of tokenizer.json: none, "NFC", or a "Sequence" of those. Any other
// kind is rejected when loading rather than silently skipped, since skipping it would
// change token ids.
#pragma once

#include <string>
#include <string_view>

#include <nlohmann/json_fwd.hpp>

namespace gannet::tokenizer {

class Normalizer {
 public:
  Normalizer() = default;  // the identity

  // Parses the "normalizer" value (null allowed). Throws gannet::Error naming the problem.
  static Normalizer from_json(const nlohmann::json& j);

  bool is_identity() const { return !nfc_; }
  std::string apply(std::string_view text) const;

 private:
  bool nfc_ = false;  // NFC is idempotent, so a Sequence of several is one
};

}  // namespace gannet::tokenizer
