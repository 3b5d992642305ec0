#include "tokenizer/bpe.h"

#include <algorithm>
#include <cstdio>

#include <nlohmann/json.hpp>

#include "core/error.h"
#include "tokenizer/byte_level.h"
#include "tokenizer/utf8.h"

namespace gannet::tokenizer {

namespace {

// A merge waiting in the queue: the pair starting at symbol `pos`, making `new_id`.
struct Candidate {
  uint32_t rank;
  int32_t pos;
  TokenId new_id;
};

// Heap order: the top is the lowest rank, then the leftmost position.
bool after(const Candidate& a, const Candidate& b) {
  return a.rank != b.rank ? a.rank > b.rank : a.pos > b.pos;
}

struct Symbol {
  TokenId id;
  int32_t prev, next;  // -1 at the ends
  bool alive;
};

}  // namespace

Bpe Bpe::from_json(const nlohmann::json& model, bool byte_level) {
  if (!model.is_object()) fail("model: expected an object");
  // Files written before "type" existed carry only vocab and merges.
  if (model.contains("type") && model["type"] != "BPE")
    fail("model: type ", model["type"].dump(), " is unsupported (only BPE)");
  for (const char* key : {"continuing_subword_prefix", "end_of_word_suffix"})
    if (model.contains(key) && !model[key].is_null() && model[key] != "")
      fail("model: \"", key, "\" is unsupported");
  if (model.contains("dropout") && !model["dropout"].is_null() && model["dropout"] != 0.0)
    fail("model: BPE dropout is unsupported (it makes encoding random)");
  if (!model.contains("vocab") || !model["vocab"].is_object())
    fail("model: missing \"vocab\" object");
  if (!model.contains("merges") || !model["merges"].is_array())
    fail("model: missing \"merges\" array");

  Bpe bpe;
  bpe.byte_level_ = byte_level;
  auto flag = [&](const char* key) {
    return model.contains(key) && model[key].is_boolean() && model[key].get<bool>();
  };
  bpe.ignore_merges_ = flag("ignore_merges");
  bpe.byte_fallback_ = flag("byte_fallback");
  bpe.fuse_unk_ = flag("fuse_unk");
  bpe.parse_vocab(model["vocab"]);
  bpe.parse_merges(model["merges"]);
  if (model.contains("unk_token") && model["unk_token"].is_string()) {
    auto id = bpe.token_to_id(model["unk_token"].get<std::string>());
    if (!id) fail("model: unk_token ", model["unk_token"].dump(), " is not in the vocabulary");
    bpe.unk_id_ = *id;
  }
  for (int b = 0; b < 256; ++b)
    bpe.byte_ids_[b] = bpe.token_to_id(to_byte_level(std::string(1, char(b)))).value_or(-1);
  return bpe;
}

void Bpe::parse_vocab(const nlohmann::json& vocab) {
  vocab_.reserve(vocab.size());
  for (auto it = vocab.begin(); it != vocab.end(); ++it) {
    const std::string& token = it.key();
    const nlohmann::json& id = it.value();
    if (!id.is_number_integer() || id.get<int64_t>() < 0 || id.get<int64_t>() > INT32_MAX)
      fail("model: vocab entry \"", token, "\" has id ", id.dump(), ", expected a non-negative integer");
    TokenId tid = TokenId(id.get<int64_t>());
    vocab_[token] = tid;
    if (size_t(tid) >= tokens_.size()) tokens_.resize(size_t(tid) + 1);
    tokens_[tid] = token;
  }
}

void Bpe::parse_merges(const nlohmann::json& merges) {
  merges_.reserve(merges.size());
  uint32_t rank = 0;
  for (size_t i = 0; i < merges.size(); ++i) {
    const auto& m = merges[i];
    std::string left, right;
    if (m.is_string()) {
      // Legacy "left right" lines: exactly one space; "#version" lines are comments.
      const std::string& line = m.get_ref<const std::string&>();
      if (line.rfind("#version", 0) == 0) continue;
      size_t sp = line.find(' ');
      if (sp == std::string::npos || line.find(' ', sp + 1) != std::string::npos)
        fail("model: merge ", i, " (\"", line, "\") is not two tokens separated by one space");
      left = line.substr(0, sp);
      right = line.substr(sp + 1);
    } else if (m.is_array() && m.size() == 2 && m[0].is_string() && m[1].is_string()) {
      left = m[0];
      right = m[1];
    } else {
      fail("model: merge ", i, " is neither \"a b\" nor [\"a\", \"b\"]: ", m.dump());
    }
    auto a = token_to_id(left), b = token_to_id(right), ab = token_to_id(left + right);
    if (!a || !b) fail("model: merge ", i, " uses \"", a ? right : left, "\", which is not in the vocabulary");
    if (!ab) fail("model: merge ", i, " makes \"", left + right, "\", which is not in the vocabulary");
    // A repeated pair keeps its last rank, as Hugging Face's map insert does.
    merges_[(uint64_t(uint32_t(*a)) << 32) | uint32_t(*b)] = {rank++, *ab};
  }
}

std::optional<TokenId> Bpe::token_to_id(std::string_view token) const {
  auto it = vocab_.find(token);
  if (it == vocab_.end()) return std::nullopt;
  return it->second;
}

void Bpe::encode(std::string_view piece, std::vector<TokenId>& out) const {
  if (piece.empty() || cache_->lookup(piece, out)) return;
  size_t first = out.size();
  encode_uncached(piece, out);
  cache_->insert(piece, out.data() + first, out.size() - first);
}

void Bpe::encode_uncached(std::string_view piece, std::vector<TokenId>& out) const {
  if (ignore_merges_) {
    auto id = byte_level_ ? token_to_id(to_byte_level(piece)) : token_to_id(piece);
    if (id) {
      out.push_back(*id);
      return;
    }
  }
  thread_local std::vector<TokenId> ids;
  ids.clear();
  // Characters missing from the vocabulary follow Hugging Face: byte-fallback tokens if
  // enabled, else the unk token (consecutive ones fused when fuse_unk), else dropped.
  TokenId pending_unk = -1;
  auto add_unit = [&](std::string_view unit, TokenId id) {
    if (id < 0) id = token_to_id(unit).value_or(-1);
    if (id >= 0) {
      if (pending_unk >= 0) ids.push_back(pending_unk);
      pending_unk = -1;
      ids.push_back(id);
      return;
    }
    if (byte_fallback_) {
      size_t mark = ids.size();
      bool all = true;
      for (unsigned char b : unit) {
        char name[8];
        std::snprintf(name, sizeof name, "<0x%02X>", b);
        auto bid = token_to_id(name);
        if (!bid) {
          all = false;
          break;
        }
        ids.push_back(*bid);
      }
      if (all) return;
      ids.resize(mark);
    }
    if (unk_id_ >= 0) {
      if (pending_unk >= 0 && !fuse_unk_) ids.push_back(pending_unk);
      pending_unk = unk_id_;
    }
  };
  if (byte_level_) {
    for (unsigned char b : piece) {
      if (byte_ids_[b] >= 0) {
        add_unit({}, byte_ids_[b]);
      } else {
        std::string ch;
        append_utf8(ch, byte_to_code_point(b));
        add_unit(ch, -1);
      }
    }
  } else {
    for (size_t i = 0; i < piece.size();) {
      size_t start = i;
      next_code_point(piece, i);
      add_unit(piece.substr(start, i - start), -1);
    }
  }
  if (pending_unk >= 0) ids.push_back(pending_unk);
  merge_all(ids, out);
}

void Bpe::merge_all(std::vector<TokenId>& ids, std::vector<TokenId>& out) const {
  if (ids.size() < 2) {
    out.insert(out.end(), ids.begin(), ids.end());
    return;
  }
  thread_local std::vector<Symbol> syms;
  thread_local std::vector<Candidate> heap;
  syms.clear();
  heap.clear();
  const int32_t n = int32_t(ids.size());
  for (int32_t i = 0; i < n; ++i) syms.push_back({ids[i], i - 1, i + 1 < n ? i + 1 : -1, true});
  auto push = [&](int32_t pos) {
    if (const Merge* m = find_merge(syms[pos].id, syms[syms[pos].next].id)) {
      heap.push_back({m->rank, pos, m->new_id});
      std::push_heap(heap.begin(), heap.end(), after);
    }
  };
  for (int32_t i = 0; i + 1 < n; ++i) push(i);

  while (!heap.empty()) {
    std::pop_heap(heap.begin(), heap.end(), after);
    Candidate top = heap.back();
    heap.pop_back();
    Symbol& left = syms[top.pos];
    if (!left.alive || left.next < 0) continue;
    // Entries go stale when a neighbour merged since they were queued.
    const Merge* m = find_merge(left.id, syms[left.next].id);
    if (!m || m->new_id != top.new_id) continue;
    Symbol& right = syms[left.next];
    left.id = top.new_id;
    right.alive = false;
    left.next = right.next;
    if (right.next >= 0) syms[right.next].prev = top.pos;
    if (left.prev >= 0) push(left.prev);
    if (left.next >= 0) push(top.pos);
  }
  for (int32_t i = 0; i >= 0; i = syms[i].next) out.push_back(syms[i].id);
}

}  // namespace gannet::tokenizer
