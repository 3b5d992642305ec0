#include "server/wire.h"

#include <cstring>

#include "core/error.h"

namespace gannet::server {

// Every field of these structs travels: one added there must be added here too.
static_assert(sizeof(SamplingParams) == 264, "SamplingParams changed: update WireWriter::params / WireReader::params");
static_assert(sizeof(RequestOutput) == 368, "RequestOutput changed: update WireWriter::output / WireReader::output");
static_assert(sizeof(CompletionOutput) == 168, "CompletionOutput changed: update the wire format");
static_assert(sizeof(RequestMetrics) == 184, "RequestMetrics changed: update the wire format");

void WireWriter::u64(uint64_t v) {
  char b[8];
  std::memcpy(b, &v, 8);
  buf_.append(b, 8);
}
void WireWriter::f64(double v) {
  uint64_t b;
  std::memcpy(&b, &v, 8);
  u64(b);
}
void WireWriter::f32(float v) {
  uint32_t b;
  std::memcpy(&b, &v, 4);
  u64(b);
}
void WireWriter::str(const std::string& s) {
  u64(s.size());
  buf_ += s;
}
void WireWriter::ids(const std::vector<int32_t>& v) {
  u64(v.size());
  for (int32_t x : v) i64(x);
}

namespace {
template <typename T>
void opt_int(WireWriter& w, const std::optional<T>& v) {
  w.u64(v ? 1 : 0);
  w.i64(v ? int64_t(*v) : 0);
}
}  // namespace

void WireWriter::params(const SamplingParams& p) {
  i64(p.n), i64(p.max_tokens), i64(p.min_tokens);
  f64(p.temperature), f64(p.top_p), i64(p.top_k), f64(p.min_p);
  f64(p.repetition_penalty), f64(p.presence_penalty), f64(p.frequency_penalty);
  u64(p.stop.size());
  for (const std::string& s : p.stop) str(s);
  ids(p.stop_token_ids);
  u64(p.ignore_eos);
  u64(p.seed ? 1 : 0), u64(p.seed ? *p.seed : 0);
  opt_int(*this, p.logprobs), opt_int(*this, p.prompt_logprobs), opt_int(*this, p.num_speculative_tokens);
  u64(uint64_t(p.structured.kind)), str(p.structured.spec), str(p.structured.trigger), i64(p.structured.max_whitespace);
  u64(p.skip_special_tokens), u64(p.include_stop_str_in_output);
}

namespace {
void position(WireWriter& w, const PositionLogprobs& p) {
  w.i64(p.id), w.f32(p.logprob), w.u64(p.top.size());
  for (const TokenLogprob& t : p.top) w.i64(t.id), w.f32(t.logprob);
}
void i64s(WireWriter& w, const std::vector<int64_t>& v) {
  w.u64(v.size());
  for (int64_t x : v) w.i64(x);
}
}  // namespace

void WireWriter::output(const RequestOutput& o) {
  str(o.request_id), str(o.prompt), ids(o.prompt_token_ids);
  u64(o.prompt_logprobs.size());
  for (const auto& p : o.prompt_logprobs) {
    u64(p ? 1 : 0);
    if (p) position(*this, *p);
  }
  u64(o.outputs.size());
  for (const CompletionOutput& c : o.outputs) {
    i64(c.index), str(c.text), ids(c.token_ids), f64(c.cumulative_logprob);
    u64(c.logprobs.size());
    for (const PositionLogprobs& p : c.logprobs) position(*this, p);
    str(c.finish_reason);
    u64(c.stop_reason.index());
    if (const std::string* s = std::get_if<std::string>(&c.stop_reason)) str(*s);
    if (const int32_t* t = std::get_if<int32_t>(&c.stop_reason)) i64(*t);
  }
  u64(o.finished), str(o.error), u64(o.seed);
  const RequestMetrics& m = o.metrics;
  f64(m.arrival_time), f64(m.first_scheduled_time), f64(m.first_token_time), f64(m.finished_time);
  i64(m.spec_steps), i64(m.spec_drafted), i64(m.spec_accepted);
  i64s(*this, m.spec_drafted_at), i64s(*this, m.spec_accepted_at), i64s(*this, m.spec_calib_n),
      i64s(*this, m.spec_calib_accepted);
  u64(m.spec_calib_conf.size());
  for (double x : m.spec_calib_conf) f64(x);
  i64(m.cached_tokens);
}

void WireReader::need(size_t n) const {
  if (n > s_.size() - pos_) fail("a message between ranks is cut short (", s_.size(), " bytes)");
}
uint64_t WireReader::count() {
  const uint64_t n = u64();
  if (n > (s_.size() - pos_) / 8) fail("a message between ranks is out of shape (a count of ", n, ")");
  return n;
}
uint64_t WireReader::u64() {
  need(8);
  uint64_t v;
  std::memcpy(&v, s_.data() + pos_, 8);
  pos_ += 8;
  return v;
}
double WireReader::f64() {
  const uint64_t b = u64();
  double v;
  std::memcpy(&v, &b, 8);
  return v;
}
float WireReader::f32() {
  const uint32_t b = uint32_t(u64());
  float v;
  std::memcpy(&v, &b, 4);
  return v;
}
std::string WireReader::str() {
  const uint64_t n = u64();
  need(n);
  std::string s = s_.substr(pos_, n);
  pos_ += n;
  return s;
}
std::vector<int32_t> WireReader::ids() {
  const uint64_t n = count();
  std::vector<int32_t> v(n);
  for (auto& x : v) x = int32_t(i64());
  return v;
}

SamplingParams WireReader::params() {
  SamplingParams p;
  p.n = i64(), p.max_tokens = i64(), p.min_tokens = i64();
  p.temperature = f64(), p.top_p = f64(), p.top_k = i64(), p.min_p = f64();
  p.repetition_penalty = f64(), p.presence_penalty = f64(), p.frequency_penalty = f64();
  p.stop.resize(count());
  for (std::string& s : p.stop) s = str();
  p.stop_token_ids = ids();
  p.ignore_eos = u64() != 0;
  const bool has_seed = u64() != 0;
  const uint64_t seed = u64();
  if (has_seed) p.seed = seed;
  auto opt_int = [&](std::optional<int>& v) {
    const bool has = u64() != 0;
    const int64_t x = i64();
    if (has) v = int(x);
  };
  opt_int(p.logprobs), opt_int(p.prompt_logprobs), opt_int(p.num_speculative_tokens);
  const uint64_t kind = u64();
  if (kind > uint64_t(StructuredOutput::Kind::kToolCalls)) fail("a message between ranks has a bad structured kind");
  p.structured.kind = StructuredOutput::Kind(kind);
  p.structured.spec = str(), p.structured.trigger = str(), p.structured.max_whitespace = int(i64());
  p.skip_special_tokens = u64() != 0, p.include_stop_str_in_output = u64() != 0;
  return p;
}

namespace {
PositionLogprobs position(WireReader& r) {
  PositionLogprobs p;
  p.id = int32_t(r.i64()), p.logprob = r.f32();
  p.top.resize(r.count());
  for (TokenLogprob& t : p.top) t.id = int32_t(r.i64()), t.logprob = r.f32();
  return p;
}
std::vector<int64_t> i64s(WireReader& r) {
  std::vector<int64_t> v(r.count());
  for (int64_t& x : v) x = r.i64();
  return v;
}
}  // namespace

RequestOutput WireReader::output() {
  RequestOutput o;
  o.request_id = str(), o.prompt = str(), o.prompt_token_ids = ids();
  o.prompt_logprobs.resize(count());
  for (auto& p : o.prompt_logprobs)
    if (u64()) p = position(*this);
  o.outputs.resize(count());
  for (CompletionOutput& c : o.outputs) {
    c.index = int(i64()), c.text = str(), c.token_ids = ids(), c.cumulative_logprob = f64();
    c.logprobs.resize(count());
    for (PositionLogprobs& p : c.logprobs) p = position(*this);
    c.finish_reason = str();
    switch (u64()) {
      case 0: break;
      case 1: c.stop_reason = str(); break;
      case 2: c.stop_reason = int32_t(i64()); break;
      default: fail("a message between ranks has a bad stop reason");
    }
  }
  o.finished = u64() != 0, o.error = str(), o.seed = u64();
  RequestMetrics& m = o.metrics;
  m.arrival_time = f64(), m.first_scheduled_time = f64(), m.first_token_time = f64(), m.finished_time = f64();
  m.spec_steps = i64(), m.spec_drafted = i64(), m.spec_accepted = i64();
  m.spec_drafted_at = i64s(*this), m.spec_accepted_at = i64s(*this), m.spec_calib_n = i64s(*this);
  m.spec_calib_accepted = i64s(*this);
  m.spec_calib_conf.resize(count());
  for (double& x : m.spec_calib_conf) x = f64();
  m.cached_tokens = i64();
  return o;
}

}  // namespace gannet::server
