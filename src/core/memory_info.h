// What the kernel says about this process's memory: free memory (/proc/meminfo) and how
// ranges of its address space are backed (/proc/self/smaps).
#pragma once

#include <cstdint>
#include <optional>
#include <utility>
#include <vector>

namespace gannet {

// MemAvailable of /proc/meminfo in bytes (what can be allocated without swapping,
// reclaimable page cache included); nullopt where it cannot be read.
std::optional<uint64_t> mem_available_bytes();

// For each [begin, end) range of this process's address space, the bytes of it mapped with
// 2 MiB pages (smaps' AnonHugePages, FilePmdMapped and ShmemPmdMapped of the mappings it
// overlaps, each counted in proportion to the overlap). nullopt where smaps cannot be read.
std::optional<std::vector<uint64_t>> huge_mapped_bytes(const std::vector<std::pair<uintptr_t, uintptr_t>>& ranges);

// Whether transparent huge pages can back a mapping that asks for them (madvise): false
// when /sys/kernel/mm/transparent_hugepage/enabled says never or is missing.
bool transparent_huge_pages_available();

}  // namespace gannet
