// Fuzz target: GBNF parsing rejects bad grammars with gannet::Error, never crashes; a
// grammar that parses runs the matcher over the text after the first NUL byte (if any),
// byte by byte, with a rollback now and then, and must stay consistent.
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>

#include "core/error.h"
#include "structured/gbnf.h"
#include "structured/matcher.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string all(reinterpret_cast<const char*>(data), size);
  const size_t nul = all.find('\0');
  const std::string text = all.substr(0, nul), input = nul == std::string::npos ? "" : all.substr(nul + 1);
  std::shared_ptr<const gannet::structured::Grammar> g;
  try {
    g = std::make_shared<const gannet::structured::Grammar>(gannet::structured::parse_gbnf(text));
  } catch (const gannet::Error&) {
    return 0;
  }
  std::vector<std::string> toks;
  for (int b = 0; b < 256; ++b) toks.push_back(std::string(1, char(b)));
  toks.push_back("");
  auto vocab = std::make_shared<const gannet::structured::TokenVocab>(toks, std::vector<int32_t>{256});
  gannet::structured::Matcher m(g, vocab, 8);
  std::vector<uint32_t> mask(9);
  for (size_t i = 0; i < input.size() && i < 256; ++i) {
    m.fill_next_token_bitmask(mask);
    const int32_t t = static_cast<unsigned char>(input[i]);
    const bool allowed = mask[size_t(t) / 32] >> (t % 32) & 1;
    if (m.accept_token(t) != allowed) __builtin_trap();  // the mask and the matcher must agree
    if (allowed && i % 7 == 6) {
      m.rollback(1);
      if (!m.accept_token(t)) __builtin_trap();
    }
  }
  return 0;
}
