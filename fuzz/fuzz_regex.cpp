// Fuzz target: regex parsing rejects bad patterns with gannet::Error, never crashes; a
// pattern that parses runs the matcher over the bytes after the first NUL.
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>

#include "core/error.h"
#include "structured/matcher.h"
#include "structured/regex.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string all(reinterpret_cast<const char*>(data), size);
  const size_t nul = all.find('\0');
  const std::string pattern = all.substr(0, nul), input = nul == std::string::npos ? "" : all.substr(nul + 1);
  std::shared_ptr<const gannet::structured::Grammar> g;
  try {
    g = std::make_shared<const gannet::structured::Grammar>(gannet::structured::parse_regex(pattern));
  } catch (const gannet::Error&) {
    return 0;
  }
  std::vector<std::string> toks;
  for (int b = 0; b < 256; ++b) toks.push_back(std::string(1, char(b)));
  auto vocab = std::make_shared<const gannet::structured::TokenVocab>(toks, std::vector<int32_t>{});
  gannet::structured::Matcher m(g, vocab, 4);
  for (size_t i = 0; i < input.size() && i < 256; ++i)
    if (!m.accept_bytes(input.substr(i, 1))) break;
  (void)m.can_end();
  return 0;
}
