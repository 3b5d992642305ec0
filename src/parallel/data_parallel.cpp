#include "parallel/data_parallel.h"

#include <cstdlib>

#include "core/cpu_budget.h"
#include "core/error.h"
#include "parallel/mpi_world.h"

namespace gannet::parallel {

std::vector<int> assign_by_tokens(const std::vector<int64_t>& cost, int ranks) {
  if (ranks < 1) fail("data parallelism needs at least one rank");
  std::vector<int64_t> queued(size_t(ranks), 0);
  std::vector<int> owner(cost.size(), 0);
  for (size_t i = 0; i < cost.size(); ++i) {
    int best = 0;
    for (int r = 1; r < ranks; ++r)
      if (queued[size_t(r)] < queued[size_t(best)]) best = r;
    owner[i] = best;
    queued[size_t(best)] += std::max<int64_t>(cost[i], 1);
  }
  return owner;
}

void apply_job_options(const std::string* dp, const std::string* mpi_timeout, EngineArgs& ea) {
  const World& w = world();
  if (dp) {
    char* end = nullptr;
    const long v = std::strtol(dp->c_str(), &end, 10);
    if (dp->empty() || *end || v < 1) fail("--dp expects a number of ranks >= 1, got '", *dp, "'");
    if (v != w.size)
      fail("--dp ", v, " but this job has ", w.size, " rank", w.size == 1 ? "" : "s",
           ": the data-parallel ranks are mpirun's processes (mpirun -np ", v, " gannet ...)");
  }
  if (mpi_timeout) {
    char* end = nullptr;
    const double v = std::strtod(mpi_timeout->c_str(), &end);
    if (mpi_timeout->empty() || *end || !(v > 0)) fail("--mpi-timeout expects seconds > 0, got '", *mpi_timeout, "'");
    set_collective_timeout(v);
  }
  // Each rank's prefix-cache disk tier in its own directory (its blocks are its engine's).
  if (w.size > 1 && !ea.prefix_cache_dir.empty()) ea.prefix_cache_dir += "/rank" + std::to_string(w.rank);
  // Rank 0 reports; the others would repeat it.
  if (w.rank > 0) ea.quiet = true;
  // The cores of this machine are shared by its ranks.
  if (ea.threads == 0 && w.local_size > 1) ea.threads = std::max(1, usable_cpus() / w.local_size);
}

}  // namespace gannet::parallel
