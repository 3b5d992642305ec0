#include "structured/constraint.h"
#include "structured/tool_grammar.h"

#include <algorithm>

#include "core/error.h"
#include "structured/gbnf.h"
#include "structured/json_grammar.h"
#include "structured/json_schema.h"
#include "structured/regex.h"

namespace gannet::structured {

std::shared_ptr<const Grammar> compile_structured(const StructuredOutput& so) {
  using K = StructuredOutput::Kind;
  JsonWhitespace ws;
  ws.compact = so.max_whitespace == 0;
  ws.max_run = std::max(1, so.max_whitespace);
  switch (so.kind) {
    case K::kJsonSchema: return std::make_shared<const Grammar>(compile_json_schema(so.spec, ws));
    case K::kRegex: return std::make_shared<const Grammar>(parse_regex(so.spec));
    case K::kGrammar: return std::make_shared<const Grammar>(parse_gbnf(so.spec));
    case K::kJsonObject: return std::make_shared<const Grammar>(json_grammar(ws, /*object_at_top=*/true));
    case K::kToolCalls: return std::make_shared<const Grammar>(compile_tool_calls(so.spec));
    case K::kNone: break;
  }
  fail("structured output: no kind given");
}

Constraint::Constraint(std::shared_ptr<Automaton> automaton, std::string trigger, int max_rollback)
    : m_(automaton, max_rollback), vocab_(automaton->vocab()), trigger_(std::move(trigger)), max_rollback_(max_rollback) {
  fail_.assign(trigger_.size() + 1, 0);
  for (size_t i = 1, k = 0; i < trigger_.size(); ++i) {
    while (k > 0 && trigger_[i] != trigger_[k]) k = size_t(fail_[k]);
    if (trigger_[i] == trigger_[k]) ++k;
    fail_[i + 1] = int(k);
  }
}

int Constraint::kmp_next(int state, uint8_t b) const {
  while (state > 0 && uint8_t(trigger_[size_t(state)]) != b) state = fail_[size_t(state)];
  return uint8_t(trigger_[size_t(state)]) == b ? state + 1 : 0;
}

bool Constraint::accept_token(int32_t id) {
  if (is_terminated() || id < 0 || id >= vocab_->size()) return false;
  const Entry e{kmp_, ended_, m_.tokens_accepted()};
  if (triggered()) {
    if (!m_.accept_token(id)) return false;
  } else if (vocab_->is_eos(id)) {
    ended_ = true;
  } else {
    const std::string& b = vocab_->bytes(id);
    int k = kmp_;
    for (size_t i = 0; i < b.size(); ++i) {
      k = kmp_next(k, uint8_t(b[i]));
      if (k == int(trigger_.size())) {  // the grammar starts after byte i
        m_.reset();
        if (!m_.accept_bytes(std::string_view(b).substr(i + 1))) {
          m_.reset();
          return false;
        }
        break;
      }
    }
    kmp_ = k;
  }
  hist_.push_back(e);
  if (int(hist_.size()) > max_rollback_) hist_.pop_front();
  ++accepted_;
  return true;
}

void Constraint::rollback(int k) {
  if (k == 0) return;
  if (k < 0 || k > int(hist_.size()))
    fail("grammar constraint: cannot roll back ", k, " tokens (", hist_.size(), " can be undone)");
  const Entry e = hist_[hist_.size() - size_t(k)];
  hist_.resize(hist_.size() - size_t(k));
  accepted_ -= k;
  kmp_ = e.kmp;
  ended_ = e.ended;
  if (!triggered()) m_.reset();
  else m_.rollback(int(m_.tokens_accepted() - e.matcher_tokens));
}

const std::vector<int32_t>& Constraint::forbidden(int state) {
  auto it = forbidden_.find(state);
  if (it != forbidden_.end()) return it->second;
  std::vector<int32_t> out;
  for (int32_t id = 0; id < int32_t(vocab_->size()); ++id) {
    const std::string& b = vocab_->bytes(id);
    int k = state;
    for (size_t i = 0; i < b.size(); ++i) {
      k = kmp_next(k, uint8_t(b[i]));
      if (k == int(trigger_.size())) {
        if (!m_.could_start_with(std::string_view(b).substr(i + 1))) out.push_back(id);
        break;
      }
    }
  }
  return forbidden_.emplace(state, std::move(out)).first->second;
}

void Constraint::fill_next_token_bitmask(std::span<uint32_t> mask) {
  const int64_t V = vocab_->size();
  GANNET_CHECK(int64_t(mask.size()) * 32 >= V, "token bitmask of ", mask.size(), " words for ", V, " tokens");
  if (triggered() && !ended_) return m_.fill_next_token_bitmask(mask);
  std::fill(mask.begin(), mask.end(), 0u);
  if (ended_) return;
  for (int64_t w = 0; w < V / 32; ++w) mask[size_t(w)] = ~0u;
  for (int64_t t = V / 32 * 32; t < V; ++t) mask[size_t(t / 32)] |= 1u << (t % 32);
  for (int32_t t : forbidden(kmp_)) mask[size_t(t) / 32] &= ~(1u << (t % 32));
}

}  // namespace gannet::structured
