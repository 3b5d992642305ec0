#include "structured/matcher.h"

#include <algorithm>
#include <atomic>
#include <functional>
#include <map>
#include <mutex>
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
    trie_[size_t(at)].subtree_end = int32_t(trie_tokens_.size());
  };
  build(0, 0, ids.size(), 0);
  for (int32_t i : ids)
    if (bytes_[size_t(i)].size() > size_t(kShortBytes)) long_.push_back(i);
  index_occurrences();
}

const std::vector<TokenVocab::Occurrence>& TokenVocab::occurrences(uint8_t b) const { return occ_[b]; }

void TokenVocab::index_occurrences() {
  {
    occ_.assign(256, {});
    for (int32_t t = 0; t < int32_t(bytes_.size()); ++t) {
      const std::string& s = bytes_[size_t(t)];
      if (s.empty() || s.size() > size_t(kShortBytes) || is_eos(t)) continue;
      int32_t node = 0;
      for (size_t i = 0; i < s.size(); ++i) {
        const uint8_t c = uint8_t(s[i]);
        if (i > 0) occ_[c].push_back({t, int32_t(i), node});
        const Node& n = trie_[size_t(node)];
        const auto first = trie_.begin() + n.first_child, last = first + n.n_children;
        node = int32_t(std::lower_bound(first, last, c, [](const Node& x, uint8_t v) { return x.byte < v; }) - trie_.begin());
      }
    }
  }
}

std::shared_ptr<const TokenVocab::Classification> TokenVocab::find_classification(const std::string& key) const {
  std::lock_guard<std::mutex> lk(cls_mu_);
  auto it = cls_.find(key);
  return it == cls_.end() ? nullptr : it->second;
}

std::shared_ptr<const TokenVocab::Classification> TokenVocab::keep_classification(
    const std::string& key, std::shared_ptr<const Classification> c) const {
  std::lock_guard<std::mutex> lk(cls_mu_);
  if (cls_.size() >= 512) cls_.clear();  // up to ~50 KiB each at 129k tokens: 25 MiB at most
  return cls_.emplace(key, std::move(c)).first->second;
}

bool TokenVocab::is_eos(int32_t id) const { return std::find(eos_.begin(), eos_.end(), id) != eos_.end(); }

Automaton::Automaton(std::shared_ptr<const Grammar> grammar, std::shared_ptr<const TokenVocab> vocab)
    : g_(std::move(grammar)), vocab_(std::move(vocab)) {
  GANNET_CHECK(g_ && vocab_);
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
  start_ = set_id(start);
  // The fewest bytes each rule matches (a fixed point from "unbounded"), and the most:
  // unbounded for rules that reach themselves, else the longest alternative's sum.
  constexpr int32_t kInf = kUnbounded;
  min_len_.assign(rules.size(), kInf);
  for (bool changed = true; changed;) {
    changed = false;
    for (size_t r = 0; r < rules.size(); ++r)
      for (const auto& alt : rules[r].alts) {
        int64_t n = 0;
        for (const Element& e : alt) n += e.kind == Element::Kind::kRule ? min_len_[size_t(e.id)] : 1;
        if (n < min_len_[r]) min_len_[r] = int32_t(n), changed = true;
      }
  }
  max_len_.assign(rules.size(), -1);  // -1: not yet known; -2: being computed
  std::function<int32_t(int32_t)> longest = [&](int32_t r) -> int32_t {
    if (max_len_[size_t(r)] == -2) return kInf;  // a cycle
    if (max_len_[size_t(r)] >= 0) return max_len_[size_t(r)];
    max_len_[size_t(r)] = -2;
    int64_t best = 0;
    for (const auto& alt : rules[size_t(r)].alts) {
      int64_t n = 0;
      for (const Element& e : alt) n += e.kind == Element::Kind::kRule ? longest(e.id) : 1;
      best = std::max(best, n);
    }
    return max_len_[size_t(r)] = int32_t(std::min<int64_t>(best, kInf));
  };
  for (size_t r = 0; r < rules.size(); ++r) longest(int32_t(r));
  // A rule on a cycle may have been finished before the cycle was found: redo with the
  // cycle members marked unbounded until nothing changes.
  for (bool changed = true; changed;) {
    changed = false;
    for (size_t r = 0; r < rules.size(); ++r) {
      int64_t best = 0;
      for (const auto& alt : rules[r].alts) {
        int64_t n = 0;
        for (const Element& e : alt) n += e.kind == Element::Kind::kRule ? max_len_[size_t(e.id)] : 1;
        best = std::max(best, n);
      }
      const int32_t v = int32_t(std::min<int64_t>(best, kInf));
      if (v > max_len_[r]) max_len_[r] = v, changed = true;
    }
  }
  set_text_.resize(g_->sets().size());
  for (size_t i = 0; i < set_text_.size(); ++i) {
    const ByteSet& b = g_->sets()[i];
    std::string& t = set_text_[i];
    for (int k = 0; k < 256; k += 8) {
      char c = 0;
      for (int j = 0; j < 8; ++j) c = char(c | (b[size_t(k + j)] << j));
      t += c;
    }
  }
}

int32_t Automaton::set_id(const std::vector<int32_t>& s) {
  auto it = set_ids_.find(s);
  if (it != set_ids_.end()) return it->second;
  const int32_t id = int32_t(sets_.size());
  sets_.push_back(s);
  set_ids_.emplace(s, id);
  trans_.resize(trans_.size() + 256, -2);
  set_escapes_.push_back(!s.empty() && s.front() == kEscape);
  return id;
}

int32_t Automaton::next(int32_t set, uint8_t b) {
  const int32_t t = trans_[size_t(set) * 256 + b];
  if (t != -2) return t;
  const std::vector<int32_t> from = sets_[size_t(set)];  // a copy: set_id may grow sets_
  step(from, b, &scratch_);
  const int32_t id = scratch_.empty() ? -1 : set_id(scratch_);
  trans_[size_t(set) * 256 + b] = id;
  return id;
}

int32_t Automaton::intern(int32_t pos, int32_t parent) {
  const NodeKey k{pos, parent};
  auto it = node_ids_.find(k);
  if (it != node_ids_.end()) return it->second;
  const int32_t id = int32_t(nodes_.size());
  nodes_.push_back(k);
  node_ids_.emplace(k, id);
  return id;
}

void Automaton::expand(int32_t pos, int32_t parent, std::vector<int32_t>* out) {
  for (;;) {
    const Flat f = flat_[size_t(pos)];
    if (f.kind == 0) {
      out->push_back(intern(pos, parent));
      return;
    }
    if (f.kind == 2) {  // the alternative is done: continue in the parent
      if (parent < 0) {  // the document's end, or below a classification's frames
        out->push_back(parent);
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

void Automaton::normalize(std::vector<int32_t>* s) const {
  std::sort(s->begin(), s->end());
  s->erase(std::unique(s->begin(), s->end()), s->end());
}

void Automaton::step(const std::vector<int32_t>& from, uint8_t b, std::vector<int32_t>* out) {
  out->clear();
  const auto& sets = g_->sets();
  for (int32_t c : from) {
    if (c < 0) continue;
    const NodeKey k = nodes_[size_t(c)];
    if (sets[size_t(flat_[size_t(k.pos)].id)][b]) expand(k.pos + 1, k.parent, out);
  }
  normalize(out);
}

bool Automaton::can_end(int32_t set) const {
  for (int32_t x : sets_[size_t(set)]) {  // sorted: the markers come first
    if (x >= 0) break;
    if (x == kAccept) return true;
  }
  return false;
}

namespace {
std::atomic<bool> g_classify{true};
}

void Automaton::set_classify(bool on) { g_classify = on; }

std::string Automaton::frames_key(const std::vector<int32_t>& frames, int32_t bottom) {
  // Rules are unrolled with a byte budget: a reference is written as the fragment of
  // (rule, budget left), fragments numbered in the order met, and nothing is written once
  // the budget is spent (the bytes past it lie beyond every classified token). So a
  // counted repetition with many repetitions left reads the same however many.
  constexpr int32_t kBudget = TokenVocab::kShortBytes + 1;
  std::string key;
  std::map<std::pair<int32_t, int32_t>, int32_t> fragments;
  std::vector<std::pair<int32_t, int32_t>> queue;
  auto put_int = [&](int32_t v) { key.append(reinterpret_cast<const char*>(&v), sizeof v); };
  auto seq = [&](int32_t pos, int32_t budget) {
    for (;; ++pos) {
      if (budget <= 0) {
        key += 'C';
        return;
      }
      const Flat f = flat_[size_t(pos)];
      if (f.kind == 2) {
        key += 'E';
        return;
      }
      if (f.kind == 0) {
        key += 'B';
        key += set_text_[size_t(f.id)];
        budget -= 1;
      } else {
        // A rule that cannot outrun the budget reads the same under any larger one.
        const int32_t b = std::min(budget, max_len_[size_t(f.id)] + 1);
        auto [it, fresh] = fragments.emplace(std::make_pair(f.id, b), int32_t(fragments.size()));
        if (fresh) queue.push_back({f.id, b});
        key += 'R';
        put_int(it->second);
        budget -= std::min<int32_t>(min_len_[size_t(f.id)], kBudget);
      }
    }
  };
  for (int32_t p : frames) seq(p, kBudget);
  key += bottom == kAccept ? 'A' : 'S';
  for (size_t i = 0; i < queue.size(); ++i) {
    key += 'r';
    for (int32_t start : alt_starts_[size_t(queue[i].first)]) seq(start, queue[i].second);
  }
  return key;
}

const TokenVocab::Classification& Automaton::classification(int32_t node) {
  if (auto it = node_cls_.find(node); it != node_cls_.end()) return *it->second;
  std::vector<int32_t> frames;
  int32_t at = node;
  while (at >= 0 && int(frames.size()) < kFrames) {
    frames.push_back(nodes_[size_t(at)].pos);
    at = nodes_[size_t(at)].parent;
  }
  const int32_t bottom = at == kAccept ? kAccept : kEscape;
  const std::string key = frames_key(frames, bottom);
  std::shared_ptr<const TokenVocab::Classification> cls = vocab_->find_classification(key);
  if (!cls) {
    // Walk the trie from the frames alone, with kEscape where the frames below would be.
    int32_t chain = bottom;
    for (size_t i = frames.size(); i-- > 0;) chain = intern(frames[i], chain);
    const int32_t start = set_id({chain});
    auto c = std::make_shared<TokenVocab::Classification>();
    c->accepted.assign(size_t((vocab_->size() + 31) / 32), 0u);
    const TokenVocab::Node* trie = vocab_->trie().data();
    const int32_t* toks = vocab_->token_ids().data();
    cwalk_.clear();
    cwalk_.push_back({0, start, false, 0});
    while (!cwalk_.empty()) {
      const auto [tn, from, unused, depth] = cwalk_.back();
      cwalk_.pop_back();
      const TokenVocab::Node& n = trie[tn];
      for (int32_t ch = n.first_child, end = n.first_child + n.n_children; ch < end; ++ch) {
        const TokenVocab::Node& cn = trie[ch];
        int32_t to = trans_[size_t(from) * 256 + cn.byte];
        if (to == -2) to = next(from, cn.byte);
        if (to < 0) continue;
        for (int32_t t = cn.first_token, te = cn.first_token + cn.n_tokens; t < te; ++t)
          c->accepted[size_t(toks[t]) / 32] |= 1u << (toks[t] % 32);
        if (set_escapes_[size_t(to)]) {  // the frames may be done here
          if (c->escape.empty()) c->escape.assign((vocab_->trie().size() + 63) / 64, 0);
          c->escape[size_t(ch) / 64] |= uint64_t(1) << (ch % 64);
        }
        // Past kShortBytes only long tokens remain: fill_mask_classified checks those.
        if (cn.n_children && depth + 1 < TokenVocab::kShortBytes) cwalk_.push_back({ch, to, false, depth + 1});
      }
    }
    cls = vocab_->keep_classification(key, std::move(c));
  }
  return *node_cls_.emplace(node, std::move(cls)).first->second;
}

int32_t Automaton::escape_set(int32_t node) {
  if (auto it = escape_set_.find(node); it != escape_set_.end()) return it->second;
  int32_t at = node;
  for (int k = 0; k < kFrames && at >= 0; ++k) at = nodes_[size_t(at)].parent;
  int32_t id = -1;
  if (at >= 0) {  // continue where the frames return to, as expand() does at an alternative's end
    std::vector<int32_t> s;
    expand(nodes_[size_t(at)].pos, nodes_[size_t(at)].parent, &s);
    normalize(&s);
    if (!s.empty()) id = set_id(s);
  }
  return escape_set_[node] = id;
}

bool Automaton::fill_mask_classified(int32_t state, uint32_t* m) {
  const std::vector<int32_t> configs = sets_[size_t(state)];  // a copy: sets_ grows below
  const size_t words = size_t((vocab_->size() + 31) / 32);
  std::vector<std::pair<int32_t, const TokenVocab::Classification*>> cls;
  for (int32_t c : configs) {
    if (c < 0) continue;
    const TokenVocab::Classification& x = classification(c);
    cls.push_back({c, &x});
    for (size_t w = 0; w < words; ++w) m[w] |= x.accepted[w];
  }
  // Tokens that leave a configuration's frames mid-token: only those whose next byte the
  // stack below accepts, found through the vocabulary's byte occurrences.
  for (auto [c, x] : cls) {
    if (x->escape.empty()) continue;
    const int32_t e = escape_set(c);
    if (e < 0) continue;
    auto fb = first_bytes_.find(e);
    if (fb == first_bytes_.end()) {
      std::vector<uint8_t> bytes;
      for (int b = 0; b < 256; ++b)
        if (next(e, uint8_t(b)) >= 0) bytes.push_back(uint8_t(b));
      fb = first_bytes_.emplace(e, std::move(bytes)).first;
    }
    if (fb->second.size() > 24) return false;
    for (uint8_t b : fb->second) {
      const int32_t after = next(e, b);
      for (const TokenVocab::Occurrence& o : vocab_->occurrences(b)) {
        if (!((x->escape[size_t(o.prefix) / 64] >> (o.prefix % 64)) & 1u)) continue;
        if ((m[o.token / 32] >> (o.token % 32)) & 1u) continue;
        const std::string& s = vocab_->bytes(o.token);
        int32_t cur = after;
        for (size_t i = size_t(o.pos) + 1; i < s.size() && cur >= 0; ++i) cur = next(cur, uint8_t(s[i]));
        if (cur >= 0) m[o.token / 32] |= 1u << (o.token % 32);
      }
    }
  }
  for (int32_t t : vocab_->long_tokens()) {
    if ((m[t / 32] >> (t % 32)) & 1u) continue;
    int32_t cur = state;
    for (unsigned char b : vocab_->bytes(t))
      if ((cur = next(cur, b)) < 0) break;
    if (cur >= 0) m[t / 32] |= 1u << (t % 32);
  }
  return true;
}

void Automaton::fill_mask(int32_t state, std::span<uint32_t> mask) {
  const int64_t V = vocab_->size();
  GANNET_CHECK(int64_t(mask.size()) * 32 >= V, "token bitmask of ", mask.size(), " words for ", V, " tokens");
  if (auto it = masks_.find(state); it != masks_.end()) {
    std::copy(it->second.begin(), it->second.end(), mask.begin());
    std::fill(mask.begin() + int64_t(it->second.size()), mask.end(), 0u);
    return;
  }
  std::fill(mask.begin(), mask.end(), 0u);
  uint32_t* m = mask.data();
  if (can_end(state))
    for (int32_t e : vocab_->eos_ids()) m[e / 32] |= 1u << (e % 32);
  const TokenVocab::Node* trie = vocab_->trie().data();
  const int32_t* toks = vocab_->token_ids().data();
  // A set that many bytes continue (inside a string, say) would walk most of the trie:
  // its configurations' classifications give the mask instead.
  int wide = 0;
  if (g_classify)
    for (int32_t c = trie[0].first_child; c < trie[0].first_child + trie[0].n_children; ++c)
      wide += next(state, trie[c].byte) >= 0;
  if (wide <= 48 || !fill_mask_classified(state, m)) {
    std::fill(mask.begin(), mask.end(), 0u);
    if (can_end(state))
      for (int32_t e : vocab_->eos_ids()) m[e / 32] |= 1u << (e % 32);
  // Depth-first over the trie (an explicit stack): a subtree is skipped as soon as its
  // prefix is refused.
  walk_.clear();
  walk_.push_back({0, state});
  while (!walk_.empty()) {
    const auto [node, from] = walk_.back();
    walk_.pop_back();
    const TokenVocab::Node& n = trie[node];
    for (int32_t c = n.first_child, end = n.first_child + n.n_children; c < end; ++c) {
      const TokenVocab::Node& ch = trie[c];
      int32_t to = trans_[size_t(from) * 256 + ch.byte];
      if (to == -2) to = next(from, ch.byte);
      if (to < 0) continue;
      for (int32_t t = ch.first_token, te = ch.first_token + ch.n_tokens; t < te; ++t) m[toks[t] / 32] |= 1u << (toks[t] % 32);
      if (ch.n_children) walk_.push_back({c, to});
    }
  }
  }
  if (masks_.size() >= kMaskCache) masks_.clear();
  masks_.emplace(state, std::vector<uint32_t>(mask.begin(), mask.begin() + (V + 31) / 32));
}

Matcher::Matcher(std::shared_ptr<Automaton> automaton, int max_rollback)
    : a_(std::move(automaton)), max_rollback_(max_rollback) {
  GANNET_CHECK(a_ && max_rollback >= 0);
  state_ = a_->start_;
}

Matcher::Matcher(std::shared_ptr<const Grammar> grammar, std::shared_ptr<const TokenVocab> vocab, int max_rollback)
    : Matcher(std::make_shared<Automaton>(std::move(grammar), std::move(vocab)), max_rollback) {}

void Matcher::reset() {
  state_ = a_->start_;
  history_.clear();
  terminated_ = false;
  accepted_ = 0;
}

bool Matcher::walk(int32_t cur, std::string_view bytes, int32_t* to) {
  for (unsigned char b : bytes)
    if ((cur = a_->next(cur, b)) < 0) return false;
  *to = cur;
  return true;
}

bool Matcher::could_start_with(std::string_view bytes) {
  std::lock_guard<std::mutex> lk(a_->mu_);
  int32_t to;
  return walk(a_->start_, bytes, &to);
}

bool Matcher::accept_bytes(std::string_view bytes) {
  if (terminated_) return false;
  std::lock_guard<std::mutex> lk(a_->mu_);
  return walk(state_, bytes, &state_);
}

bool Matcher::can_end() const {
  std::lock_guard<std::mutex> lk(a_->mu_);
  return a_->can_end(state_);
}

bool Matcher::accept_token(int32_t id) {
  if (terminated_ || id < 0 || id >= a_->vocab_->size()) return false;
  const int32_t before = state_;
  if (a_->vocab_->is_eos(id)) {
    if (!can_end()) return false;
    terminated_ = true;
  } else {
    const std::string& b = a_->vocab_->bytes(id);
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
  if (terminated_) {
    const int64_t V = a_->vocab_->size();
    GANNET_CHECK(int64_t(mask.size()) * 32 >= V, "token bitmask of ", mask.size(), " words for ", V, " tokens");
    std::fill(mask.begin(), mask.end(), 0u);
    return;
  }
  std::lock_guard<std::mutex> lk(a_->mu_);
  a_->fill_mask(state_, mask);
}

}  // namespace gannet::structured
