// The loaded, immutable state behind a Tokenizer handle (private to src/tokenizer/).
#pragma once

#include <string>
#include <unordered_map>
#include <vector>

#include "tokenizer/added_tokens.h"
#include "tokenizer/bpe.h"
#include "tokenizer/normalizer.h"
#include "tokenizer/pre_tokenizer.h"
#include "tokenizer/special_tokens.h"
#include "tokenizer/tokenizer.h"

namespace gannet::tokenizer {

struct Tokenizer::State {
  Normalizer normalizer;
  PreTokenizer pre_tokenizer;
  Bpe bpe;
  // Added tokens split in two passes, as Hugging Face does: those with normalized=false
  // are found in the raw text, the others in the normalized text between them.
  AddedTokenMatcher raw_added, normalized_added;
  std::unordered_map<std::string, TokenId> added_ids;  // content -> id
  std::vector<std::string> token_bytes;                // [vocab_size] decoded bytes per id
  std::vector<uint8_t> special;                        // [vocab_size] 1 for special added tokens
  SpecialTokens special_tokens;
  bool add_bos = false;
};

}  // namespace gannet::tokenizer
