#include "core/progress_bar.h"

#include <unistd.h>

#include <cstdio>

namespace gannet {

std::string format_bytes(uint64_t b) {
  char buf[32];
  if (b >= (1ull << 30)) std::snprintf(buf, sizeof buf, "%.2f GiB", double(b) / double(1ull << 30));
  else if (b >= (1ull << 20)) std::snprintf(buf, sizeof buf, "%.1f MiB", double(b) / double(1ull << 20));
  else if (b >= 1024) std::snprintf(buf, sizeof buf, "%.1f KiB", double(b) / 1024.0);
  else std::snprintf(buf, sizeof buf, "%llu B", (unsigned long long)b);
  return buf;
}

ProgressBar::ProgressBar(std::string label, bool unit_bytes)
    : label_(std::move(label)), unit_bytes_(unit_bytes), enabled_(isatty(STDERR_FILENO)) {}

ProgressBar::~ProgressBar() { finish(); }

void ProgressBar::update(uint64_t done, uint64_t total, const std::string& extra) {
  if (!enabled_) return;
  auto now = std::chrono::steady_clock::now();
  if (drawn_ && done < total && now - last_ < std::chrono::milliseconds(100)) return;
  last_ = now;
  drawn_ = true;
  const int width = 30;
  double frac = total ? double(done) / double(total) : 1.0;
  if (frac > 1) frac = 1;
  int filled = int(frac * width);
  std::string bar(size_t(filled), '#');
  bar.resize(width, '.');
  std::string counts = unit_bytes_ ? format_bytes(done) + " / " + format_bytes(total)
                                   : std::to_string(done) + " / " + std::to_string(total);
  std::fprintf(stderr, "\r%s [%s] %3d%% %s %s\033[K", label_.c_str(), bar.c_str(), int(frac * 100),
               counts.c_str(), extra.c_str());
  std::fflush(stderr);
}

void ProgressBar::finish() {
  if (enabled_ && drawn_) {
    std::fprintf(stderr, "\r\033[K");
    std::fflush(stderr);
    drawn_ = false;
  }
}

}  // namespace gannet
