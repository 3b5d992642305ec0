// A Hugging Face byte-level BPE tokenizer (tokenizer.json of the DeepSeek V3/V4, Llama-3
// and Qwen2/3 families), producing the same ids as the `tokenizers` library.
//
// encode: added tokens are found first (they become single ids); the text between them
// goes through normalizer -> pre-tokenizer -> GPT-2 byte characters -> BPE.
// decode: ids -> token bytes (byte-level decoded) -> UTF-8, broken sequences as U+FFFD.
//
// A Tokenizer is immutable and cheap to copy (copies share one loaded state); encode and
// decode may run on several threads at once.
#pragma once

#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json_fwd.hpp>

#include "tokenizer/token_id.h"

namespace gannet::tokenizer {

class Tokenizer {
 public:
  // Loads `dir`/tokenizer.json and the special-token files beside it.
  static Tokenizer from_dir(const std::string& dir);
  // Loads a tokenizer.json; tokenizer_config.json, generation_config.json and
  // config.json in the same folder are read too when present. Throws gannet::Error naming
  // the file and the problem.
  static Tokenizer from_json_file(const std::string& path);

  // Ids of `text` (any bytes; ill-formed UTF-8 is encoded byte by byte). With
  // `add_special_tokens`, the BOS id is prepended when add_bos().
  std::vector<TokenId> encode(std::string_view text, bool add_special_tokens = false) const;

  // UTF-8 text of `ids`. Throws gannet::Error for an id outside [0, vocab_size()).
  std::string decode(std::span<const TokenId> ids, bool skip_special_tokens = false) const;

  // One more than the largest id of the vocabulary or the added tokens.
  size_t vocab_size() const;

  // Id of a token as spelled in tokenizer.json (an added token's content, or a vocabulary
  // entry in byte-level characters such as "Ġthe").
  std::optional<TokenId> token_to_id(std::string_view token) const;

  // The bytes a token stands for (byte-level decoded; may be part of a UTF-8 sequence).
  // Throws gannet::Error for an id outside [0, vocab_size()).
  const std::string& id_to_token(TokenId id) const;

  // Whether `id` is an added token marked special (dropped by skip_special_tokens).
  bool is_special(TokenId id) const;

  std::optional<TokenId> bos_id() const;
  const std::vector<TokenId>& eos_ids() const;
  // Whether encode(text, true) prepends bos_id(): tokenizer_config's add_bos_token, else
  // whether the post-processor template starts with the BOS token.
  bool add_bos() const;

 private:
  struct State;  // defined in tokenizer_state.h

  // Everything tokenizer.json states (from_json_file adds the special tokens beside it).
  static std::shared_ptr<State> parse_state(const nlohmann::json& j, const std::string& path);

  explicit Tokenizer(std::shared_ptr<const State> state) : state_(std::move(state)) {}
  void encode_segment(std::string_view text, std::vector<TokenId>& ids) const;
  void check_id(TokenId id) const;

  std::shared_ptr<const State> state_;
};

}  // namespace gannet::tokenizer
