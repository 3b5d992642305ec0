// What expert parallelism did over a run, gathered from every rank onto rank 0 (for
// `generate` and `bench throughput`): expert load balance across ranks, bytes moved per
// step, time in the all-to-alls, EPLB's rebalances.
#pragma once

#include <nlohmann/json_fwd.hpp>

#include "core/collective.h"
#include "model/expert_parallel.h"

namespace gannet::parallel {

// Collective over `group` (every rank calls it, after its last step). On rank 0:
//   ranks, slots_per_rank, forwards, rebalances, weight_bytes_moved,
//   rows_computed [ranks]             (token, expert) rows each rank's experts computed
//   rank_load_max_over_mean           max / mean of those (1 = even)
//   rank_load_max_over_mean_recent    the same from the first rebalance on (all of it
//                                     without EPLB)
//   expert_load_max_over_mean         max / mean tokens per expert over the last window
//                                     (the workload's skew, averaged over the layers)
//   bytes_per_step_per_rank           all-to-all payload sent + received per forward
//   all_to_all_ms_per_layer           time in a layer's exchanges per forward
// elsewhere: null. ep null (no expert parallelism): null everywhere, no communication.
nlohmann::json expert_parallel_report(const model::ExpertParallel* ep, Collective& group);

}  // namespace gannet::parallel
