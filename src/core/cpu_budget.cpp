#include "core/cpu_budget.h"

#include <sched.h>

#include <algorithm>
#include <cmath>
#include <fstream>
#include <functional>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

namespace gannet {

namespace {

std::optional<std::string> slurp(const std::string& path) {
  std::ifstream in(path);
  if (!in) return std::nullopt;
  std::ostringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

std::optional<int> ceil_ratio(long long quota, long long period) {
  if (quota <= 0 || period <= 0) return std::nullopt;
  return int(std::max<long long>(1, (quota + period - 1) / period));
}

// The tightest quota on `dir` and its ancestors up to `root`.
std::optional<int> tightest(const std::string& root, std::string dir,
                            const std::function<std::optional<int>(const std::string&)>& read) {
  std::optional<int> best;
  for (;;) {
    if (auto v = read(root + dir)) best = best ? std::min(*best, *v) : *v;
    if (dir.empty() || dir == "/") break;
    const size_t cut = dir.find_last_of('/');
    dir = cut == std::string::npos || cut == 0 ? std::string() : dir.substr(0, cut);
  }
  return best;
}

std::optional<int> cgroup_cpus() {
  auto self = slurp("/proc/self/cgroup");
  if (!self) return std::nullopt;
  std::istringstream lines(*self);
  std::string line;
  std::optional<int> best;
  auto take = [&](std::optional<int> v) {
    if (v) best = best ? std::min(*best, *v) : *v;
  };
  while (std::getline(lines, line)) {
    // hierarchy-id:controllers:path
    const size_t a = line.find(':'), b = line.find(':', a + 1);
    if (a == std::string::npos || b == std::string::npos) continue;
    const std::string controllers = line.substr(a + 1, b - a - 1), path = line.substr(b + 1);
    if (controllers.empty()) {  // cgroup v2
      take(tightest("/sys/fs/cgroup", path, [](const std::string& d) -> std::optional<int> {
        auto t = slurp(d + "/cpu.max");
        return t ? cpus_from_cgroup_v2_cpu_max(*t) : std::nullopt;
      }));
    } else if (("," + controllers + ",").find(",cpu,") != std::string::npos) {  // cgroup v1 cpu controller
      for (const char* mount : {"/sys/fs/cgroup/cpu", "/sys/fs/cgroup/cpu,cpuacct"})
        take(tightest(mount, path, [](const std::string& d) -> std::optional<int> {
          auto q = slurp(d + "/cpu.cfs_quota_us"), p = slurp(d + "/cpu.cfs_period_us");
          if (!q || !p) return std::nullopt;
          try {
            return ceil_ratio(std::stoll(*q), std::stoll(*p));
          } catch (...) {
            return std::nullopt;
          }
        }));
    }
  }
  return best;
}

}  // namespace

std::optional<int> cpus_from_cgroup_v2_cpu_max(const std::string& text) {
  std::istringstream in(text);
  std::string quota;
  long long period = 0;
  if (!(in >> quota >> period) || quota == "max") return std::nullopt;
  try {
    return ceil_ratio(std::stoll(quota), period);
  } catch (...) {
    return std::nullopt;
  }
}

int affinity_cpus() {
  cpu_set_t set;
  CPU_ZERO(&set);
  if (sched_getaffinity(0, sizeof set, &set) == 0) return std::max(1, CPU_COUNT(&set));
  return int(std::max(1u, std::thread::hardware_concurrency()));
}

int usable_cpus() {
  int n = affinity_cpus();
  if (auto q = cgroup_cpus()) n = std::min(n, *q);
  return std::max(1, n);
}

}  // namespace gannet
