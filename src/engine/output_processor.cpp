#include "engine/output_processor.h"

#include <algorithm>

namespace gannet::engine {

namespace {

// How much of a running sample's text may be shown: all but a tail that could be the
// start of a stop string, cut back to a UTF-8 character boundary.
size_t visible_text(const Sequence& s, const SamplingParams& p) {
  const std::string& t = s.out.text;
  if (s.finished() || p.stop.empty() || p.include_stop_str_in_output) return t.size();
  size_t longest = 0;
  for (const std::string& st : p.stop) longest = std::max(longest, st.size());
  size_t keep = t.size() >= longest - 1 ? t.size() - (longest - 1) : 0;
  while (keep > 0 && (static_cast<unsigned char>(t[keep]) & 0xC0) == 0x80) --keep;
  return keep;
}

void copy_prompt(const Request& req, RequestOutput* o) {
  o->prompt = req.prompt;
  o->prompt_token_ids = req.prompt_ids;
  o->prompt_logprobs = req.prompt_logprobs;
}

}  // namespace

OutputProcessor::OutputProcessor(const tokenizer::Tokenizer* tok) : tok_(tok) {
  if (!tok) return;
  for (size_t id = 0; id < tok->vocab_size(); ++id)
    max_token_bytes_ = std::max(max_token_bytes_, tok->id_to_token(tokenizer::TokenId(id)).size());
}

tokenizer::IncrementalDetokenizer& OutputProcessor::detok_for(const Sequence& seq) {
  auto& d = detok_[&seq];
  if (!d)
    d = std::make_unique<tokenizer::IncrementalDetokenizer>(*tok_, seq.request->params.skip_special_tokens,
                                                            max_token_bytes_);
  return *d;
}

std::optional<std::string> OutputProcessor::add_token_text(Sequence& seq) {
  const SamplingParams& p = seq.request->params;
  std::string& text = seq.out.text;
  const size_t before = text.size();
  // Models may pad their vocabulary past the tokenizer's (DeepSeek V3: 129280 rows for
  // 128815 tokens); such ids have no text.
  const int32_t id = seq.last_token();
  if (tok_ && id >= 0 && size_t(id) < tok_->vocab_size()) detok_for(seq).push(id, &text);
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

void OutputProcessor::flush(Sequence& seq) {
  auto it = detok_.find(&seq);
  if (it == detok_.end()) return;
  seq.out.text += it->second->flush();
  detok_.erase(it);
}

void OutputProcessor::delta(Request& req, RequestOutput* o) const {
  const bool done = req.finished();
  o->request_id = req.id;
  o->seed = req.seed;
  o->metrics = req.metrics;
  o->finished = done;
  o->error.clear();  // the buffer may have carried a failed request before
  if (done || !req.output_sent) {
    copy_prompt(req, o);
  } else {
    o->prompt.clear();
    o->prompt_token_ids.clear();
    o->prompt_logprobs.clear();
  }
  req.output_sent = true;
  o->outputs.resize(req.seqs.size());
  for (size_t i = 0; i < req.seqs.size(); ++i) {
    Sequence& s = *req.seqs[i];
    CompletionOutput& c = o->outputs[size_t(s.out.index)];
    const size_t tok_from = done ? 0 : s.sent_tokens, text_from = done ? 0 : s.sent_text;
    const size_t text_to = std::max(text_from, visible_text(s, req.params));
    c.index = s.out.index;
    if (c.text.capacity() < 4 * max_token_bytes_) c.text.reserve(4 * max_token_bytes_);
    c.text.assign(s.out.text, text_from, text_to - text_from);
    c.token_ids.assign(s.out.token_ids.begin() + long(tok_from), s.out.token_ids.end());
    c.cumulative_logprob = s.out.cumulative_logprob;
    const size_t lp_from = std::min(tok_from, s.out.logprobs.size());
    c.logprobs.resize(s.out.logprobs.size() - lp_from);
    for (size_t k = 0; k < c.logprobs.size(); ++k) {
      const PositionLogprobs& src = s.out.logprobs[lp_from + k];
      c.logprobs[k].id = src.id;
      c.logprobs[k].logprob = src.logprob;
      c.logprobs[k].top.assign(src.top.begin(), src.top.end());
    }
    c.finish_reason = s.out.finish_reason;
    c.stop_reason = s.out.stop_reason;
    s.sent_tokens = s.out.token_ids.size();
    s.sent_text = text_to;
  }
}

RequestOutput OutputProcessor::snapshot(const Request& req) {
  RequestOutput o;
  o.request_id = req.id;
  copy_prompt(req, &o);
  o.seed = req.seed;
  o.metrics = req.metrics;
  for (const auto& s : req.seqs) {
    o.outputs.push_back(s->out);
    o.outputs.back().text.resize(visible_text(*s, req.params));
  }
  std::sort(o.outputs.begin(), o.outputs.end(),
            [](const CompletionOutput& a, const CompletionOutput& b) { return a.index < b.index; });
  o.finished = req.finished();
  return o;
}

}  // namespace gannet::engine
