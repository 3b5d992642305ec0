// GPT-2's reversible map between bytes and printable code points. Byte-level BPE
// vocabularies spell every token in these code points ("Ġ" is the space byte), so any
// byte string, valid UTF-8 or not, has an encoding.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

namespace gannet::tokenizer {

char32_t byte_to_code_point(uint8_t b);

// The byte a code point stands for, or -1 when it is not one of the 256 mapped ones.
int code_point_to_byte(char32_t cp);

// UTF-8 of the mapped code point of every byte of `bytes`.
std::string to_byte_level(std::string_view bytes);

// Bytes spelled by a vocabulary token, or nullopt if any of its characters is not a mapped
// one (Hugging Face's ByteLevel decoder then keeps the token's own UTF-8).
std::optional<std::string> from_byte_level(std::string_view token);

}  // namespace gannet::tokenizer
