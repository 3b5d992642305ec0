// The output side of the engine, run on the engine thread while the executor computes:
// turns sequences' tokens into text incrementally (never a broken UTF-8 sequence), finds
// stop strings even when they straddle tokens, and assembles RequestOutputs: streaming
// deltas (what is new since the request's last output) or complete snapshots.
#pragma once

#include <map>
#include <memory>
#include <optional>
#include <string>

#include "engine/request.h"
#include "tokenizer/incremental_detokenizer.h"
#include "tokenizer/tokenizer.h"

namespace gannet::engine {

class OutputProcessor {
 public:
  explicit OutputProcessor(const tokenizer::Tokenizer* tok);  // null: no text
  // Bytes of the longest token: text buffers sized from it never grow mid-token.
  size_t max_token_bytes() const { return max_token_bytes_; }

  // Appends the text of seq's newest token to its output. Returns the stop string found
  // in the new text, after cutting the text at it (keeping it when
  // include_stop_str_in_output).
  std::optional<std::string> add_token_text(Sequence& seq);
  // Flushes held-back bytes into the text (at the end of a sequence).
  void flush(Sequence& seq);
  void forget(const Sequence& seq) { detok_.erase(&seq); }

  // Fills *o, reusing its buffers, with what `req` produced since its last delta: per
  // sample the new token ids, text and logprobs; the prompt fields only in its first
  // output. A finished request's output is complete instead (everything from the start).
  // While a sample runs, a tail that could begin a stop string is held back, so text once
  // sent is never taken back.
  void delta(Request& req, RequestOutput* o) const;
  // The whole request so far (the same hold-back applies while unfinished).
  static RequestOutput snapshot(const Request& req);

 private:
  tokenizer::IncrementalDetokenizer& detok_for(const Sequence& seq);

  const tokenizer::Tokenizer* tok_;
  size_t max_token_bytes_ = 0;
  std::map<const Sequence*, std::unique_ptr<tokenizer::IncrementalDetokenizer>> detok_;
};

}  // namespace gannet::engine
