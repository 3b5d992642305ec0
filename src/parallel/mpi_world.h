// The process's place in an `mpirun` job, and the Collective (core/collective.h) over MPI.
//
// MPI is initialised only when the process was started by mpirun (Open MPI's environment
// says so), so a plain `gannet ...` never touches it and runs as the one rank of its own
// job. Collectives are non-blocking MPI calls polled against the job's timeout: a rank
// that stops answering (crashed, hung, or failed before reaching the collective) ends the
// job with an error naming the operation instead of leaving the others waiting forever.
#pragma once

#include <memory>
#include <string>

#include "core/collective.h"

namespace gannet::parallel {

struct World {
  int rank = 0, size = 1;
  int local_rank = 0, local_size = 1;  // ranks on this machine
};

// Starts MPI (MPI_THREAD_MULTIPLE: the engine thread and the executor thread each drive
// their own Collective) when launched by mpirun. Throws gannet::Error when launched with
// several ranks by a build without MPI, or when MPI cannot give thread support.
World init_world(int* argc, char*** argv);
const World& world();
bool mpi_enabled();  // built with MPI
// Ends MPI cleanly (after the last collective); no-op outside a job.
void finalize_world();
// A failure on this rank: every rank of the job ends now (MPI_Abort), with exit code `code`.
[[noreturn]] void abort_world(int code);

// Seconds a collective waits for the other ranks before the job is ended (default 600;
// GANNET_MPI_TIMEOUT or --mpi-timeout).
void set_collective_timeout(double seconds);
double collective_timeout();

// The world's ranks as a Collective (single_rank() outside a job). Each call gives an
// independent stream (its own communicator).
std::unique_ptr<Collective> world_collective();

}  // namespace gannet::parallel
