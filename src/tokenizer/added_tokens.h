// The "added_tokens" of tokenizer.json and how they are found in text before the rest of
// the pipeline sees it, following Hugging Face's AddedVocabulary: leftmost-longest,
// non-overlapping matches, then single_word / lstrip / rstrip applied to each match.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "tokenizer/token_id.h"

namespace gannet::tokenizer {

struct AddedToken {
  std::string content;
  TokenId id = 0;
  bool special = false;
  bool lstrip = false, rstrip = false, single_word = false;
  bool normalized = false;  // matched against normalized text instead of the raw input
};

// One found token: [begin, end) of the text (including stripped whitespace) and its id.
struct AddedTokenMatch {
  size_t begin, end;
  TokenId id;
};

class AddedTokenMatcher {
 public:
  AddedTokenMatcher() = default;
  explicit AddedTokenMatcher(std::vector<AddedToken> tokens);

  bool empty() const { return tokens_.empty(); }

  // Appends the matches in `text`, in order and non-overlapping.
  void find(std::string_view text, std::vector<AddedTokenMatch>& out) const;

 private:
  // A byte trie over the token contents: nodes are numbered from 0 (the root); an edge is
  // keyed by (node << 8 | byte).
  std::unordered_map<uint64_t, uint32_t> edges_;
  std::vector<int32_t> terminal_;  // per node: index into tokens_, or -1
  bool first_byte_[256] = {};      // quick rejection of positions no token starts at
  std::vector<AddedToken> tokens_;

  // Length of the longest token starting at text[pos], with its index; 0 if none.
  size_t longest_at(std::string_view text, size_t pos, int32_t& token) const;
};

}  // namespace gannet::tokenizer
