// A one-line progress bar on stderr, drawn only when stderr is a terminal and redrawn at
// most every 100 ms, so it costs nothing in pipelines and tests.
#pragma once

#include <chrono>
#include <cstdint>
#include <string>

namespace gannet {

class ProgressBar {
 public:
  // unit_bytes: show done/total as sizes (KiB, MiB, GiB) instead of counts.
  ProgressBar(std::string label, bool unit_bytes = false);
  ~ProgressBar();
  // `extra` is appended after the counts (e.g. "12.3 tok/s").
  void update(uint64_t done, uint64_t total, const std::string& extra = "");
  void finish();  // clears the line

 private:
  std::string label_;
  bool unit_bytes_, enabled_, drawn_ = false;
  std::chrono::steady_clock::time_point last_;
};

std::string format_bytes(uint64_t bytes);

}  // namespace gannet
