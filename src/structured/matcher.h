// Byte-level matching of a Grammar (grammar.h) and the token masks it implies.
//
// The matcher runs a pushdown automaton: its state is a set of stacks, each a chain of
// grammar positions ("match the element here, then return to the parent"), kept as
// interned nodes so stacks share their tails. A rule reference is expanded into its
// alternatives as soon as it is on top, so every live stack's top is a byte set; a byte
// advances the stacks whose top set holds it. The empty stack means the grammar is
// complete. Tokens are byte strings (partial UTF-8 included), matched byte by byte.
//
// Stack sets met are numbered, and the transition of each (set, byte) is remembered once
// computed: the automaton is determinised lazily, so a mask's walk over the vocabulary's
// trie costs a table lookup per trie node where the sets repeat (inside a string, say).
//
// A set that many first bytes continue would walk most of the trie. Its mask is built
// from classifications instead, one per configuration: what the configuration's top
// kFrames frames accept on their own (the short tokens they consume, found by one trie
// walk), plus the tokens that finish those frames mid-token and go on in the stack below,
// found through the vocabulary's byte occurrences (only bytes the stack below can take
// next are looked up). A classification depends only on the frames' language within
// kShortBytes + 1 bytes, so it is kept with the vocabulary under a canonical text of that
// language and shared by every grammar (a JSON string's content reads the same in every
// schema). Tests check these masks against the plain walk bit for bit.
//
// Per grammar and vocabulary: Automaton (node arena, sets, transitions, masks), shared by
// its matchers under a lock. Per sequence: Matcher (state and history). Per vocabulary:
// TokenVocab (the tokens' bytes, a trie, byte occurrences, classifications).
#pragma once

#include <cstdint>
#include <memory>
#include <tuple>
#include <mutex>
#include <span>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "structured/grammar.h"

namespace gannet::structured {

// The vocabulary as bytes: token id -> its bytes (empty for special tokens that never
// match grammar text), and the EOS ids a finished grammar allows.
class TokenVocab {
 public:
  TokenVocab(std::vector<std::string> token_bytes, std::vector<int32_t> eos_ids);
  int64_t size() const { return int64_t(bytes_.size()); }
  const std::string& bytes(int32_t id) const { return bytes_[size_t(id)]; }
  const std::vector<int32_t>& eos_ids() const { return eos_; }
  bool is_eos(int32_t id) const;

  // The trie over the non-empty tokens: node 0 is the root; children sorted by byte.
  struct Node {
    int32_t first_child = -1, n_children = 0;
    uint8_t byte = 0;
    int32_t first_token = -1, n_tokens = 0;  // into token_ids(): tokens ending here
    int32_t subtree_end = -1;                // token_ids() [first_token, subtree_end): the subtree's
  };
  const std::vector<Node>& trie() const { return trie_; }
  const std::vector<int32_t>& token_ids() const { return trie_tokens_; }

  // Classifications cover the tokens of at most kShortBytes bytes (99% of a 129k
  // vocabulary); the longer ones are checked one by one.
  static constexpr int kShortBytes = 16;
  const std::vector<int32_t>& long_tokens() const { return long_; }

  // What a configuration's top frames accept whatever lies below them (see the top of
  // this file). Kept here, by a canonical text of the frames' language, so every grammar
  // over this vocabulary shares them.
  struct Classification {
    std::vector<uint32_t> accepted;  // bitmask
    // Trie nodes after whose bytes the frames may be complete (bitset; empty if none):
    // a token through such a node may go on in the stack below the frames.
    std::vector<uint64_t> escape;
  };
  // Where byte b stands in the short tokens past their first byte: the token, the offset,
  // and the trie node of the bytes before it.
  struct Occurrence {
    int32_t token, pos, prefix;
  };
  const std::vector<Occurrence>& occurrences(uint8_t b) const;

 private:
  void index_occurrences();

 public:
  std::shared_ptr<const Classification> find_classification(const std::string& key) const;
  std::shared_ptr<const Classification> keep_classification(const std::string& key,
                                                            std::shared_ptr<const Classification> c) const;

 private:
  std::vector<std::vector<Occurrence>> occ_;
  mutable std::mutex cls_mu_;
  mutable std::unordered_map<std::string, std::shared_ptr<const Classification>> cls_;
  std::vector<std::string> bytes_;
  std::vector<int32_t> eos_;
  std::vector<Node> trie_;
  std::vector<int32_t> trie_tokens_;
  std::vector<int32_t> long_;
};

// The grammar's automaton over a vocabulary, shared by every Matcher of that grammar
// (a request's samples, requests with the same specification): configuration sets,
// transitions and masks learnt by one are there for all. Thread-safe (one lock).
class Automaton {
 public:
  Automaton(std::shared_ptr<const Grammar> grammar, std::shared_ptr<const TokenVocab> vocab);
  const std::shared_ptr<const TokenVocab>& vocab() const { return vocab_; }
  const std::shared_ptr<const Grammar>& grammar() const { return g_; }

 private:
  friend class Matcher;
  struct NodeKey {
    int32_t pos, parent;
    bool operator==(const NodeKey& o) const { return pos == o.pos && parent == o.parent; }
  };
  struct NodeHash {
    size_t operator()(const NodeKey& k) const { return std::hash<uint64_t>()((uint64_t(uint32_t(k.pos)) << 32) | uint32_t(k.parent)); }
  };
  static constexpr int32_t kAccept = -1;  // the empty stack
  static constexpr int32_t kEscape = -2;  // below a classification's top frames
  static constexpr int kFrames = 3;       // frames a classification looks at

  // All below with mu_ held.
  int32_t intern(int32_t pos, int32_t parent);
  // The id of a (sorted, unique) configuration set, and the set after byte b (-1: none).
  int32_t set_id(const std::vector<int32_t>& s);
  int32_t next(int32_t set, uint8_t b);
  // Adds the configurations `pos` (under `parent`) expands to.
  void expand(int32_t pos, int32_t parent, std::vector<int32_t>* out);
  // out = the configurations after byte b from `from` (sorted, unique).
  void step(const std::vector<int32_t>& from, uint8_t b, std::vector<int32_t>* out);
  void normalize(std::vector<int32_t>* s) const;
  bool can_end(int32_t set) const;
  void fill_mask(int32_t set, std::span<uint32_t> mask);
  // Sets with many possible first bytes: the mask from the configurations' classifications.
  // False when a configuration's escape leads where too many bytes may follow (the
  // caller then walks the trie instead).
  bool fill_mask_classified(int32_t set, uint32_t* mask);
  // The set a configuration continues in once its top kFrames frames are complete (-1:
  // the document's end lies within them).
  int32_t escape_set(int32_t node);
  const TokenVocab::Classification& classification(int32_t node);
  // A canonical text of what the frames accept in their first kShortBytes + 1 bytes
  // (equal texts: equal classifications, across grammars).
  std::string frames_key(const std::vector<int32_t>& frames, int32_t bottom);

 public:
  // Tests: masks by the plain trie walk only (the classifications are checked against it).
  static void set_classify(bool on);

 private:

  std::mutex mu_;
  std::shared_ptr<const Grammar> g_;
  std::shared_ptr<const TokenVocab> vocab_;
  // The grammar flattened: each alternative's elements, then an end marker.
  struct Flat {
    int8_t kind;  // 0 bytes, 1 rule, 2 end of alternative
    int32_t id;
  };
  std::vector<Flat> flat_;
  std::vector<std::vector<int32_t>> alt_starts_;  // per rule
  std::vector<NodeKey> nodes_;
  std::unordered_map<NodeKey, int32_t, NodeHash> node_ids_;
  struct VecHash {
    size_t operator()(const std::vector<int32_t>& v) const {
      uint64_t h = 0x9e3779b97f4a7c15ull;
      for (int32_t x : v) h = (h ^ uint32_t(x)) * 0x100000001b3ull;
      return size_t(h);
    }
  };
  std::vector<std::vector<int32_t>> sets_;  // configuration sets: node ids or kAccept
  std::unordered_map<std::vector<int32_t>, int32_t, VecHash> set_ids_;
  std::vector<int32_t> trans_;              // [set * 256 + byte]: next set, -1 none, -2 unknown
  std::vector<uint8_t> set_escapes_;        // per set: it holds kEscape
  int32_t start_ = -1;                      // the set at the start of the document
  std::vector<int32_t> scratch_;
  std::vector<std::pair<int32_t, int32_t>> walk_;  // the mask's trie walk: (trie node, set)
  // Masks of recently seen sets (a set's mask never changes): kMaskCache at most.
  static constexpr size_t kMaskCache = 64;  // ~1 MiB at 129k tokens
  std::unordered_map<int32_t, std::vector<uint32_t>> masks_;
  std::unordered_map<int32_t, std::shared_ptr<const TokenVocab::Classification>> node_cls_;
  std::unordered_map<int32_t, int32_t> escape_set_;                 // by node
  std::unordered_map<int32_t, std::vector<uint8_t>> first_bytes_;   // by set
  std::vector<std::tuple<int32_t, int32_t, bool, int>> cwalk_;  // classification walk
  std::vector<int32_t> min_len_;  // per rule: the fewest bytes it matches
  std::vector<int32_t> max_len_;  // per rule: the most (kUnbounded if recursive)
  std::vector<std::string> set_text_;  // per byte set: its 32 bytes, for keys
  static constexpr int32_t kUnbounded = 1 << 28;
};

class Matcher {
 public:
  // max_rollback: how many accepted tokens rollback() can undo.
  Matcher(std::shared_ptr<Automaton> automaton, int max_rollback = 16);
  // With an automaton of its own.
  Matcher(std::shared_ptr<const Grammar> grammar, std::shared_ptr<const TokenVocab> vocab, int max_rollback = 16);

  // Feeds bytes; false (and no change) if the grammar cannot continue with all of them.
  bool accept_bytes(std::string_view bytes);
  // Feeds a token: its bytes, or an EOS where the grammar may end (then terminated).
  // False (and no change) otherwise, or once terminated.
  bool accept_token(int32_t id);
  // mask[id / 32] bit id % 32 set for every token accept_token would take now.
  // mask has (vocab size + 31) / 32 words.
  void fill_next_token_bitmask(std::span<uint32_t> mask);
  // Undoes the last k accepted tokens (k <= tokens accepted, <= max_rollback).
  void rollback(int k);
  // Back to the start of the document (history cleared; what was learnt is kept).
  void reset();
  // Whether the document may start with these bytes (the state is not changed).
  bool could_start_with(std::string_view bytes);

  bool can_end() const;                      // the bytes so far form a complete document
  bool is_terminated() const { return terminated_; }  // an EOS was accepted
  int64_t tokens_accepted() const { return accepted_; }

 private:
  bool walk(int32_t from, std::string_view bytes, int32_t* to);  // with the lock held

  std::shared_ptr<Automaton> a_;
  int max_rollback_;
  int32_t state_ = -1;                      // the current set
  std::vector<int32_t> history_;            // sets before each undoable token
  bool terminated_ = false;
  int64_t accepted_ = 0;
};

}  // namespace gannet::structured
