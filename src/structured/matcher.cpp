#include "structured/matcher.h"

#include <algorithm>
#include <functional>
#include <numeric>

#include "core/error.h"

namespace gannet::structured {

TokenVocab::TokenVocab(std::vector<std::string> token_bytes, std::vector<int32_t> eos_ids)
    : bytes_(std::move(token_bytes)), eos_(std::move(eos_ids)) {
  for (int32_t e : eos_)
    if (e < 0 || e >= int32_t(bytes_.size())) fail("grammar vocabulary: EOS id ", e, " is outside the vocabulary");
  std::vector<int32_t> ids;
  for (int32_t i = 0; i < int32_t(bytes_.size()); ++i)
    if (!bytes_[size_t(i)].empty() && !is_eos(i)) ids.push_back(i);
  std::sort(ids.begin(), ids.end(), [&](int32_t a, int32_t b) {
    return bytes_[size_t(a)] != bytes_[size_t(b)] ? bytes_[size_t(a)] < bytes_[size_t(b)] : a < b;
  });
  // Node `at` covers ids[lo, hi), all sharing their first `depth` bytes; its children are
  // laid out contiguously before any grandchild.
  trie_.push_back({});
  std::function<void(int32_t, size_t, size_t, size_t)> build = [&](int32_t at, size_t lo, size_t hi, size_t depth) {
    size_t i = lo;
    trie_[size_t(at)].first_token = int32_t(trie_tokens_.size());
    while (i < hi && bytes_[size_t(ids[i])].size() == depth) trie_tokens_.push_back(ids[i++]);
    trie_[size_t(at)].n_tokens = int32_t(trie_tokens_.size()) - trie_[size_t(at)].first_token;
    std::vector<std::pair<size_t, size_t>> groups;
    while (i < hi) {
      const unsigned char c = (unsigned char)bytes_[size_t(ids[i])][depth];
      size_t j = i;
      while (j < hi && (unsigned char)bytes_[size_t(ids[j])][depth] == c) ++j;
      groups.push_back({i, j});
      i = j;
    }
    const int32_t first = int32_t(trie_.size());
    trie_[size_t(at)].first_child = first;
    trie_[size_t(at)].n_children = int32_t(groups.size());
    for (auto [a, b] : groups) {
      Node n;
      n.byte = (unsigned char)bytes_[size_t(ids[a])][depth];
      trie_.push_back(n);
    }
    for (size_t g = 0; g < groups.size(); ++g) build(first + int32_t(g), groups[g].first, groups[g].second, depth + 1);
  };
  build(0, 0, ids.size(), 0);
}

bool TokenVocab::is_eos(int32_t id) const { return std::find(eos_.begin(), eos_.end(), id) != eos_.end(); }

Matcher::Matcher(std::shared_ptr<const Grammar> grammar, std::shared_ptr<const TokenVocab> vocab, int max_rollback)
    : g_(std::move(grammar)), vocab_(std::move(vocab)), max_rollback_(max_rollback) {
  GANNET_CHECK(g_ && vocab_ && max_rollback >= 0);
  g_->check();
  const auto& rules = g_->rules();
  alt_starts_.resize(rules.size());
  for (size_t r = 0; r < rules.size(); ++r)
    for (const auto& alt : rules[r].alts) {
      alt_starts_[r].push_back(int32_t(flat_.size()));
      for (const Element& e : alt) flat_.push_back({int8_t(e.kind == Element::Kind::kRule ? 1 : 0), e.id});
      flat_.push_back({2, 0});
    }
  // The document: the root rule, then the end of input.
  const int32_t top = int32_t(flat_.size());
  flat_.push_back({1, g_->root()});
  flat_.push_back({2, 0});
  std::vector<int32_t> start;
  expand(top, kAccept, &start);
  normalize(&start);
  start_ = state_ = set_id(start);
}

void Matcher::reset() {
  state_ = start_;
  history_.clear();
  terminated_ = false;
  accepted_ = 0;
}

bool Matcher::could_start_with(std::string_view bytes) {
  int32_t cur = start_;
  for (unsigned char b : bytes)
    if ((cur = next(cur, b)) < 0) return false;
  return true;
}

int32_t Matcher::set_id(const std::vector<int32_t>& s) {
  auto it = set_ids_.find(s);
  if (it != set_ids_.end()) return it->second;
  const int32_t id = int32_t(sets_.size());
  sets_.push_back(s);
  set_ids_.emplace(s, id);
  trans_.resize(trans_.size() + 256, -2);
  return id;
}

int32_t Matcher::next(int32_t set, uint8_t b) {
  int32_t& t = trans_[size_t(set) * 256 + b];
  if (t != -2) return t;
  const std::vector<int32_t> from = sets_[size_t(set)];  // a copy: set_id may grow sets_
  step(from, b, &scratch_);
  const int32_t id = scratch_.empty() ? -1 : set_id(scratch_);
  trans_[size_t(set) * 256 + b] = id;  // t may dangle after set_id grew trans_
  return id;
}

int32_t Matcher::intern(int32_t pos, int32_t parent) {
  const NodeKey k{pos, parent};
  auto it = node_ids_.find(k);
  if (it != node_ids_.end()) return it->second;
  const int32_t id = int32_t(nodes_.size());
  nodes_.push_back(k);
  node_ids_.emplace(k, id);
  return id;
}

void Matcher::expand(int32_t pos, int32_t parent, std::vector<int32_t>* out) {
  for (;;) {
    const Flat f = flat_[size_t(pos)];
    if (f.kind == 0) {
      out->push_back(intern(pos, parent));
      return;
    }
    if (f.kind == 2) {  // the alternative is done: continue in the parent
      if (parent == kAccept) {
        out->push_back(kAccept);
        return;
      }
      const NodeKey p = nodes_[size_t(parent)];
      pos = p.pos;
      parent = p.parent;
      continue;
    }
    // A rule: return to the next element afterwards (straight to the parent when the
    // reference ends its alternative, so right recursion does not deepen the stack).
    const int32_t ret = flat_[size_t(pos) + 1].kind == 2 ? parent : intern(pos + 1, parent);
    const auto& starts = alt_starts_[size_t(f.id)];
    for (size_t i = 0; i + 1 < starts.size(); ++i) expand(starts[i], ret, out);
    if (starts.empty()) return;
    pos = starts.back();
    parent = ret;
  }
}

void Matcher::normalize(std::vector<int32_t>* s) const {
  std::sort(s->begin(), s->end());
  s->erase(std::unique(s->begin(), s->end()), s->end());
}

void Matcher::step(const std::vector<int32_t>& from, uint8_t b, std::vector<int32_t>* out) {
  out->clear();
  const auto& sets = g_->sets();
  for (int32_t c : from) {
    if (c == kAccept) continue;
    const NodeKey k = nodes_[size_t(c)];
    if (sets[size_t(flat_[size_t(k.pos)].id)][b]) expand(k.pos + 1, k.parent, out);
  }
  normalize(out);
}

bool Matcher::accept_bytes(std::string_view bytes) {
  if (terminated_) return false;
  int32_t cur = state_;
  for (unsigned char b : bytes) {
    cur = next(cur, b);
    if (cur < 0) return false;
  }
  state_ = cur;
  return true;
}

bool Matcher::can_end() const {
  const std::vector<int32_t>& s = sets_[size_t(state_)];
  return !s.empty() && s.front() == kAccept;
}

bool Matcher::accept_token(int32_t id) {
  if (terminated_ || id < 0 || id >= vocab_->size()) return false;
  const int32_t before = state_;
  if (vocab_->is_eos(id)) {
    if (!can_end()) return false;
    terminated_ = true;
  } else {
    const std::string& b = vocab_->bytes(id);
    if (b.empty() || !accept_bytes(b)) return false;
  }
  history_.push_back(before);
  if (int(history_.size()) > max_rollback_) history_.erase(history_.begin());
  ++accepted_;
  return true;
}

void Matcher::rollback(int k) {
  if (k == 0) return;
  if (k < 0 || k > int(history_.size()))
    fail("grammar matcher: cannot roll back ", k, " tokens (", history_.size(), " can be undone)");
  state_ = history_[history_.size() - size_t(k)];
  history_.resize(history_.size() - size_t(k));
  terminated_ = false;  // an EOS is always the last token accepted
  accepted_ -= k;
}

void Matcher::fill_next_token_bitmask(std::span<uint32_t> mask) {
  const int64_t V = vocab_->size();
  GANNET_CHECK(int64_t(mask.size()) * 32 >= V, "token bitmask of ", mask.size(), " words for ", V, " tokens");
  std::fill(mask.begin(), mask.end(), 0u);
  if (terminated_) return;
  if (auto it = masks_.find(state_); it != masks_.end()) {
    std::copy(it->second.begin(), it->second.end(), mask.begin());
    return;
  }
  auto set = [&](int32_t id) { mask[size_t(id) / 32] |= 1u << (id % 32); };
  if (can_end())
    for (int32_t e : vocab_->eos_ids()) set(e);
  const auto& trie = vocab_->trie();
  const auto& toks = vocab_->token_ids();
  // Depth-first over the trie: a subtree is skipped as soon as its prefix is refused.
  std::function<void(int32_t, int32_t)> dfs = [&](int32_t node, int32_t from) {
    const TokenVocab::Node& n = trie[size_t(node)];
    for (int32_t c = n.first_child; c < n.first_child + n.n_children; ++c) {
      const TokenVocab::Node& ch = trie[size_t(c)];
      const int32_t to = next(from, ch.byte);
      if (to < 0) continue;
      for (int32_t t = ch.first_token; t < ch.first_token + ch.n_tokens; ++t) set(toks[size_t(t)]);
      if (ch.n_children) dfs(c, to);
    }
  };
  dfs(0, state_);
  if (masks_.size() >= kMaskCache) masks_.clear();
  masks_.emplace(state_, std::vector<uint32_t>(mask.begin(), mask.begin() + (V + 31) / 32));
}

}  // namespace gannet::structured
