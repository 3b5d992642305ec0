// Turns sequences' tokens into text incrementally (never a broken UTF-8 sequence), finds
// stop strings even when they straddle tokens, and assembles RequestOutputs.
#pragma once

#include <map>
#include <memory>
#include <optional>
#include <string>

#include "engine/request.h"
#include "tokenizer/incremental_detokenizer.h"
#include "tokenizer/tokenizer.h"

namespace gannet::engine {

class OutputPool {
 public:
  explicit OutputPool(const tokenizer::Tokenizer& tok) : tok_(tok) {}

  // Appends the text of seq's newest token to its output. Returns the stop string found
  // in the new text, after cutting the text at it (keeping it when
  // include_stop_str_in_output).
  std::optional<std::string> add_token_text(Sequence& seq);
  // Flushes held-back bytes into the text (at the end of a sequence).
  void flush(Sequence& seq);
  void forget(const Sequence& seq) { detok_.erase(&seq); }

  static RequestOutput snapshot(const Request& req);

 private:
  tokenizer::IncrementalDetokenizer& detok_for(const Sequence& seq);

  const tokenizer::Tokenizer& tok_;
  std::map<const Sequence*, std::unique_ptr<tokenizer::IncrementalDetokenizer>> detok_;
};

}  // namespace gannet::engine
