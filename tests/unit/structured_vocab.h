// The structured tests' byte vocabulary: token b is the single byte b (0-255), then EOS
// (id 256, no bytes). Masks over it are byte sets, so a grammar is tested byte by byte.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "structured/matcher.h"

namespace gannet::structured::test {

inline std::shared_ptr<const TokenVocab> bytes_vocab() {
  static const std::shared_ptr<const TokenVocab> v = [] {
    std::vector<std::string> t;
    for (int b = 0; b < 256; ++b) t.push_back(std::string(1, char(b)));
    t.push_back("");  // EOS
    return std::make_shared<const TokenVocab>(t, std::vector<int32_t>{256});
  }();
  return v;
}

}  // namespace gannet::structured::test
