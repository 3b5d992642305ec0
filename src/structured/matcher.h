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
// kShortBytes + 1 bytes, so it is kept with the vocabulary under a canonical key of that
// language (interned fragment ids) and shared by every grammar (a JSON string's content
// reads the same in every schema). Long tokens (up to kLongBytes) have classes made the
// same way within kLongBytes + 1 bytes; the few longer ones are walked one by one.
//
// A counted repetition (x{m,n}: a string's length bounds, a pattern's quantifier) puts
// every position in a configuration of its own, each of which would need its own walk.
// Instead one walk of a synthetic x{1,K} counts, per path, the repetitions it used, and
// the classification of any count left is cut from it. Tests check these masks against
// the plain walk bit for bit.
//
// Per grammar and vocabulary: Automaton (node arena, sets, transitions, masks), shared by
// its matchers under a lock. Per sequence: Matcher (state and history). Per vocabulary:
// TokenVocab (the tokens' bytes, a trie, byte occurrences, classifications).
#pragma once

#include <array>
#include <atomic>
#include <cstdint>
#include <map>
#include <memory>
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
  struct Node {  // 12 bytes: walks are bound by fetching them
    int32_t first_child = -1;
    int32_t first_token = -1;  // into token_ids(): tokens ending here
    uint16_t n_children = 0;
    uint8_t byte = 0;
    uint8_t n_tokens = 0;
  };
  const std::vector<Node>& trie() const { return trie_; }
  // Per trie node: token_ids() [first_token, subtree_end(node)) are its subtree's tokens,
  // and below(node) the bytes its descendants add (bit b of word b / 64).
  int32_t subtree_end(int32_t node) const { return subtree_end_[size_t(node)]; }
  const std::array<uint64_t, 4>& below(int32_t node) const { return below_[size_t(node)]; }
  uint8_t length(int32_t id) const { return len_[size_t(id)]; }  // bytes, capped at 255
  const std::vector<int32_t>& token_ids() const { return trie_tokens_; }

  // Classifications cover the tokens of at most kShortBytes bytes (99% of a 129k
  // vocabulary). Long ones (at most kLongBytes) have classes of their own (LongClass),
  // made by walking the trie's part that leads to them: long_trie()[0] is the root, each
  // entry's children follow contiguously. The longest (71 of 129k) are walked from the set
  // in a trie of their own.
  static constexpr int kShortBytes = 16;
  static constexpr int kLongBytes = 32;
  struct LongNode {
    int32_t first_child = -1, n_children = 0;  // into long_trie()
    uint8_t byte = 0;
    int32_t first_token = -1, n_tokens = 0;    // into long_token_ids()
    int32_t subtree_end = -1;                  // long_token_ids() [first_token, subtree_end): the subtree's
  };
  const std::vector<LongNode>& long_trie() const { return long_trie_; }
  const std::vector<int32_t>& long_token_ids() const { return long_ids_; }
  // The longest tokens' trie (laid out as long_trie()).
  const std::vector<LongNode>& longest_trie() const { return longest_trie_; }
  const std::vector<int32_t>& longest_token_ids() const { return longest_ids_; }

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

  // A classification of frames holding a counted repetition (inner{a,b}: at least a, at
  // most b more repetitions, the current one included), made once with a = 1 and b = K,
  // the most a short token can tell apart, then cut down to any a, b: inside[b - 1] holds
  // the tokens the frames accept within b repetitions without leaving the repetition,
  // exit[e - 1] those accepted after leaving it at exactly e; each escape node says at
  // which e its path left. K = 0: the walk could not attribute every path to one count
  // (the caller classifies each count on its own).
  struct CountedClassification {
    int32_t K = 0;
    std::vector<std::vector<uint32_t>> inside;  // bitmasks
    std::vector<std::vector<int32_t>> exit;     // token ids (few: those ending just past the repetition)
    std::vector<std::pair<int32_t, int32_t>> escape;  // (trie node, repetitions when it left)
  };

 private:
  void index_occurrences();

 public:
  std::shared_ptr<const Classification> find_classification(const std::string& key) const;
  std::shared_ptr<const Classification> keep_classification(const std::string& key,
                                                            std::shared_ptr<const Classification> c) const;
  // The long tokens (past kShortBytes) as frames see them, per long token
  // (long_token_ids() order): the fewest repetitions with which the frames accept it
  // inside their counted repetition (`inside`), the count at which its accepted path left
  // the repetition (`exit`), and the range of counts at which its path may leave the
  // frames (then it is checked from the whole set); kNever: none. Outside counted
  // repetitions every path counts 1.
  struct LongClass {
    std::vector<int16_t> inside, exit, esc_lo, esc_hi;
  };
  static constexpr int16_t kNever = 0x7fff;
  std::shared_ptr<const LongClass> find_long(const std::string& key) const;
  std::shared_ptr<const LongClass> keep_long(const std::string& key, std::shared_ptr<const LongClass> c) const;
  // The id of a grammar fragment's canonical text (Automaton::seq_id), the same for every
  // grammar over this vocabulary. Ids of different generations never coincide.
  int64_t fragment_id(const std::string& text) const;
  uint64_t generation() const { return generation_.load(); }
  std::shared_ptr<const CountedClassification> find_counted(const std::string& key) const;
  std::shared_ptr<const CountedClassification> keep_counted(const std::string& key,
                                                           std::shared_ptr<const CountedClassification> c) const;

 private:
  std::vector<std::vector<Occurrence>> occ_;
  mutable std::mutex cls_mu_;
  // Kept by key, at most `cap` (then all dropped): ~50 KiB per classification, ~272 KiB
  // of masks plus up to ~1 MiB of lists per counted one, ~7 KiB per long class.
  template <class T>
  struct Kept {
    size_t cap;
    std::unordered_map<std::string, std::shared_ptr<const T>> map;
  };
  template <class T>
  std::shared_ptr<const T> find_in(const Kept<T>& k, const std::string& key) const;
  template <class T>
  std::shared_ptr<const T> keep_in(Kept<T>& k, const std::string& key, std::shared_ptr<const T> c) const;
  mutable Kept<Classification> cls_{512, {}};
  mutable Kept<CountedClassification> counted_{64, {}};
  mutable Kept<LongClass> long_{4096, {}};
  mutable std::unordered_map<std::string, int64_t> fragments_;
  mutable std::atomic<uint64_t> generation_{0};
  std::vector<std::string> bytes_;
  std::vector<int32_t> eos_;
  std::vector<Node> trie_;
  std::vector<int32_t> subtree_end_;
  std::vector<std::array<uint64_t, 4>> below_;
  std::vector<uint8_t> len_;
  std::vector<int32_t> trie_tokens_;
  std::vector<LongNode> long_trie_, longest_trie_;
  std::vector<int32_t> long_ids_, longest_ids_;
};

// The grammar's automaton over a vocabulary, shared by every Matcher of that grammar
// (a request's samples, requests with the same specification): configuration sets,
// transitions and masks learnt by one are there for all. Thread-safe (one lock).
class Automaton {
 public:
  Automaton(std::shared_ptr<const Grammar> grammar, std::shared_ptr<const TokenVocab> vocab);
  const std::shared_ptr<const TokenVocab>& vocab() const { return vocab_; }

  // Pays first visits ahead of decoding: the masks of the sets reachable from the
  // document's start, nearest first (breadth-first over byte classes), until max_sets
  // sets or max_ms milliseconds. What that learns (transitions, classifications, long
  // classes) stays; the masks are the same with or without it. The engine calls it
  // where it compiles a grammar, off the decode loop. Returns the sets visited.
  int64_t precompute(int64_t max_sets = 4096, double max_ms = 200);
  const std::shared_ptr<const Grammar>& grammar() const { return g_; }

 private:
  friend class Matcher;
  struct NodeKey {
    int32_t pos, parent;
  };
  static constexpr int32_t kAccept = -1;  // the empty stack
  static constexpr int32_t kEscape = -2;  // below a classification's top frames
  static constexpr int kFrames = 3;       // frames a classification looks at
  static constexpr int kNarrow = 24;      // sets with at most this many first bytes walk the trie
  // A position with kTag set is the same grammar position under another identity (see
  // walk_trie); untag() gives the position.
  static constexpr int32_t kTag = 1 << 30;
  static int32_t untag(int32_t pos) { return pos & (kTag - 1); }

  // All below with mu_ held.
  int32_t intern(int32_t pos, int32_t parent);
  // The id of a (sorted, unique) configuration set, and the set after byte b (-1: none).
  int32_t set_id(const std::vector<int32_t>& s);
  int32_t next(int32_t set, uint8_t b) {
    const int32_t t = trans_[size_t(set) * size_t(n_classes_) + byte_class_[b]];
    return t != -2 ? t : learn(set, b);
  }
  int32_t learn(int32_t set, uint8_t b);  // next() not yet known
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
  // The frames a classification looks at, for configurations sharing a parent: their
  // top positions (sorted), the parent's kFrames - 1 frames, then kAccept or kEscape.
  struct Frames {
    std::vector<int32_t> tops, lower;
    int32_t bottom = kEscape;
  };
  Frames group_frames(int32_t parent, const std::vector<int32_t>& tops);
  // The set of the frames' configurations (see walk_trie for fi and P0; kNoFrame: none).
  static constexpr size_t kNoFrame = size_t(-1);
  int32_t start_set(const Frames& f, size_t fi, int32_t* p0);
  const TokenVocab::Classification& classification(int32_t parent, const std::vector<int32_t>& tops);
  // The trie walk of a classification from a set of frames-only configurations.
  std::shared_ptr<const TokenVocab::Classification> walk_classification(int32_t start);
  // Counted repetitions. A rule counts its inner X when its body (its one non-empty
  // alternative) is X repeated m >= 1 times, then optionally a reference to an optional
  // counted rule of the same X (tail: its slots) or to a star of X (X*: unbounded); an
  // optional rule (an empty alternative too) without such a shape counts its whole body
  // once. A configuration whose frame stands in copy i of such a body has a = m - i
  // repetitions to go at least and b = a + tail at most (the current one included).
  struct Counted {
    int32_t inner = -1;        // into inners_; -1: not counted
    int32_t copies = 0, tail = 0;  // tail -1: unbounded
    bool optional = false, star = false;  // star: X* itself (a tail only)
  };
  struct CountedFrame {
    size_t fi = 0;        // which frame (0: the single top; i: lower[i - 1])
    int32_t inner = -1;   // -1: none
    int32_t offset = 0;   // the frame's position within the inner (return points: + 1)
    int32_t a = 0, b = 0;  // b -1: unbounded
  };
  CountedFrame counted_frame(const Frames& frames);
  // The frames with the counted one moved to syn_K.
  Frames canonical(const Frames& frames, const CountedFrame& f, int32_t K);
  // The synthetic chain syn_K ::= X syn_(K-1) | () (down to syn_1 ::= X | ()) standing
  // for every count of inner X up to K: the flat position where syn_K's body starts, and
  // its chain id (syn_chain_ of its rules).
  std::pair<int32_t, int32_t> synthetic(int32_t inner, int32_t K);
  // For frames inside a counted repetition: the classification cut from the one of the
  // synthetic chain (nullptr when the frames hold none, or that walk cannot be split).
  std::shared_ptr<const TokenVocab::Classification> counted_classification(const Frames& frames);
  std::shared_ptr<const TokenVocab::CountedClassification> walk_counted(int32_t start, int32_t p0, int32_t chain_id,
                                                                       int32_t K);
  int32_t single(int32_t config);  // the set of one configuration
  struct CountWalk {
    int32_t p0 = -1, chain = -1, K = 1;
    std::unordered_map<int32_t, std::vector<std::pair<int32_t, int32_t>>> info;  // set -> (configuration, used)
    std::unordered_map<uint64_t, std::pair<int32_t, int32_t>> moves;            // (set, outside, byte) -> (outside, inside)
  };
  template <class TrieNode, class Visit>
  bool walk_trie(const TrieNode* trie, int32_t start, int max_depth, CountWalk* w, Visit&& visit);
  // The long tokens as a configuration's top kFrames frames see them (TokenVocab::LongClass,
  // kept by a key of the frames' language within the longest token + 1 bytes), with the
  // counts its repetition allows (a = b = 1 outside counted repetitions).
  using LongClass = TokenVocab::LongClass;
  static constexpr int16_t kNever = TokenVocab::kNever;
  struct LongUse {
    std::shared_ptr<const LongClass> c;
    int32_t a = 1, b = 1;
  };
  LongUse long_class(int32_t parent, const std::vector<int32_t>& tops);
  // A canonical key of what the frames accept in their first `budget` bytes (equal keys:
  // equal classifications, across grammars): the fragment ids of the frames (seq_id).
  std::string frames_key(const Frames& frames, int32_t budget);
  int64_t seq_id(int32_t pos, int32_t budget);
  int64_t frag_id(int32_t rule, int32_t budget);

 public:
  // Tests: this automaton is the reference the others are checked against: plain trie
  // walks only, and each byte class's transitions learnt on their own.
  void set_reference(bool on) {
    std::lock_guard<std::mutex> lk(mu_);
    reference_ = on;
  }

 private:

  std::mutex mu_;
  bool reference_ = false;
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
  std::vector<int32_t> node_slots_;  // intern()'s hash table: node ids, -1 empty
  static size_t node_hash(int32_t pos, int32_t parent) {
    return size_t(((uint64_t(uint32_t(pos)) << 32) | uint32_t(parent)) * 0x9e3779b97f4a7c15ull >> 17);
  }
  struct VecHash {
    size_t operator()(const std::vector<int32_t>& v) const {
      uint64_t h = 0x9e3779b97f4a7c15ull;
      for (int32_t x : v) h = (h ^ uint32_t(x)) * 0x100000001b3ull;
      return size_t(h);
    }
  };
  std::vector<std::vector<int32_t>> sets_;  // configuration sets: node ids or kAccept
  std::unordered_map<std::vector<int32_t>, int32_t, VecHash> set_ids_;
  std::vector<int32_t> trans_;              // [set * n_classes_ + byte class]: next set, -1 none, -2 unknown
  std::vector<uint8_t> set_escapes_;        // per set: it holds kEscape
  int32_t start_ = -1;                      // the set at the start of the document
  std::vector<int32_t> scratch_;
  std::vector<std::pair<int32_t, int32_t>> walk_;  // the mask's trie walk: (trie node, set)
  // Masks of recently seen sets (a set's mask never changes): kMaskCache at most.
  static constexpr size_t kMaskCache = 64;  // ~1 MiB at 129k tokens
  std::unordered_map<int32_t, std::vector<uint32_t>> masks_;
  // Masks that took over kCostlyUs to make (a wide trie walk, say): kept apart from the
  // recent ones, so that the worst case is paid once per grammar (by precompute, when it
  // reaches them); when full, the cheapest is dropped for a costlier one. ~4 MiB at most.
  static constexpr size_t kCostlyCache = 256;
  static constexpr double kCostlyUs = 100;
  struct Costly {
    double us;
    std::vector<uint32_t> mask;
  };
  std::unordered_map<int32_t, Costly> costly_;
  // By (tops..., parent): a group's classification and long tokens' class (kGroupCache
  // each at most; the vocabulary keeps them too).
  static constexpr size_t kGroupCache = 1024;
  std::unordered_map<std::vector<int32_t>, std::shared_ptr<const TokenVocab::Classification>, VecHash> group_cls_;
  std::unordered_map<int32_t, int32_t> escape_set_;                 // by node
  std::unordered_map<int32_t, std::vector<uint8_t>> first_bytes_;   // by set
  std::vector<int32_t> min_len_;  // per rule: the fewest bytes it matches
  std::vector<int32_t> max_len_;  // per rule: the most (kUnbounded if recursive)
  std::vector<std::string> set_text_;  // per byte set: its 32 bytes, for keys
  // Counted repetitions (see Counted; synthetic chains are rules past the grammar's).
  std::vector<int32_t> body_start_, flat_rule_;  // per rule: its body's flat position; per position: its rule
  std::vector<Counted> counted_;                 // per rule
  std::vector<std::vector<Element>> inners_;
  std::map<std::vector<std::pair<int, int32_t>>, int32_t> inner_ids_;
  std::vector<int32_t> syn_chain_, syn_index_;   // per rule: its synthetic chain and k (-1: none)
  std::map<std::pair<int32_t, int32_t>, std::pair<int32_t, int32_t>> synthetic_;  // (inner, K) -> synthetic()
  std::unordered_map<int32_t, int32_t> single_;  // configuration -> its singleton set
  std::vector<std::vector<int32_t>> succ_;       // per configuration: what follows its byte (step)
  std::vector<uint8_t> succ_known_;
  std::unordered_map<uint64_t, int64_t> seq_memo_, frag_memo_;  // (position or rule, budget) -> id
  uint64_t memo_gen_ = 0;
  std::unordered_map<std::vector<int32_t>, LongUse, VecHash> group_long_;
  std::vector<uint8_t> long_cand_;  // scratch: long tokens to check from the whole set
  // Per set (lazily, once a walk sees it go to itself): the bytes on which it stays itself.
  std::unordered_map<int32_t, std::array<uint64_t, 4>> loop_bytes_;
  const std::array<uint64_t, 4>& loop_bytes(int32_t set);
  // Bytes no byte set tells apart share a class (ids 0..255).
  std::array<uint8_t, 256> byte_class_{};
  std::vector<std::vector<uint8_t>> class_bytes_;  // per class: its bytes
  int32_t n_classes_ = 0;
  std::vector<std::array<uint64_t, 4>> class_mask_;  // per byte set: the classes it holds
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
