// Which ids begin and end a sequence, read from the files Hugging Face keeps beside
// tokenizer.json: tokenizer_config.json (bos_token / eos_token as a string or an
// {"content": ...} object, add_bos_token), generation_config.json and config.json
// (bos_token_id, eos_token_id as an int or a list).
#pragma once

#include <functional>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "tokenizer/token_id.h"

namespace gannet::tokenizer {

struct SpecialTokens {
  std::optional<TokenId> bos;
  std::vector<TokenId> eos;     // every id that ends generation, without repeats
  std::optional<bool> add_bos;  // tokenizer_config's add_bos_token, when it states one

  bool operator==(const SpecialTokens&) const = default;
};

using TokenLookup = std::function<std::optional<TokenId>(std::string_view)>;

// Reads whichever of the three files exist in `dir`. bos comes from tokenizer_config,
// else generation_config, else config.json; eos joins tokenizer_config's with
// generation_config's (or config.json's when there is no generation_config). Throws
// gannet::Error naming the file for bad JSON, a token not in the vocabulary or an id
// outside [0, vocab_size).
SpecialTokens read_special_tokens(const std::string& dir, const TokenLookup& lookup,
                                  size_t vocab_size);

}  // namespace gannet::tokenizer
