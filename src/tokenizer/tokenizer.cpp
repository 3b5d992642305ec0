#include "tokenizer/tokenizer.h"

#include "core/error.h"
#include "tokenizer/tokenizer_state.h"
#include "tokenizer/utf8.h"

namespace gannet::tokenizer {

std::vector<TokenId> Tokenizer::encode(std::string_view text, bool add_special_tokens) const {
  const State& s = *state_;
  std::vector<TokenId> ids;
  ids.reserve(text.size() / 3 + 4);
  if (add_special_tokens && add_bos()) ids.push_back(*s.special_tokens.bos);
  std::vector<AddedTokenMatch> matches;
  s.raw_added.find(text, matches);
  size_t pos = 0;
  for (const AddedTokenMatch& m : matches) {
    encode_segment(text.substr(pos, m.begin - pos), ids);
    ids.push_back(m.id);
    pos = m.end;
  }
  encode_segment(text.substr(pos), ids);
  return ids;
}

// Text between raw-matched added tokens: normalize, find the normalized added tokens,
// pre-tokenize and BPE-encode what lies between those.
void Tokenizer::encode_segment(std::string_view text, std::vector<TokenId>& ids) const {
  if (text.empty()) return;
  const State& s = *state_;
  std::string normalized;
  if (!s.normalizer.is_identity()) {
    normalized = s.normalizer.apply(text);
    text = normalized;
  }
  std::vector<AddedTokenMatch> matches;
  s.normalized_added.find(text, matches);
  std::vector<std::string> pieces;
  size_t pos = 0;
  for (size_t i = 0; i <= matches.size(); ++i) {
    size_t end = i < matches.size() ? matches[i].begin : text.size();
    pieces.clear();
    s.pre_tokenizer.split(text.substr(pos, end - pos), pieces);
    for (const std::string& piece : pieces) s.bpe.encode(piece, ids);
    if (i < matches.size()) {
      ids.push_back(matches[i].id);
      pos = matches[i].end;
    }
  }
}

std::string Tokenizer::decode(std::span<const TokenId> ids, bool skip_special_tokens) const {
  const State& s = *state_;
  std::string bytes;
  for (TokenId id : ids) {
    check_id(id);
    if (skip_special_tokens && s.special[id]) continue;
    bytes += s.token_bytes[id];
  }
  return utf8_lossy(bytes);
}

void Tokenizer::check_id(TokenId id) const {
  if (id < 0 || size_t(id) >= state_->token_bytes.size())
    fail("token id ", id, " is out of range [0, ", state_->token_bytes.size(), ")");
}

size_t Tokenizer::vocab_size() const { return state_->token_bytes.size(); }

std::optional<TokenId> Tokenizer::token_to_id(std::string_view token) const {
  auto it = state_->added_ids.find(std::string(token));
  if (it != state_->added_ids.end()) return it->second;
  return state_->bpe.token_to_id(token);
}

const std::string& Tokenizer::id_to_token(TokenId id) const {
  check_id(id);
  return state_->token_bytes[id];
}

bool Tokenizer::is_special(TokenId id) const {
  return id >= 0 && size_t(id) < state_->special.size() && state_->special[id];
}

std::optional<TokenId> Tokenizer::bos_id() const { return state_->special_tokens.bos; }

const std::vector<TokenId>& Tokenizer::eos_ids() const { return state_->special_tokens.eos; }

bool Tokenizer::add_bos() const { return state_->add_bos && state_->special_tokens.bos.has_value(); }

}  // namespace gannet::tokenizer
