#include "tokenizer/incremental_detokenizer.h"

#include "tokenizer/utf8.h"

namespace gannet::tokenizer {

std::string IncrementalDetokenizer::push(TokenId id) {
  std::string out;
  push(id, &out);
  return out;
}

void IncrementalDetokenizer::push(TokenId id, std::string* out_text) {
  const std::string& bytes = tokenizer_.id_to_token(id);
  if (skip_special_tokens_ && tokenizer_.is_special(id)) return;
  pending_ += bytes;
  std::string& out = *out_text;
  const auto* p = reinterpret_cast<const unsigned char*>(pending_.data());
  size_t i = 0;
  while (i < pending_.size()) {
    Utf8Seq seq = scan_utf8(p + i, pending_.size() - i);
    if (seq.status == Utf8Status::kTruncated) break;  // wait for the next token
    if (seq.status == Utf8Status::kValid)
      out.append(pending_, i, seq.len);
    else
      out += "\xEF\xBF\xBD";
    i += seq.len;
  }
  pending_.erase(0, i);
}

std::string IncrementalDetokenizer::flush() {
  std::string out = utf8_lossy(pending_);
  pending_.clear();
  return out;
}

}  // namespace gannet::tokenizer
