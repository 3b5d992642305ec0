#include "structured/matcher.h"

#include <algorithm>
#include <atomic>
#include <chrono>
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
    if (trie_tokens_.size() - size_t(trie_[size_t(at)].first_token) > 255)
      fail("grammar vocabulary: more than 255 tokens with the same bytes");
    trie_[size_t(at)].n_tokens = uint8_t(trie_tokens_.size() - size_t(trie_[size_t(at)].first_token));
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
    trie_[size_t(at)].n_children = uint16_t(groups.size());
    for (auto [a, b] : groups) {
      Node n;
      n.byte = (unsigned char)bytes_[size_t(ids[a])][depth];
      trie_.push_back(n);
    }
    for (size_t g = 0; g < groups.size(); ++g) build(first + int32_t(g), groups[g].first, groups[g].second, depth + 1);
    if (subtree_end_.size() < trie_.size()) subtree_end_.resize(trie_.size(), 0);
    subtree_end_[size_t(at)] = int32_t(trie_tokens_.size());
  };
  build(0, 0, ids.size(), 0);
  subtree_end_.resize(trie_.size(), 0);
  below_.assign(trie_.size(), {});
  for (size_t n = trie_.size(); n-- > 0;)  // children come after their parent
    for (int32_t c = trie_[n].first_child; c < trie_[n].first_child + trie_[n].n_children; ++c) {
      const uint8_t b = trie_[size_t(c)].byte;
      below_[n][b / 64] |= uint64_t(1) << (b % 64);
      for (int w = 0; w < 4; ++w) below_[n][size_t(w)] |= below_[size_t(c)][size_t(w)];
    }
  len_.resize(bytes_.size());
  for (size_t t = 0; t < bytes_.size(); ++t) len_[t] = uint8_t(std::min<size_t>(bytes_[t].size(), 255));
  // Sub-tries of the tokens in a range of lengths (lo, hi]: the trie nodes with such a
  // token in their subtree, laid out like the trie.
  auto sub_trie = [&](size_t lo, size_t hi, std::vector<LongNode>* out, std::vector<int32_t>* out_ids) {
    std::vector<uint8_t> has(trie_.size(), 0);
    std::function<bool(int32_t, size_t)> mark = [&](int32_t at, size_t depth) {
      const Node& n = trie_[size_t(at)];
      bool any = depth > lo && depth <= hi && n.n_tokens > 0;
      for (int32_t c = n.first_child; c < n.first_child + n.n_children; ++c) any = mark(c, depth + 1) || any;
      has[size_t(at)] = any;
      return any;
    };
    mark(0, 0);
    out->push_back({});
    std::function<void(int32_t, int32_t, size_t)> copy = [&](int32_t at, int32_t to, size_t depth) {
      const Node& n = trie_[size_t(at)];
      (*out)[size_t(to)].first_token = int32_t(out_ids->size());
      if (depth > lo && depth <= hi) {
        for (int32_t t = n.first_token; t < n.first_token + n.n_tokens; ++t) out_ids->push_back(trie_tokens_[size_t(t)]);
        (*out)[size_t(to)].n_tokens = n.n_tokens;
      }
      std::vector<int32_t> kids;
      for (int32_t c = n.first_child; c < n.first_child + n.n_children; ++c)
        if (has[size_t(c)]) kids.push_back(c);
      const int32_t first = int32_t(out->size());
      (*out)[size_t(to)].first_child = first;
      (*out)[size_t(to)].n_children = int32_t(kids.size());
      for (int32_t c : kids) {
        LongNode l;
        l.byte = trie_[size_t(c)].byte;
        out->push_back(l);
      }
      for (size_t k = 0; k < kids.size(); ++k) copy(kids[k], first + int32_t(k), depth + 1);
      (*out)[size_t(to)].subtree_end = int32_t(out_ids->size());
    };
    if (has[0]) copy(0, 0, 0);
  };
  sub_trie(size_t(kShortBytes), size_t(kLongBytes), &long_trie_, &long_ids_);
  sub_trie(size_t(kLongBytes), size_t(1) << 30, &longest_trie_, &longest_ids_);
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

template <class T>
std::shared_ptr<const T> TokenVocab::find_in(const Kept<T>& k, const std::string& key) const {
  std::lock_guard<std::mutex> lk(cls_mu_);
  auto it = k.map.find(key);
  return it == k.map.end() ? nullptr : it->second;
}

template <class T>
std::shared_ptr<const T> TokenVocab::keep_in(Kept<T>& k, const std::string& key, std::shared_ptr<const T> c) const {
  std::lock_guard<std::mutex> lk(cls_mu_);
  if (k.map.size() >= k.cap) k.map.clear();
  return k.map.emplace(key, std::move(c)).first->second;
}

std::shared_ptr<const TokenVocab::Classification> TokenVocab::find_classification(const std::string& key) const {
  return find_in(cls_, key);
}
std::shared_ptr<const TokenVocab::Classification> TokenVocab::keep_classification(
    const std::string& key, std::shared_ptr<const Classification> c) const {
  return keep_in(cls_, key, std::move(c));
}
std::shared_ptr<const TokenVocab::CountedClassification> TokenVocab::find_counted(const std::string& key) const {
  return find_in(counted_, key);
}
std::shared_ptr<const TokenVocab::CountedClassification> TokenVocab::keep_counted(
    const std::string& key, std::shared_ptr<const CountedClassification> c) const {
  return keep_in(counted_, key, std::move(c));
}
std::shared_ptr<const TokenVocab::LongClass> TokenVocab::find_long(const std::string& key) const {
  return find_in(long_, key);
}
std::shared_ptr<const TokenVocab::LongClass> TokenVocab::keep_long(const std::string& key,
                                                                   std::shared_ptr<const LongClass> c) const {
  return keep_in(long_, key, std::move(c));
}

int64_t TokenVocab::fragment_id(const std::string& text) const {
  std::lock_guard<std::mutex> lk(cls_mu_);
  if (fragments_.size() >= (size_t(1) << 17)) {  // ~100 bytes each: ~13 MiB
    // Bounded: start the ids anew (a new generation, so no old id is ever taken for a new
    // one) and drop what was kept under the old ones.
    fragments_.clear();
    cls_.map.clear();
    counted_.map.clear();
    long_.map.clear();
    generation_.fetch_add(1);
  }
  const int64_t id = (int64_t(generation_.load()) << 32) | int64_t(fragments_.size());
  return fragments_.emplace(text, id).first->second;
}

bool TokenVocab::is_eos(int32_t id) const { return std::find(eos_.begin(), eos_.end(), id) != eos_.end(); }

Automaton::Automaton(std::shared_ptr<const Grammar> grammar, std::shared_ptr<const TokenVocab> vocab)
    : g_(std::move(grammar)), vocab_(std::move(vocab)) {
  GANNET_CHECK(g_ && vocab_);
  g_->check();
  const auto& rules = g_->rules();
  alt_starts_.resize(rules.size());
  body_start_.assign(rules.size(), -1);
  for (size_t r = 0; r < rules.size(); ++r)
    for (const auto& alt : rules[r].alts) {
      alt_starts_[r].push_back(int32_t(flat_.size()));
      if (!alt.empty()) body_start_[r] = int32_t(flat_.size());
      for (const Element& e : alt) {
        flat_.push_back({int8_t(e.kind == Element::Kind::kRule ? 1 : 0), e.id});
        flat_rule_.push_back(int32_t(r));
      }
      flat_.push_back({2, 0});
      flat_rule_.push_back(int32_t(r));
    }
  // The document: the root rule, then the end of input.
  const int32_t top = int32_t(flat_.size());
  flat_.push_back({1, g_->root()});
  flat_.push_back({2, 0});
  flat_rule_.push_back(-1);
  flat_rule_.push_back(-1);
  // Bytes that every byte set of the grammar takes or refuses alike lead anywhere alike:
  // a transition computed for one is the transition of its whole class.
  {
    std::map<std::string, int32_t> signature_class;
    for (int b = 0; b < 256; ++b) {
      std::string sig(g_->sets().size(), '0');
      for (size_t i = 0; i < sig.size(); ++i) sig[i] = g_->sets()[i][size_t(b)] ? '1' : '0';
      auto [it, fresh] = signature_class.emplace(sig, int32_t(class_bytes_.size()));
      if (fresh) class_bytes_.emplace_back();
      class_bytes_[size_t(it->second)].push_back(uint8_t(b));
      byte_class_[size_t(b)] = uint8_t(it->second);
    }
    n_classes_ = int32_t(class_bytes_.size());
    class_mask_.assign(g_->sets().size(), {});
    for (size_t i = 0; i < class_mask_.size(); ++i)
      for (int32_t k = 0; k < n_classes_; ++k)
        if (g_->sets()[i][class_bytes_[size_t(k)][0]]) class_mask_[i][size_t(k) / 64] |= uint64_t(1) << (k % 64);
  }
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
  // Counted repetitions (see Counted in matcher.h).
  counted_.assign(rules.size(), {});
  syn_chain_.assign(rules.size(), -1);
  syn_index_.assign(rules.size(), -1);
  std::vector<int8_t> looked(rules.size(), 0);
  auto body_of = [&](size_t r, bool* optional) -> const std::vector<Element>* {
    const auto& alts = rules[r].alts;
    if (alts.size() == 1 && !alts[0].empty()) return *optional = false, &alts[0];
    if (alts.size() == 2 && alts[0].empty() != alts[1].empty()) return *optional = true, alts[0].empty() ? &alts[1] : &alts[0];
    return nullptr;
  };
  auto same = [](const Element& x, const Element& y) { return x.kind == y.kind && x.id == y.id; };
  auto inner_id = [&](std::vector<Element> x) -> int32_t {
    int64_t len = 0;
    for (const Element& e : x) len += e.kind == Element::Kind::kRule ? min_len_[size_t(e.id)] : 1;
    if (len < 1) return -1;  // an inner that may match nothing has no count
    std::vector<std::pair<int, int32_t>> key;
    for (const Element& e : x) key.push_back({int(e.kind), e.id});
    auto [it, fresh] = inner_ids_.emplace(key, int32_t(inners_.size()));
    if (fresh) inners_.push_back(std::move(x));
    return it->second;
  };
  // Whether `body` (from `from` to `to`) is inners_[x] repeated; how many times.
  auto copies_of = [&](const std::vector<Element>& body, size_t to, int32_t x) -> int32_t {
    const std::vector<Element>& in = inners_[size_t(x)];
    if (to == 0 || to % in.size()) return 0;
    for (size_t i = 0; i < to; ++i)
      if (!same(body[i], in[i % in.size()])) return 0;
    return int32_t(to / in.size());
  };
  std::function<void(size_t)> detect = [&](size_t r) {
    if (looked[r]) return;
    looked[r] = 1;  // a rule reaching itself through its last element is looked at once
    bool optional = false;
    const std::vector<Element>* body = body_of(r, &optional);
    if (!body) return;
    Counted c;
    c.optional = optional;
    const Element& last = body->back();
    if (last.kind == Element::Kind::kRule && size_t(last.id) == r && optional && body->size() >= 2) {
      // A star X* (X r | ()): a tail only, counts nothing itself.
      c.inner = inner_id(std::vector<Element>(body->begin(), body->end() - 1));
      c.copies = 1;
      c.tail = -1;
      c.star = true;
      if (c.inner >= 0) counted_[r] = c;
      return;
    }
    if (last.kind == Element::Kind::kRule && body->size() >= 2) {
      detect(size_t(last.id));
      const Counted& t = counted_[size_t(last.id)];
      // Only a tail of one copy matches every count from 0 to its most (X X u | () skips 1).
      if (t.inner >= 0 && t.optional && t.copies == 1) {
        const int32_t m = copies_of(*body, body->size() - 1, t.inner);
        if (m >= 1) {
          c.inner = t.inner;
          c.copies = m;
          c.tail = t.tail < 0 ? -1 : t.copies + t.tail;
          counted_[r] = c;
          return;
        }
      }
    }
    if (optional) {
      c.inner = inner_id(*body);
      c.copies = 1;
      c.tail = 0;
    } else {  // the body repeats its shortest period at least twice
      for (size_t p = 1; p * 2 <= body->size() && c.inner < 0; ++p) {
        if (body->size() % p) continue;
        bool periodic = true;
        for (size_t i = p; i < body->size() && periodic; ++i) periodic = same((*body)[i], (*body)[i - p]);
        if (!periodic) continue;
        c.inner = inner_id(std::vector<Element>(body->begin(), body->begin() + int64_t(p)));
        c.copies = int32_t(body->size() / p);
        c.tail = 0;
      }
    }
    if (c.inner >= 0) counted_[r] = c;
  };
  for (size_t r = 0; r < rules.size(); ++r) detect(r);
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
  trans_.resize(trans_.size() + size_t(n_classes_), -2);
  set_escapes_.push_back(!s.empty() && s.front() == kEscape);
  return id;
}

int32_t Automaton::learn(int32_t set, uint8_t b) {
  step(sets_[size_t(set)], b, &scratch_);  // (step leaves sets_ alone; set_id below may grow it)
  const int32_t id = scratch_.empty() ? -1 : set_id(scratch_);
  // The step depends only on which configurations take the byte: every byte class that
  // this set's configurations take or refuse alike goes the same way. (Not for the plain
  // walk tests compare with: there each class is learnt on its own.)
  const size_t row = size_t(set) * size_t(n_classes_);
  if (reference_) {
    trans_[row + byte_class_[b]] = id;
    return id;
  }
  std::array<uint64_t, 4> same;
  same.fill(~uint64_t(0));
  const uint8_t mine = byte_class_[b];
  for (int32_t c : sets_[size_t(set)]) {
    if (c < 0) continue;
    const auto& cm = class_mask_[size_t(flat_[size_t(untag(nodes_[size_t(c)].pos))].id)];
    const bool takes = (cm[mine / 64] >> (mine % 64)) & 1u;
    for (int w = 0; w < 4; ++w) same[size_t(w)] &= takes ? cm[size_t(w)] : ~cm[size_t(w)];
  }
  for (int w = 0; w < 4; ++w)
    for (uint64_t bits = same[size_t(w)]; bits; bits &= bits - 1) {
      const int32_t k = w * 64 + __builtin_ctzll(bits);
      if (k < n_classes_ && trans_[row + size_t(k)] == -2) trans_[row + size_t(k)] = id;
    }
  trans_[row + byte_class_[b]] = id;
  return id;
}

int32_t Automaton::intern(int32_t pos, int32_t parent) {
  // Open addressing (linear probing, at most half full): interning is most of what
  // learning a transition costs.
  if ((nodes_.size() + 1) * 2 > node_slots_.size()) {
    std::vector<int32_t> slots(std::max<size_t>(4096, node_slots_.size() * 2), -1);
    for (size_t id = 0; id < nodes_.size(); ++id) {
      size_t h = node_hash(nodes_[id].pos, nodes_[id].parent) & (slots.size() - 1);
      while (slots[h] >= 0) h = (h + 1) & (slots.size() - 1);
      slots[h] = int32_t(id);
    }
    node_slots_.swap(slots);
  }
  const size_t mask = node_slots_.size() - 1;
  size_t h = node_hash(pos, parent) & mask;
  for (;; h = (h + 1) & mask) {
    const int32_t id = node_slots_[h];
    if (id < 0) break;
    if (nodes_[size_t(id)].pos == pos && nodes_[size_t(id)].parent == parent) return id;
  }
  const int32_t id = int32_t(nodes_.size());
  nodes_.push_back({pos, parent});
  node_slots_[h] = id;
  return id;
}

void Automaton::expand(int32_t pos, int32_t parent, std::vector<int32_t>* out) {
  for (;;) {
    const Flat f = flat_[size_t(untag(pos))];
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
    const int32_t ret = flat_[size_t(untag(pos)) + 1].kind == 2 ? parent : intern(pos + 1, parent);
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
    if (!sets[size_t(flat_[size_t(untag(k.pos))].id)][b]) continue;
    // What follows a configuration's byte is the same whatever the byte: expanded once.
    if (size_t(c) >= succ_known_.size()) {
      succ_known_.resize(nodes_.size(), 0);
      succ_.resize(nodes_.size());
    }
    if (!succ_known_[size_t(c)]) {
      std::vector<int32_t> v;
      expand(k.pos + 1, k.parent, &v);
      if (succ_.size() < nodes_.size()) succ_known_.resize(nodes_.size(), 0), succ_.resize(nodes_.size());
      succ_[size_t(c)] = std::move(v);
      succ_known_[size_t(c)] = 1;
    }
    out->insert(out->end(), succ_[size_t(c)].begin(), succ_[size_t(c)].end());
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



int64_t Automaton::seq_id(int32_t pos, int32_t budget) {
  // The elements from `pos` to the end of its alternative, unrolled within `budget` bytes:
  // a byte set as its 32 bytes, a rule as the id of (rule, budget left), nothing once the
  // budget is spent (the bytes past it lie beyond every token it is used for). So a
  // counted repetition with many repetitions left reads the same however many. Ids are
  // the vocabulary's, shared by every grammar: equal ids, equal unrolled text.
  const uint64_t mk = (uint64_t(uint32_t(pos)) << 32) | uint32_t(budget);
  if (auto it = seq_memo_.find(mk); it != seq_memo_.end()) return it->second;
  std::string text = "s";
  auto put_int = [&](int64_t v) { text.append(reinterpret_cast<const char*>(&v), sizeof v); };
  for (int32_t p = pos, b = budget;; ++p) {
    if (b <= 0) {
      text += 'C';
      break;
    }
    const Flat f = flat_[size_t(untag(p))];
    if (f.kind == 2) {
      text += 'E';
      break;
    }
    if (f.kind == 0) {
      text += 'B';
      text += set_text_[size_t(f.id)];
      b -= 1;
    } else {
      // A rule that cannot outrun the budget reads the same under any larger one.
      text += 'R';
      put_int(frag_id(f.id, std::min(b, max_len_[size_t(f.id)] + 1)));
      b -= std::min<int32_t>(min_len_[size_t(f.id)], b);
    }
  }
  return seq_memo_[mk] = vocab_->fragment_id(text);
}

int64_t Automaton::frag_id(int32_t rule, int32_t budget) {
  const uint64_t mk = (uint64_t(uint32_t(rule)) << 32) | uint32_t(budget);
  if (auto it = frag_memo_.find(mk); it != frag_memo_.end()) return it->second;
  std::string text = "r";
  for (int32_t start : alt_starts_[size_t(rule)]) {
    const int64_t id = seq_id(start, budget);
    text.append(reinterpret_cast<const char*>(&id), sizeof id);
  }
  return frag_memo_[mk] = vocab_->fragment_id(text);
}

std::string Automaton::frames_key(const Frames& f, int32_t budget) {
  if (vocab_->generation() != memo_gen_) {  // the vocabulary started its fragment ids anew
    seq_memo_.clear();
    frag_memo_.clear();
    memo_gen_ = vocab_->generation();
  }
  // The tops' ids in order (tops whose languages read the same count once), then the
  // frames below.
  std::vector<int64_t> ids;
  for (int32_t p : f.tops) ids.push_back(seq_id(p, budget));
  std::sort(ids.begin(), ids.end());
  ids.erase(std::unique(ids.begin(), ids.end()), ids.end());
  std::string key;
  auto put = [&](int64_t v) { key.append(reinterpret_cast<const char*>(&v), sizeof v); };
  put(int64_t(ids.size()));
  for (int64_t id : ids) put(id);
  for (int32_t p : f.lower) put(seq_id(p, budget));
  key += f.bottom == kAccept ? 'A' : 'S';
  return key;
}

const std::array<uint64_t, 4>& Automaton::loop_bytes(int32_t set) {
  auto it = loop_bytes_.find(set);
  if (it != loop_bytes_.end()) return it->second;
  std::array<uint64_t, 4> m{};
  for (int32_t k = 0; k < n_classes_; ++k)
    if (next(set, class_bytes_[size_t(k)][0]) == set)
      for (uint8_t b : class_bytes_[size_t(k)]) m[b / 64] |= uint64_t(1) << (b % 64);
  return loop_bytes_[set] = m;
}

Automaton::Frames Automaton::group_frames(int32_t parent, const std::vector<int32_t>& tops) {
  Frames f;
  f.tops = tops;
  int32_t at = parent;
  while (at >= 0 && int(f.lower.size()) < kFrames - 1) {
    f.lower.push_back(nodes_[size_t(at)].pos);
    at = nodes_[size_t(at)].parent;
  }
  f.bottom = at == kAccept ? kAccept : kEscape;
  return f;
}

int32_t Automaton::start_set(const Frames& f, size_t fi, int32_t* p0) {
  // With a counted frame fi (0: the single top; i: lower[i - 1]), the frames below it get
  // a tagged identity, P0: the same grammar positions, told apart from a later repetition
  // of the same inner entered from the same return point (a list of counted items).
  int32_t chain = f.bottom;
  auto tag = [&] {
    if (chain >= 0) chain = intern(nodes_[size_t(chain)].pos | kTag, nodes_[size_t(chain)].parent);
    if (p0) *p0 = chain;
  };
  for (size_t i = f.lower.size(); i-- > 0;) {
    if (fi == i + 1) tag();
    chain = intern(f.lower[i], chain);
  }
  if (fi == 0) tag();
  std::vector<int32_t> s;
  for (int32_t p : f.tops) s.push_back(intern(p, chain));
  normalize(&s);
  return set_id(s);
}

const TokenVocab::Classification& Automaton::classification(int32_t parent, const std::vector<int32_t>& tops) {
  std::vector<int32_t> ck = tops;
  ck.push_back(parent);
  if (auto it = group_cls_.find(ck); it != group_cls_.end()) return *it->second;
  const Frames f = group_frames(parent, tops);
  const std::string key = frames_key(f, TokenVocab::kShortBytes + 1);
  std::shared_ptr<const TokenVocab::Classification> cls = vocab_->find_classification(key);
  if (!cls) {
    cls = counted_classification(f);
    if (!cls) cls = walk_classification(start_set(f, kNoFrame, nullptr));
    cls = vocab_->keep_classification(key, std::move(cls));
  }
  if (group_cls_.size() >= kGroupCache) group_cls_.clear();  // bounded: a classification is ~50 KiB
  return *group_cls_.emplace(std::move(ck), std::move(cls)).first->second;
}

std::shared_ptr<const TokenVocab::Classification> Automaton::walk_classification(int32_t start) {
  auto c = std::make_shared<TokenVocab::Classification>();
  c->accepted.assign(size_t((vocab_->size() + 31) / 32), 0u);
  uint32_t* acc = c->accepted.data();
  const TokenVocab::Node* trie = vocab_->trie().data();
  const int32_t* toks = vocab_->token_ids().data();
  struct Item {
    int32_t tn, from, depth;
  };
  std::vector<Item> stack = {{0, start, 0}};
  while (!stack.empty()) {
    const Item it = stack.back();
    stack.pop_back();
    const TokenVocab::Node& n = trie[it.tn];
    const int32_t* row = trans_.data() + size_t(it.from) * size_t(n_classes_);  // (learn() may move it)
    // Backwards: the stack then takes the subtrees in memory order.
    for (int32_t ch = n.first_child + n.n_children - 1; ch >= n.first_child; --ch) {
      const TokenVocab::Node& cn = trie[ch];
      int32_t to = row[byte_class_[cn.byte]];
      if (to == -2) {
        to = learn(it.from, cn.byte);
        row = trans_.data() + size_t(it.from) * size_t(n_classes_);
      }
      if (to < 0) continue;
      // A subtree whose bytes all keep the set as it is (a string's plain characters, say)
      // is accepted whole: its short tokens are marked without walking it.
      if (to == it.from && cn.n_children && !set_escapes_[size_t(to)]) {
        const auto& loop = loop_bytes(to);
        const auto& below = vocab_->below(ch);
        if ((below[0] & ~loop[0]) == 0 && (below[1] & ~loop[1]) == 0 && (below[2] & ~loop[2]) == 0 &&
            (below[3] & ~loop[3]) == 0) {
          for (int32_t t = cn.first_token, te = vocab_->subtree_end(ch); t < te; ++t)
            if (vocab_->length(toks[t]) <= TokenVocab::kShortBytes) acc[toks[t] / 32] |= 1u << (toks[t] % 32);
          row = trans_.data() + size_t(it.from) * size_t(n_classes_);
          continue;
        }
        row = trans_.data() + size_t(it.from) * size_t(n_classes_);
      }
      for (int32_t t = cn.first_token, te = cn.first_token + cn.n_tokens; t < te; ++t) acc[toks[t] / 32] |= 1u << (toks[t] % 32);
      if (set_escapes_[size_t(to)]) {  // the frames may be done here
        if (c->escape.empty()) c->escape.assign((vocab_->trie().size() + 63) / 64, 0);
        c->escape[size_t(ch) / 64] |= uint64_t(1) << (ch % 64);
      }
      // Past kShortBytes only long tokens remain: fill_mask_classified checks those.
      if (cn.n_children && it.depth + 1 < TokenVocab::kShortBytes) stack.push_back({ch, to, it.depth + 1});
    }
  }
  return c;
}

int32_t Automaton::single(int32_t config) {
  auto it = single_.find(config);
  if (it != single_.end()) return it->second;
  const int32_t id = set_id({config});
  single_.emplace(config, id);
  return id;
}

std::pair<int32_t, int32_t> Automaton::synthetic(int32_t inner, int32_t K) {
  auto it = synthetic_.find({inner, K});
  if (it != synthetic_.end()) return it->second;
  const std::vector<Element>& x = inners_[size_t(inner)];
  int64_t x_max = 0;
  for (const Element& e : x) x_max += e.kind == Element::Kind::kRule ? max_len_[size_t(e.id)] : 1;
  const int32_t chain = int32_t(synthetic_.size());
  int32_t prev = -1, body = -1;
  for (int32_t k = 1; k <= K; ++k) {
    const int32_t r = int32_t(alt_starts_.size());
    alt_starts_.push_back({});
    body = int32_t(flat_.size());
    alt_starts_.back().push_back(body);
    for (const Element& e : x) {
      flat_.push_back({int8_t(e.kind == Element::Kind::kRule ? 1 : 0), e.id});
      flat_rule_.push_back(r);
    }
    if (prev >= 0) {
      flat_.push_back({1, prev});
      flat_rule_.push_back(r);
    }
    flat_.push_back({2, 0});
    flat_rule_.push_back(r);
    alt_starts_.back().push_back(int32_t(flat_.size()));  // the empty alternative
    flat_.push_back({2, 0});
    flat_rule_.push_back(r);
    body_start_.push_back(body);
    min_len_.push_back(0);
    max_len_.push_back(int32_t(std::min<int64_t>(x_max * k, kUnbounded)));
    counted_.push_back({});
    syn_chain_.push_back(chain);
    syn_index_.push_back(k);
    prev = r;
  }
  return synthetic_[{inner, K}] = {body, chain};
}

Automaton::CountedFrame Automaton::counted_frame(const Frames& fr) {
  // The topmost frame standing in a counted body (a return point stands for the element
  // before it), with at least two repetitions to tell apart; the top only when alone.
  CountedFrame f;
  for (size_t fi = fr.tops.size() == 1 ? 0 : 1; fi <= fr.lower.size(); ++fi) {
    const int32_t cur = fi == 0 ? fr.tops[0] : fr.lower[fi - 1] - 1;
    if (cur < 0 || untag(cur) != cur) continue;
    const int32_t r = flat_rule_[size_t(cur)];
    if (r < 0 || size_t(r) >= g_->rules().size()) continue;
    const Counted& c = counted_[size_t(r)];
    if (c.inner < 0 || c.star) continue;
    const int32_t d = cur - body_start_[size_t(r)];
    const int32_t len = int32_t(inners_[size_t(c.inner)].size());
    if (d < 0 || d >= c.copies * len) continue;
    f.fi = fi;
    f.inner = c.inner;
    f.offset = d % len + (fi > 0 ? 1 : 0);
    f.a = c.copies - d / len;
    f.b = c.tail < 0 ? -1 : f.a + c.tail;
    if (f.a >= 2 || f.b != 1) return f;  // (b -1 or >= 2)
    f.inner = -1;
  }
  return f;
}

std::shared_ptr<const TokenVocab::Classification> Automaton::counted_classification(const Frames& fr) {
  // A short token uses at most kShortBytes + 1 repetitions: syn_K with K = that stands
  // for every count.
  const CountedFrame f = counted_frame(fr);
  if (f.inner < 0) return nullptr;
  constexpr int32_t K = TokenVocab::kShortBytes + 1;
  const Frames canon = canonical(fr, f, K);
  std::string ckey = "K";
  ckey += char('0' + f.fi);
  ckey += frames_key(canon, TokenVocab::kShortBytes + 1);
  std::shared_ptr<const TokenVocab::CountedClassification> cc = vocab_->find_counted(ckey);
  if (!cc) {
    int32_t p0;
    const int32_t start = start_set(canon, f.fi, &p0);
    cc = vocab_->keep_counted(ckey, walk_counted(start, p0, synthetic(f.inner, K).second, K));
  }
  if (cc->K == 0) return nullptr;
  const int32_t a = std::min(f.a, K + 1), b = f.b < 0 ? K : std::min(f.b, K);
  auto c = std::make_shared<TokenVocab::Classification>();
  c->accepted = cc->inside[size_t(b - 1)];
  for (int32_t e = a; e <= b; ++e)
    for (int32_t t : cc->exit[size_t(e - 1)]) c->accepted[size_t(t) / 32] |= 1u << (t % 32);
  for (auto [node, e] : cc->escape) {
    if (e < a || e > b) continue;
    if (c->escape.empty()) c->escape.assign((vocab_->trie().size() + 63) / 64, 0);
    c->escape[size_t(node) / 64] |= uint64_t(1) << (node % 64);
  }
  return c;
}

Automaton::Frames Automaton::canonical(const Frames& fr, const CountedFrame& f, int32_t K) {
  Frames c = fr;
  const int32_t pos = synthetic(f.inner, K).first + f.offset;
  if (f.fi == 0) c.tops = {pos};
  else c.lower[f.fi - 1] = pos;
  return c;
}

// A walk of a trie (TokenVocab::Node or LongNode) from `start` down to max_depth, calling
// visit(trie node, its bytes' set, inside, outside) at every node the set survives.
// Without a CountWalk, inside = 1 and outside = -1. With one, the walk starts in a
// synthetic chain syn_K (see synthetic()) and each configuration carries how many
// repetitions its path used: inside the repetition (a frame of the chain standing on
// P0) K - k + 1 for a frame of syn_k, and K for syn_1's inner (tail-called: P0 is its
// nearest frame); outside it (P0 itself and what follows, or a later repetition of the
// same inner) the count at which its path left. `inside` is the fewest used by an inside
// configuration (K + 1: none), `outside` the count of the outside ones (-1: none), who
// must all agree on it, else the walk gives up (returns false). A repetition with at
// least a and at most b repetitions to go would have gone where the inside
// configurations using at most b, and the outside ones that left between a and b, go.
template <class TrieNode, class Visit>
bool Automaton::walk_trie(const TrieNode* trie, int32_t start, int max_depth, CountWalk* w, Visit&& visit) {
  auto info_of = [&](int32_t set) -> const std::vector<std::pair<int32_t, int32_t>>& {
    auto it = w->info.find(set);
    if (it != w->info.end()) return it->second;
    std::vector<std::pair<int32_t, int32_t>> v;
    for (int32_t c : sets_[size_t(set)]) {
      int32_t used = 0;
      for (int32_t at = c; c >= 0; at = nodes_[size_t(at)].parent) {
        if (at == w->p0 && at != c) {
          used = w->K;
          break;
        }
        if (at < 0) break;
        const NodeKey nk = nodes_[size_t(at)];
        const int32_t r = flat_rule_[size_t(untag(nk.pos))];
        if (nk.parent == w->p0 && r >= 0 && syn_chain_[size_t(r)] == w->chain) {
          used = w->K - syn_index_[size_t(r)] + 1;
          break;
        }
      }
      v.push_back({c, used});
    }
    return w->info.emplace(set, std::move(v)).first->second;
  };
  struct Item {
    int32_t tn, set, outside, depth;
  };
  std::vector<Item> stack = {{0, start, -1, 0}};
  while (!stack.empty()) {
    const Item it = stack.back();
    stack.pop_back();
    const TrieNode& n = trie[it.tn];
    // Backwards: the stack then takes the subtrees in memory order.
    for (int32_t ch = n.first_child + n.n_children - 1; ch >= n.first_child; --ch) {
      const TrieNode& cn = trie[ch];
      const int32_t to = next(it.set, cn.byte);
      if (to < 0) continue;
      int32_t outside = -1, inside = 1;
      if (w) {
        const uint64_t mk = (uint64_t(uint32_t(it.set)) << 24) | (uint64_t(uint16_t(it.outside)) << 8) | byte_class_[cn.byte];
        auto mv = w->moves.find(mk);
        if (mv == w->moves.end()) {
          // Which configurations of the set lead to outside configurations after the byte,
          // and with what count: each one stepped on its own.
          int32_t o = -1;
          auto agree = [&](int32_t v) { o = o == -1 || o == v ? v : -2; };
          int32_t f = w->K + 1;
          bool has_outside = false;
          for (auto [c, used] : info_of(to)) {
            if (used == 0) has_outside = true;
            else f = std::min(f, used);
          }
          if (has_outside) {
            // The configurations that take the byte: outside ones stay outside; inside ones
            // may leave. When they all agree on a count, that is it; else each is stepped on
            // its own to see which lead outside.
            const auto& from_info = info_of(it.set);  // (elements of an unordered_map stay put)
            const auto& sets = g_->sets();
            bool from_outside = false;
            int32_t inside_used = -1;
            for (auto [c, used] : from_info) {
              if (c < 0 || !sets[size_t(flat_[size_t(untag(nodes_[size_t(c)].pos))].id)][cn.byte]) continue;
              if (used == 0) from_outside = true;
              else inside_used = inside_used == -1 || inside_used == used ? used : -2;
            }
            if (inside_used == -1 || (!from_outside && inside_used > 0) || (from_outside && inside_used == it.outside)) {
              agree(from_outside ? it.outside : inside_used);
            } else {
              for (auto [c, used] : from_info) {
                if (c < 0) continue;
                const int32_t t = next(single(c), cn.byte);
                if (t < 0) continue;
                if (used == 0) {
                  agree(it.outside);
                } else {
                  for (auto [tc, tu] : info_of(t))
                    if (tu == 0) {
                      agree(used);
                      break;
                    }
                }
              }
            }
          }
          if (has_outside && o < 0) o = -2;
          if (!has_outside) o = -1;
          mv = w->moves.emplace(mk, std::make_pair(o, f)).first;
        }
        outside = mv->second.first;
        inside = mv->second.second;
        if (outside == -2 || outside == 0 || inside < 1) return false;
      }
      visit(ch, cn, to, inside, outside);
      if (cn.n_children && it.depth + 1 < max_depth) stack.push_back({ch, to, outside, it.depth + 1});
    }
  }
  return true;
}

std::shared_ptr<const TokenVocab::CountedClassification> Automaton::walk_counted(int32_t start, int32_t p0,
                                                                               int32_t chain_id, int32_t K) {
  CountWalk w;
  w.p0 = p0;
  w.chain = chain_id;
  w.K = K;
  const size_t words = size_t((vocab_->size() + 31) / 32);
  auto out = std::make_shared<TokenVocab::CountedClassification>();
  out->inside.assign(size_t(K), std::vector<uint32_t>(words, 0u));
  out->exit.assign(size_t(K), {});
  const int32_t* toks = vocab_->token_ids().data();
  const bool ok = walk_trie(vocab_->trie().data(), start, TokenVocab::kShortBytes, &w,
                            [&](int32_t ch, const TokenVocab::Node& cn, int32_t to, int32_t inside, int32_t outside) {
                              for (int32_t t = cn.first_token, te = cn.first_token + cn.n_tokens; t < te; ++t) {
                                const uint32_t bit = 1u << (toks[t] % 32);
                                if (inside <= K) out->inside[size_t(inside - 1)][size_t(toks[t]) / 32] |= bit;
                                if (outside > 0 && outside <= K) out->exit[size_t(outside - 1)].push_back(toks[t]);
                              }
                              if (set_escapes_[size_t(to)]) out->escape.push_back({ch, outside});
                            });
  if (!ok) return std::make_shared<TokenVocab::CountedClassification>();
  for (size_t v = 1; v < size_t(K); ++v)
    for (size_t w2 = 0; w2 < words; ++w2) out->inside[v][w2] |= out->inside[v - 1][w2];
  out->K = K;
  return out;
}

Automaton::LongUse Automaton::long_class(int32_t parent, const std::vector<int32_t>& tops) {
  std::vector<int32_t> ck = tops;
  ck.push_back(parent);
  if (auto it = group_long_.find(ck); it != group_long_.end()) return it->second;
  const Frames fr = group_frames(parent, tops);
  const TokenVocab& v = *vocab_;
  const size_t n_long = v.long_token_ids().size();
  auto walk = [&](int32_t start, CountWalk* w) -> std::shared_ptr<LongClass> {
    auto lc = std::make_shared<LongClass>();
    lc->inside.assign(n_long, kNever);
    lc->exit.assign(n_long, kNever);
    lc->esc_lo.assign(n_long, kNever);
    lc->esc_hi.assign(n_long, 0);
    std::vector<std::pair<int32_t, int16_t>> escapes;  // (long trie node, count)
    const bool ok = walk_trie(v.long_trie().data(), start, 1 << 20, w,
                              [&](int32_t ch, const TokenVocab::LongNode& cn, int32_t to, int32_t inside, int32_t outside) {
                                for (int32_t t = cn.first_token; t < cn.first_token + cn.n_tokens; ++t) {
                                  lc->inside[size_t(t)] = int16_t(inside);
                                  if (outside > 0) lc->exit[size_t(t)] = int16_t(outside);
                                }
                                if (set_escapes_[size_t(to)]) escapes.push_back({ch, int16_t(outside > 0 ? outside : 1)});
                              });
    if (!ok) return nullptr;
    // Every long token below a node where the frames may be done is checked from the
    // whole set (if its count fits): the counts of its ancestors, handed down the trie.
    if (!escapes.empty()) {
      const auto& lt = v.long_trie();
      std::vector<int16_t> lo(lt.size(), kNever), hi(lt.size(), 0);
      for (auto [n, e] : escapes) lo[size_t(n)] = std::min(lo[size_t(n)], e), hi[size_t(n)] = std::max(hi[size_t(n)], e);
      std::vector<int32_t> stack = {0};
      while (!stack.empty()) {
        const int32_t n = stack.back();
        stack.pop_back();
        for (int32_t t = lt[size_t(n)].first_token; t < lt[size_t(n)].first_token + lt[size_t(n)].n_tokens; ++t)
          lc->esc_lo[size_t(t)] = lo[size_t(n)], lc->esc_hi[size_t(t)] = hi[size_t(n)];
        for (int32_t c = lt[size_t(n)].first_child; c < lt[size_t(n)].first_child + lt[size_t(n)].n_children; ++c) {
          lo[size_t(c)] = std::min(lo[size_t(c)], lo[size_t(n)]);
          hi[size_t(c)] = std::max(hi[size_t(c)], hi[size_t(n)]);
          stack.push_back(c);
        }
      }
    }
    return lc;
  };
  // Kept with the vocabulary by the frames' language within the longest token + 1 bytes.
  // Inside a counted repetition: syn_K with K = that stands for every count (a token of L
  // bytes uses at most L + 1 repetitions); an empty class marks one that cannot be split.
  const int32_t budget = TokenVocab::kLongBytes + 1;
  LongUse use;
  const CountedFrame f = counted_frame(fr);
  if (f.inner >= 0) {
    const int32_t K = budget;
    const Frames canon = canonical(fr, f, K);
    std::string key = "K";
    key += char('0' + f.fi);
    key += frames_key(canon, budget);
    std::shared_ptr<const LongClass> lc = v.find_long(key);
    if (!lc) {
      CountWalk w;
      w.chain = synthetic(f.inner, K).second;
      w.K = K;
      std::shared_ptr<const LongClass> made = walk(start_set(canon, f.fi, &w.p0), &w);
      lc = v.keep_long(key, made ? made : std::make_shared<const LongClass>());
    }
    if (!lc->inside.empty()) use = {lc, std::min(f.a, K + 1), f.b < 0 ? K : std::min(f.b, K)};
  }
  if (!use.c) {
    const std::string key = "P" + frames_key(fr, budget);
    std::shared_ptr<const LongClass> lc = v.find_long(key);
    if (!lc) lc = v.keep_long(key, walk(start_set(fr, kNoFrame, nullptr), nullptr));
    use = {lc, 1, 1};
  }
  if (group_long_.size() >= kGroupCache) group_long_.clear();
  return group_long_[std::move(ck)] = use;
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
  // Configurations that share their parent are classified together (a JSON string's
  // character alternatives, say): one key, one classification.
  struct Group {
    int32_t parent, first;  // a configuration of the group
    std::vector<int32_t> tops;
  };
  std::vector<Group> groups;
  {
    std::vector<std::pair<int32_t, int32_t>> by_parent;  // (parent, configuration)
    for (int32_t c : sets_[size_t(state)])
      if (c >= 0) by_parent.push_back({nodes_[size_t(c)].parent, c});
    std::sort(by_parent.begin(), by_parent.end());
    for (size_t i = 0; i < by_parent.size(); ++i) {
      if (i == 0 || by_parent[i].first != by_parent[i - 1].first) groups.push_back({by_parent[i].first, by_parent[i].second, {}});
      groups.back().tops.push_back(nodes_[size_t(by_parent[i].second)].pos);
    }
    for (Group& g : groups) {
      std::sort(g.tops.begin(), g.tops.end());
      g.tops.erase(std::unique(g.tops.begin(), g.tops.end()), g.tops.end());
    }
  }
  const size_t words = size_t((vocab_->size() + 31) / 32);
  std::vector<std::pair<int32_t, const TokenVocab::Classification*>> cls;
  for (const Group& g : groups) {
    const TokenVocab::Classification& x = classification(g.parent, g.tops);
    cls.push_back({g.first, &x});
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
  // Long tokens: what each configuration's frames say of them; those that may leave the
  // frames are walked from the whole set.
  {
    const std::vector<int32_t>& ids = vocab_->long_token_ids();
    long_cand_.assign(ids.size(), 0);
    for (const Group& g : groups) {
      const LongUse u = long_class(g.parent, g.tops);
      const LongClass& lc = *u.c;
      for (size_t i = 0; i < ids.size(); ++i) {
        if (lc.inside[i] <= u.b || (lc.exit[i] >= u.a && lc.exit[i] <= u.b)) m[ids[i] / 32] |= 1u << (ids[i] % 32);
        else if (lc.esc_lo[i] <= u.b && lc.esc_hi[i] >= u.a) long_cand_[i] = 1;
      }
    }
    auto walk_token = [&](int32_t t, const unsigned char* b, const unsigned char* e) {
      if ((m[t / 32] >> (t % 32)) & 1u) return;
      int32_t cur = state;
      for (; b < e && cur >= 0; ++b) cur = next(cur, *b);
      if (cur >= 0) m[t / 32] |= 1u << (t % 32);
    };
    for (size_t i = 0; i < ids.size(); ++i)
      if (long_cand_[i]) {
        const std::string& b = vocab_->bytes(ids[i]);
        walk_token(ids[i], reinterpret_cast<const unsigned char*>(b.data()), reinterpret_cast<const unsigned char*>(b.data()) + b.size());
      }
    // The longest: their own trie, walked from the set (shared prefixes once).
    const TokenVocab::LongNode* lt = vocab_->longest_trie().data();
    const int32_t* lids = vocab_->longest_token_ids().data();
    if (!vocab_->longest_trie().empty()) {
      walk_.clear();
      walk_.push_back({0, state});
      while (!walk_.empty()) {
        const auto [node, from] = walk_.back();
        walk_.pop_back();
        const TokenVocab::LongNode& n = lt[node];
        for (int32_t c = n.first_child + n.n_children - 1; c >= n.first_child; --c) {
          const int32_t to = next(from, lt[c].byte);
          if (to < 0) continue;
          for (int32_t t = lt[c].first_token; t < lt[c].first_token + lt[c].n_tokens; ++t) m[lids[t] / 32] |= 1u << (lids[t] % 32);
          if (lt[c].n_children) walk_.push_back({c, to});
        }
      }
    }
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
  if (auto it = costly_.find(state); it != costly_.end()) {
    std::copy(it->second.mask.begin(), it->second.mask.end(), mask.begin());
    std::fill(mask.begin() + int64_t(it->second.mask.size()), mask.end(), 0u);
    return;
  }
  const auto t0 = std::chrono::steady_clock::now();
  std::fill(mask.begin(), mask.end(), 0u);
  uint32_t* m = mask.data();
  if (can_end(state))
    for (int32_t e : vocab_->eos_ids()) m[e / 32] |= 1u << (e % 32);
  const TokenVocab::Node* trie = vocab_->trie().data();
  const int32_t* toks = vocab_->token_ids().data();
  // A set that many bytes continue (inside a string, say) would walk most of the trie:
  // its configurations' classifications give the mask instead.
  int wide = 0;
  if (!reference_)
    for (int32_t c = trie[0].first_child; c < trie[0].first_child + trie[0].n_children; ++c)
      wide += next(state, trie[c].byte) >= 0;
  if (wide <= kNarrow || !fill_mask_classified(state, m)) {
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
    for (int32_t c = n.first_child + n.n_children - 1; c >= n.first_child; --c) {  // backwards: the stack then takes the subtrees in memory order
      const TokenVocab::Node& ch = trie[c];
      const int32_t to = next(from, ch.byte);
      if (to < 0) continue;
      for (int32_t t = ch.first_token, te = ch.first_token + ch.n_tokens; t < te; ++t) m[toks[t] / 32] |= 1u << (toks[t] % 32);
      if (ch.n_children) walk_.push_back({c, to});
    }
  }
  }
  std::vector<uint32_t> made(mask.begin(), mask.begin() + (V + 31) / 32);
  const double us = std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - t0).count();
  if (us > kCostlyUs) {
    if (costly_.size() >= kCostlyCache) {
      auto cheapest = std::min_element(costly_.begin(), costly_.end(),
                                       [](const auto& a, const auto& b) { return a.second.us < b.second.us; });
      if (cheapest->second.us < us) costly_.erase(cheapest);
    }
    if (costly_.size() < kCostlyCache) {
      costly_.emplace(state, Costly{us, std::move(made)});
      return;
    }
  }
  if (masks_.size() >= kMaskCache) masks_.clear();
  masks_.emplace(state, std::move(made));
}

int64_t Automaton::precompute(int64_t max_sets, double max_ms) {
  std::lock_guard<std::mutex> lk(mu_);
  if (reference_) return 0;  // the reference learns each step on its own, lazily
  const auto t0 = std::chrono::steady_clock::now();
  std::vector<uint32_t> scratch(size_t((vocab_->size() + 31) / 32));
  std::vector<int32_t> queue = {start_};
  std::vector<uint8_t> seen(sets_.size(), 0);
  seen[size_t(start_)] = 1;
  size_t qi = 0;
  for (; qi < queue.size() && int64_t(qi) < max_sets; ++qi) {
    if (std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count() > max_ms) break;
    const int32_t s = queue[qi];
    fill_mask(s, scratch);
    for (int32_t c = 0; c < n_classes_; ++c) {
      const int32_t t = next(s, class_bytes_[size_t(c)][0]);
      if (t < 0) continue;
      if (size_t(t) >= seen.size()) seen.resize(sets_.size(), 0);
      if (!seen[size_t(t)]) {
        seen[size_t(t)] = 1;
        queue.push_back(t);
      }
    }
  }
  return int64_t(qi);
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
