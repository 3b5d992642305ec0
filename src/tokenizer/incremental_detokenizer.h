// Streams decoded text one token at a time. A token may end in the middle of a UTF-8
// character, so the incomplete tail is held back until later tokens complete it; what is
// emitted is always valid UTF-8, and all chunks together equal Tokenizer::decode of all
// ids (ill-formed bytes become U+FFFD as soon as they can no longer become valid).
#pragma once

#include <string>

#include "tokenizer/tokenizer.h"

namespace gannet::tokenizer {

class IncrementalDetokenizer {
 public:
  // reserve_bytes: room held back for an incomplete character plus one token's bytes, so
  // pushing never allocates (the longest token's length is enough).
  explicit IncrementalDetokenizer(Tokenizer tokenizer, bool skip_special_tokens = false, size_t reserve_bytes = 0)
      : tokenizer_(std::move(tokenizer)), skip_special_tokens_(skip_special_tokens) {
    pending_.reserve(reserve_bytes + 4);
  }

  // The text completed by `id` (often empty mid-character). Throws gannet::Error for an id
  // outside the vocabulary.
  std::string push(TokenId id);
  // The same, appended to *out: no allocation once *out has room (the streaming hot path).
  void push(TokenId id, std::string* out);

  // What is still held back, with an incomplete trailing sequence as U+FFFD; the
  // detokenizer is empty afterwards.
  std::string flush();

 private:
  Tokenizer tokenizer_;  // a shared handle: cheap to hold
  bool skip_special_tokens_;
  std::string pending_;  // bytes of an incomplete UTF-8 sequence, at most 3
};

}  // namespace gannet::tokenizer
