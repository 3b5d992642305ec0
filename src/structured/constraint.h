// One sequence's grammar constraint as the engine uses it: a request's StructuredOutput
// compiled to a grammar (compile_structured), and per sequence a Constraint that turns
// the tokens sampled so far into the mask of the next ones.
//
// With a trigger, the output is free until the trigger text has appeared in it (matched
// over the tokens' bytes, so it may span tokens); the grammar then applies to the bytes
// after it, starting inside the token that completed the trigger. While waiting, every
// token is allowed except those that would complete the trigger with bytes after it the
// grammar cannot start with (so the document is never broken by the token that opens it).
//
// rollback(k) undoes the last k tokens (k up to the capacity given), across the trigger
// too: speculative decoding feeds drafts and takes back the rejected ones.
#pragma once

#include <cstdint>
#include <deque>
#include <map>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "gannet/sampling_params.h"
#include "structured/grammar.h"
#include "structured/matcher.h"

namespace gannet::structured {

// The grammar of a StructuredOutput (json_schema, regex, grammar or json_object, with its
// whitespace policy). Throws gannet::Error naming the problem.
std::shared_ptr<const Grammar> compile_structured(const StructuredOutput& so);

class Constraint {
 public:
  // The automaton may be shared with other constraints of the same grammar.
  Constraint(std::shared_ptr<Automaton> automaton, std::string trigger, int max_rollback);

  // Feeds a sampled token; false (and no change) if the constraint does not allow it.
  bool accept_token(int32_t id);
  // Undoes the last k accepted tokens (k <= min(tokens accepted, max_rollback)).
  void rollback(int k);
  // Sets the bit of every token accept_token would take now ((vocab + 31) / 32 words).
  void fill_next_token_bitmask(std::span<uint32_t> mask);

  bool triggered() const { return kmp_ == int(trigger_.size()); }
  bool is_terminated() const { return ended_ || m_.is_terminated(); }  // an EOS was accepted
  int64_t tokens_accepted() const { return accepted_; }
  int max_rollback() const { return max_rollback_; }
  int rollback_available() const { return int(hist_.size()); }  // tokens rollback() can undo now

 private:
  int kmp_next(int state, uint8_t b) const;
  // Tokens that complete the trigger from trigger state `state` followed by bytes the
  // grammar refuses (computed once per state).
  const std::vector<int32_t>& forbidden(int state);

  Matcher m_;
  std::shared_ptr<const TokenVocab> vocab_;
  std::string trigger_;
  std::vector<int> fail_;  // KMP failure function of the trigger
  int kmp_ = 0;            // trigger bytes matched (trigger_.size(): the grammar applies)
  bool ended_ = false;     // EOS accepted before the trigger
  int max_rollback_;
  struct Entry {
    int kmp;                 // before the token
    bool ended;
    int64_t matcher_tokens;  // matcher tokens accepted before it
  };
  std::deque<Entry> hist_;
  int64_t accepted_ = 0;
  std::map<int, std::vector<int32_t>> forbidden_;
};

}  // namespace gannet::structured
