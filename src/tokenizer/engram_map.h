// DeepSeek-V4.1's Engram "compressed token map" (deepseek-v4-architecture.md §9.6): token
// ids that normalize alike share one id. Each token is decoded alone; its text goes
// through NFKC, NFD, removal of combining marks, lowercasing, collapsing runs of
// space/tab/CR/LF to one space, stripping (a text that is a lone space survives as one),
// and becomes the key (the decoded text itself if that leaves nothing). A token whose
// decoding is not valid UTF-8 (a byte fragment) or contains U+FFFD is keyed by its
// vocabulary spelling. Ids are numbered by first appearance over token ids 0, 1, ....
// Unicode data comes from utf8proc; tests/golden/engram-map-deepseek-v3.json holds the
// map the transformers/tokenizers pipeline gives (tools/make_engram_map_golden.py).
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "tokenizer/tokenizer.h"

namespace gannet::tokenizer {

// The normalized key of one decoded token text (valid UTF-8).
std::string engram_normalize(std::string_view text);

// map[id] for every id of the tokenizer; *n_keys receives the number of distinct keys.
std::vector<int64_t> engram_compressed_map(const Tokenizer& tok, int64_t* n_keys);

}  // namespace gannet::tokenizer
