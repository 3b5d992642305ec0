// How many CPUs this process may really use: the CPUs in its affinity mask, lowered by a
// cgroup CPU quota (containers). std::thread::hardware_concurrency() sees neither, so a
// container limited to 2 CPUs on a 64-core host would otherwise start 64 threads.
#pragma once

#include <optional>
#include <string>

namespace gannet {

// >= 1. Affinity mask count, capped by ceil(quota / period) of the process's cgroup (v2
// cpu.max or v1 cpu.cfs_quota_us / cpu.cfs_period_us, on its cgroup and every ancestor).
int usable_cpus();

// CPUs in the affinity mask (sched_getaffinity), >= 1.
int affinity_cpus();

// ceil(quota / period) from the text of a cgroup v2 cpu.max file ("max 100000" or
// "150000 100000"); nullopt when unlimited or unreadable.
std::optional<int> cpus_from_cgroup_v2_cpu_max(const std::string& text);

}  // namespace gannet
