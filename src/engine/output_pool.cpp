#include "engine/output_pool.h"

#include <algorithm>

namespace gannet::engine {

tokenizer::IncrementalDetokenizer& OutputPool::detok_for(const Sequence& seq) {
  auto& d = detok_[&seq];
  if (!d) d = std::make_unique<tokenizer::IncrementalDetokenizer>(tok_, seq.request->params.skip_special_tokens);
  return *d;
}

std::optional<std::string> OutputPool::add_token_text(Sequence& seq) {
  const SamplingParams& p = seq.request->params;
  std::string& text = seq.out.text;
  const size_t before = text.size();
  // Models may pad their vocabulary past the tokenizer's (DeepSeek V3: 129280 rows for
  // 128815 tokens); such ids have no text.
  const int32_t id = seq.tokens.back();
  if (id >= 0 && size_t(id) < tok_.vocab_size()) text += detok_for(seq).push(id);
  // Stop strings are looked for once min_tokens are out, in the new text plus the tail
  // that a stop string could straddle.
  if (p.stop.empty() || text.size() == before || seq.num_outputs() <= p.min_tokens) return std::nullopt;
  size_t best = std::string::npos;
  const std::string* hit = nullptr;
  for (const std::string& s : p.stop) {
    const size_t from = before >= s.size() - 1 ? before - (s.size() - 1) : 0;
    const size_t at = text.find(s, from);
    if (at != std::string::npos && at < best) {
      best = at;
      hit = &s;
    }
  }
  if (!hit) return std::nullopt;
  text.resize(best + (p.include_stop_str_in_output ? hit->size() : 0));
  return *hit;
}

void OutputPool::flush(Sequence& seq) {
  auto it = detok_.find(&seq);
  if (it == detok_.end()) return;
  seq.out.text += it->second->flush();
  detok_.erase(it);
}

RequestOutput OutputPool::snapshot(const Request& req) {
  RequestOutput o;
  o.request_id = req.id;
  o.prompt = req.prompt;
  o.prompt_token_ids = req.prompt_ids;
  o.prompt_logprobs = req.prompt_logprobs;
  o.seed = req.seed;
  o.metrics = req.metrics;
  for (const auto& s : req.seqs) {
    o.outputs.push_back(s->out);
    // While a sample runs, hold back the tail that could be the start of a stop string,
    // so text once returned is never taken back (cut at a UTF-8 character boundary).
    const SamplingParams& p = req.params;
    if (!s->finished() && !p.stop.empty() && !p.include_stop_str_in_output) {
      size_t longest = 0;
      for (const std::string& st : p.stop) longest = std::max(longest, st.size());
      std::string& t = o.outputs.back().text;
      size_t keep = t.size() >= longest - 1 ? t.size() - (longest - 1) : 0;
      while (keep > 0 && (static_cast<unsigned char>(t[keep]) & 0xC0) == 0x80) --keep;
      t.resize(keep);
    }
  }
  std::sort(o.outputs.begin(), o.outputs.end(),
            [](const CompletionOutput& a, const CompletionOutput& b) { return a.index < b.index; });
  o.finished = req.finished();
  return o;
}

}  // namespace gannet::engine
