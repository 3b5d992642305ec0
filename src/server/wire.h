// What the ranks of a data-parallel server send each other (engine_loop.cpp): requests
// (id, prompt, SamplingParams) from rank 0 to their owners, outputs (RequestOutput) back,
// in a compact binary form. Floats travel as their bits, so logprobs arrive exactly. A
// message cut short or out of shape is refused (gannet::Error), never half read.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "gannet/request_output.h"
#include "gannet/sampling_params.h"

namespace gannet::server {

class WireWriter {
 public:
  void u64(uint64_t v);
  void i64(int64_t v) { u64(uint64_t(v)); }
  void f64(double v);
  void f32(float v);
  void str(const std::string& s);
  void ids(const std::vector<int32_t>& v);
  void params(const SamplingParams& p);
  void output(const RequestOutput& o);
  const std::string& bytes() const { return buf_; }

 private:
  std::string buf_;
};

class WireReader {
 public:
  explicit WireReader(const std::string& bytes) : s_(bytes) {}
  uint64_t u64();
  uint64_t count();  // an element count, checked against the bytes left
  int64_t i64() { return int64_t(u64()); }
  double f64();
  float f32();
  std::string str();
  std::vector<int32_t> ids();
  SamplingParams params();
  RequestOutput output();
  bool done() const { return pos_ == s_.size(); }

 private:
  void need(size_t n) const;
  const std::string& s_;
  size_t pos_ = 0;
};

}  // namespace gannet::server
