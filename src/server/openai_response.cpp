#include "server/openai_response.h"

#include <cmath>

namespace gannet::server {

namespace {

using json = nlohmann::json;

std::string token_text(const tokenizer::Tokenizer* tok, int32_t id) {
  if (!tok || id < 0 || size_t(id) >= tok->vocab_size()) return "token_id:" + std::to_string(id);
  return tok->id_to_token(id);
}

double lp_value(float lp) { return std::isfinite(lp) ? double(lp) : -9999.0; }

// Characters (Unicode code points) of UTF-8 text: what text_offset counts, as OpenAI's
// and vLLM's offsets index the text as a string. A byte that is not UTF-8 counts once.
size_t utf8_length(const std::string& s) {
  size_t n = 0;
  for (unsigned char c : s) n += (c & 0xC0) != 0x80;
  return n;
}

json bytes_of(const std::string& s) {
  json b = json::array();
  for (unsigned char c : s) b.push_back(int(c));
  return b;
}

}  // namespace

json completion_logprobs(std::span<const PositionLogprobs> lps, const tokenizer::Tokenizer* tok, size_t text_offset,
                         size_t* end_offset) {
  json tokens = json::array(), token_lps = json::array(), tops = json::array(), offsets = json::array();
  size_t offset = text_offset;
  for (const PositionLogprobs& p : lps) {
    const std::string t = token_text(tok, p.id);
    tokens.push_back(t);
    token_lps.push_back(lp_value(p.logprob));
    json top = json::object();
    for (const TokenLogprob& a : p.top) {
      const std::string at = token_text(tok, a.id);
      if (!top.contains(at)) top[at] = lp_value(a.logprob);
    }
    tops.push_back(top);
    offsets.push_back(offset);
    offset += utf8_length(t);
  }
  if (end_offset) *end_offset = offset;
  return {{"tokens", tokens}, {"token_logprobs", token_lps}, {"top_logprobs", tops}, {"text_offset", offsets}};
}

json chat_logprobs(std::span<const PositionLogprobs> lps, const tokenizer::Tokenizer* tok) {
  json content = json::array();
  for (const PositionLogprobs& p : lps) {
    const std::string t = token_text(tok, p.id);
    json top = json::array();
    for (const TokenLogprob& a : p.top) {
      const std::string at = token_text(tok, a.id);
      top.push_back({{"token", at}, {"logprob", lp_value(a.logprob)}, {"bytes", bytes_of(at)}});
    }
    content.push_back({{"token", t}, {"logprob", lp_value(p.logprob)}, {"bytes", bytes_of(t)}, {"top_logprobs", top}});
  }
  return {{"content", content}, {"refusal", nullptr}};
}

}  // namespace gannet::server
