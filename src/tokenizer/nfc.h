// Unicode Normalization Form C, for tokenizers whose normalizer is "NFC" (the Qwen2/3
// families). Decompose canonically, order combining marks, recompose (UAX #15).
#pragma once

#include <string>
#include <string_view>

namespace gannet::tokenizer {

// NFC of `text`. Ill-formed UTF-8 bytes pass through unchanged and block composition
// across them, so normalization never fails and never loses bytes.
std::string nfc(std::string_view text);

}  // namespace gannet::tokenizer
