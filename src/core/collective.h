// Collective operations among the ranks of a job (one process per rank, DESIGN.md
// section 3: src/parallel/ implements them over MPI). Layers below parallel/ (the engine's
// lock-step, the model's expert parallelism, the benchmarks' reports) use this interface
// only, so they build and run without MPI: single_rank() is the one-process job.
//
// Every rank calls the same operations in the same order on one Collective; a second
// thread uses its own from split(). An operation that waits longer than the job's timeout
// for the other ranks ends the job with an error naming it (no hang).
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

namespace gannet {

class Collective {
 public:
  virtual ~Collective() = default;
  virtual int rank() const = 0;
  virtual int size() const = 0;

  // True on every rank when any rank passes true.
  virtual bool any(bool mine) = 0;
  // Element-wise sums / maxima over the ranks, in place, on every rank.
  virtual void all_reduce_sum(int64_t* v, int64_t n) = 0;
  virtual void all_reduce_max(double* v, int64_t n) = 0;
  // send[r] goes to rank r; recv[r] came from rank r ([size()] each).
  virtual void all_to_all(const int64_t* send, int64_t* recv) = 0;
  // Bytes: send_bytes[r] bytes of `send` (blocks in rank order) go to rank r, and
  // recv_bytes[r] bytes from rank r land in `recv` (blocks in rank order).
  virtual void all_to_all_v(const void* send, const int64_t* send_bytes, void* recv, const int64_t* recv_bytes) = 0;
  // Rank 0's text, on every rank.
  virtual std::string broadcast(const std::string& text) = 0;
  // The same without the timeout: for ranks that idle until rank 0 has work for them (a
  // server between requests).
  virtual std::string broadcast_wait(const std::string& text) = 0;
  // Every rank's text, in rank order, on rank 0 (empty elsewhere).
  virtual std::vector<std::string> gather(const std::string& text) = 0;
  // Point to point: every send and receive at once; the k-th send from a to b matches
  // b's k-th receive from a.
  struct Transfer {
    int peer = 0;
    void* data = nullptr;
    int64_t bytes = 0;
  };
  virtual void exchange(const std::vector<Transfer>& sends, const std::vector<Transfer>& recvs) = 0;
  // An independent stream of collectives over the same ranks (for another thread).
  virtual std::unique_ptr<Collective> split() = 0;
};

// The job of one process: every operation is the identity.
std::unique_ptr<Collective> single_rank();

}  // namespace gannet
