#include "core/memory_info.h"

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <string>

namespace gannet {

std::optional<uint64_t> mem_available_bytes() {
  std::ifstream in("/proc/meminfo");
  std::string key, unit;
  uint64_t kb = 0;
  while (in >> key >> kb >> unit)
    if (key == "MemAvailable:") return kb * 1024;
  return std::nullopt;
}

std::optional<std::vector<uint64_t>> huge_mapped_bytes(const std::vector<std::pair<uintptr_t, uintptr_t>>& ranges) {
  std::ifstream in("/proc/self/smaps");
  if (!in) return std::nullopt;
  std::vector<uint64_t> out(ranges.size(), 0);
  uintptr_t lo = 0, hi = 0;  // the mapping whose fields follow
  std::string line;
  while (std::getline(in, line)) {
    // A mapping's first line: "start-end perms offset dev inode [path]", addresses in hex.
    char* end = nullptr;
    const unsigned long long a = std::strtoull(line.c_str(), &end, 16);
    if (end && *end == '-' && end != line.c_str()) {
      char* end2 = nullptr;
      const unsigned long long b = std::strtoull(end + 1, &end2, 16);
      if (end2 && *end2 == ' ') {
        lo = uintptr_t(a);
        hi = uintptr_t(b);
        continue;
      }
    }
    for (const char* field : {"AnonHugePages:", "FilePmdMapped:", "ShmemPmdMapped:"}) {
      const size_t n = std::strlen(field);
      if (line.compare(0, n, field) != 0) continue;
      const uint64_t bytes = std::strtoull(line.c_str() + n, nullptr, 10) * 1024;
      if (bytes == 0 || hi <= lo) break;
      for (size_t i = 0; i < ranges.size(); ++i) {
        const uintptr_t b = std::max(lo, ranges[i].first), e = std::min(hi, ranges[i].second);
        if (e > b) out[i] += uint64_t(double(bytes) * double(e - b) / double(hi - lo));
      }
      break;
    }
  }
  return out;
}

bool transparent_huge_pages_available() {
  std::ifstream in("/sys/kernel/mm/transparent_hugepage/enabled");
  std::string s;
  if (!std::getline(in, s)) return false;
  return s.find("[never]") == std::string::npos;
}

}  // namespace gannet
