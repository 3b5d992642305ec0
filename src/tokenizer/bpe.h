// The BPE "model" of tokenizer.json: vocabulary, ranked merges, and the merge loop that
// turns one pre-tokenized piece into ids exactly as Hugging Face's BPE does (lowest rank
// first, leftmost on ties). Immutable after loading except for its internal cache, which
// is thread-safe, so encode may run on several threads at once.
#pragma once

#include <array>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include <nlohmann/json_fwd.hpp>

#include "tokenizer/piece_cache.h"
#include "tokenizer/token_id.h"

namespace gannet::tokenizer {

class Bpe {
 public:
  Bpe() = default;

  // Parses the "model" object. With `byte_level`, pieces arrive as raw bytes and are
  // spelled in GPT-2's byte characters before lookup. Throws gannet::Error naming the
  // problem (not BPE, missing vocab, a merge of unknown tokens, ...).
  static Bpe from_json(const nlohmann::json& model, bool byte_level);

  // Appends the ids of one piece to `out`.
  void encode(std::string_view piece, std::vector<TokenId>& out) const;

  std::optional<TokenId> token_to_id(std::string_view token) const;

  // Number of vocabulary entries (Hugging Face's model vocab size; ids may have gaps).
  size_t num_entries() const { return vocab_.size(); }

  // Vocabulary entries indexed by id ("" where the vocabulary has no entry).
  const std::vector<std::string>& tokens() const { return tokens_; }

 private:
  struct StringHash {
    using is_transparent = void;
    size_t operator()(std::string_view s) const { return std::hash<std::string_view>()(s); }
  };
  struct Merge {
    uint32_t rank;
    TokenId new_id;
  };

  void parse_vocab(const nlohmann::json& vocab);
  void parse_merges(const nlohmann::json& merges);
  void encode_uncached(std::string_view piece, std::vector<TokenId>& out) const;
  void merge_all(std::vector<TokenId>& ids, std::vector<TokenId>& out) const;
  const Merge* find_merge(TokenId a, TokenId b) const {
    auto it = merges_.find((uint64_t(uint32_t(a)) << 32) | uint32_t(b));
    return it == merges_.end() ? nullptr : &it->second;
  }

  std::unordered_map<std::string, TokenId, StringHash, std::equal_to<>> vocab_;
  std::vector<std::string> tokens_;
  std::unordered_map<uint64_t, Merge> merges_;  // (left id << 32 | right id) -> merge
  std::array<TokenId, 256> byte_ids_{};         // byte-level: id of each byte's character, or -1
  bool byte_level_ = false;
  bool ignore_merges_ = false;  // a piece that is itself in the vocabulary is one token
  bool byte_fallback_ = false;  // unknown characters become <0xXX> byte tokens
  bool fuse_unk_ = false;
  TokenId unk_id_ = -1;
  std::shared_ptr<PieceCache> cache_ = std::make_shared<PieceCache>();
};

}  // namespace gannet::tokenizer
