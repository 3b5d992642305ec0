// Data parallelism over the ranks of a job (one engine per rank): requests are shared out
// by the tokens they queue, and every rank's engine steps in the same loop so that expert
// parallelism's per-step forwards pair up (expert_parallel.h).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "core/collective.h"
#include "gannet/engine_args.h"

namespace gannet::engine {
class Engine;
}

namespace gannet::parallel {

// Owner rank of each request, in request order: each goes to the rank with the fewest
// tokens queued so far (cost[i]: its prompt tokens plus the tokens it may generate; ties
// to the lower rank), not round-robin.
std::vector<int> assign_by_tokens(const std::vector<int64_t>& cost, int ranks);

// Steps the engine until no rank has unfinished requests, handing each step's outputs to
// on_output. Every rank of the group calls it together.
template <typename OnOutputs>
void run_until_all_done(engine::Engine& eng, Collective& group, OnOutputs&& on_outputs);

// The job's command-line options every engine command takes: --dp N (must equal the
// number of ranks mpirun started) and --mpi-timeout SECONDS; and the default thread
// count: the machine's cores shared by the ranks on it.
void apply_job_options(const std::string* dp, const std::string* mpi_timeout, EngineArgs& ea);

}  // namespace gannet::parallel

#include "engine/engine.h"

namespace gannet::parallel {

template <typename OnOutputs>
void run_until_all_done(engine::Engine& eng, Collective& group, OnOutputs&& on_outputs) {
  while (group.any(eng.has_unfinished())) on_outputs(eng.step());
}

}  // namespace gannet::parallel
