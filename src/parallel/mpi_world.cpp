#include "parallel/mpi_world.h"

#include <chrono>
#include <climits>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <thread>
#include <vector>

#include "core/error.h"

#ifdef GANNET_HAVE_MPI
#include <mpi.h>
#endif

namespace gannet::parallel {

namespace {

World g_world;
bool g_started = false;
double g_timeout = 600.0;

int env_int(const char* name, int dflt) {
  const char* v = std::getenv(name);
  return v && *v ? std::atoi(v) : dflt;
}

// mpirun (Open MPI's ORTE or PMIx launchers) sets these in every rank's environment.
// (PMI_RANK: launchers speaking PMI-1/2, e.g. srun.)
bool launched_by_mpirun() {
  return std::getenv("OMPI_COMM_WORLD_SIZE") || std::getenv("PMIX_RANK") || std::getenv("PMI_RANK");
}

#ifdef GANNET_HAVE_MPI

[[noreturn]] void timed_out(const char* op, int rank) {
  std::fprintf(stderr,
               "gannet: rank %d: %s waited more than %.0f s for the other ranks (one failed or stopped "
               "answering); ending the job\n",
               rank, op, g_timeout);
  std::fflush(stderr);
  MPI_Abort(MPI_COMM_WORLD, 3);
  std::abort();
}

// Polls a request until it completes: spins briefly (loopback exchanges take
// microseconds), then yields and sleeps so that oversubscribed ranks leave the cores to
// the ranks doing work.
void wait(MPI_Request* req, const char* op, int rank, bool forever = false) {
  int done = 0;
  for (int i = 0; i < 2000 && !done; ++i) MPI_Test(req, &done, MPI_STATUS_IGNORE);
  if (done) return;
  const auto t0 = std::chrono::steady_clock::now();
  int64_t polls = 0;
  while (!done) {
    MPI_Test(req, &done, MPI_STATUS_IGNORE);
    if (done) break;
    if (++polls % 64 == 0 && !forever &&
        std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count() > g_timeout)
      timed_out(op, rank);
    if (polls < 1000) std::this_thread::yield();
    else if (polls < 20000) std::this_thread::sleep_for(std::chrono::microseconds(50));
    else std::this_thread::sleep_for(std::chrono::milliseconds(1));  // idle: a millisecond late at most
  }
}

void wait_all(std::vector<MPI_Request>& reqs, const char* op, int rank) {
  for (MPI_Request& r : reqs) wait(&r, op, rank);
}

int as_count(int64_t bytes, const char* op) {
  if (bytes < 0 || bytes > INT_MAX) fail(op, ": a count of ", bytes, " exceeds what one MPI call can carry (INT_MAX)");
  return int(bytes);
}

class MpiCollective final : public Collective {
 public:
  explicit MpiCollective(MPI_Comm parent) {
    MPI_Comm_dup(parent, &comm_);
    MPI_Comm_rank(comm_, &rank_);
    MPI_Comm_size(comm_, &size_);
  }
  ~MpiCollective() override {
    if (!finalized()) MPI_Comm_free(&comm_);
  }
  int rank() const override { return rank_; }
  int size() const override { return size_; }

  bool any(bool mine) override {
    int in = mine ? 1 : 0, out = 0;
    MPI_Request r;
    MPI_Iallreduce(&in, &out, 1, MPI_INT, MPI_LOR, comm_, &r);
    wait(&r, "an agreement (allreduce)", rank_);
    return out != 0;
  }
  void all_reduce_sum(int64_t* v, int64_t n) override {
    MPI_Request r;
    MPI_Iallreduce(MPI_IN_PLACE, v, as_count(n, "allreduce"), MPI_INT64_T, MPI_SUM, comm_, &r);
    wait(&r, "a sum (allreduce)", rank_);
  }
  void all_reduce_max(double* v, int64_t n) override {
    MPI_Request r;
    MPI_Iallreduce(MPI_IN_PLACE, v, as_count(n, "allreduce"), MPI_DOUBLE, MPI_MAX, comm_, &r);
    wait(&r, "a maximum (allreduce)", rank_);
  }
  void all_to_all(const int64_t* send, int64_t* recv) override {
    MPI_Request r;
    MPI_Ialltoall(send, 1, MPI_INT64_T, recv, 1, MPI_INT64_T, comm_, &r);
    wait(&r, "an all-to-all", rank_);
  }
  void all_to_all_v(const void* send, const int64_t* send_bytes, void* recv, const int64_t* recv_bytes) override {
    sc_.resize(size_t(size_));
    sd_.resize(size_t(size_));
    rc_.resize(size_t(size_));
    rd_.resize(size_t(size_));
    // MPI counts and offsets are ints: in 4-byte words when every block is whole words
    // (rows of floats), so a rank's buffers may reach 8 GiB; bytes otherwise.
    int64_t unit = 4;
    for (int p = 0; p < size_; ++p)
      if (send_bytes[p] % 4 || recv_bytes[p] % 4) unit = 1;
    int64_t so = 0, ro = 0;
    for (int p = 0; p < size_; ++p) {
      sc_[size_t(p)] = as_count(send_bytes[p] / unit, "all-to-all-v");
      rc_[size_t(p)] = as_count(recv_bytes[p] / unit, "all-to-all-v");
      sd_[size_t(p)] = as_count(so / unit, "all-to-all-v");
      rd_[size_t(p)] = as_count(ro / unit, "all-to-all-v");
      so += send_bytes[p];
      ro += recv_bytes[p];
    }
    const MPI_Datatype type = unit == 4 ? MPI_INT32_T : MPI_BYTE;
    MPI_Request r;
    MPI_Ialltoallv(send, sc_.data(), sd_.data(), type, recv, rc_.data(), rd_.data(), type, comm_, &r);
    wait(&r, "an all-to-all-v", rank_);
  }
  std::string broadcast(const std::string& text) override { return bcast(text, false); }
  std::string broadcast_wait(const std::string& text) override { return bcast(text, true); }
  std::string bcast(const std::string& text, bool forever) {
    int64_t n = int64_t(text.size());
    MPI_Request r;
    MPI_Ibcast(&n, 1, MPI_INT64_T, 0, comm_, &r);
    wait(&r, "a broadcast", rank_, forever);
    std::string out = rank_ == 0 ? text : std::string(size_t(n), '\0');
    MPI_Ibcast(out.data(), as_count(n, "broadcast"), MPI_BYTE, 0, comm_, &r);
    wait(&r, "a broadcast", rank_);
    return out;
  }
  std::vector<std::string> gather(const std::string& text) override {
    int n = as_count(int64_t(text.size()), "gather");
    std::vector<int> counts(size_t(rank_ == 0 ? size_ : 0)), displs(counts.size());
    MPI_Request r;
    MPI_Igather(&n, 1, MPI_INT, counts.data(), 1, MPI_INT, 0, comm_, &r);
    wait(&r, "a gather", rank_);
    std::string all;
    if (rank_ == 0) {
      int64_t off = 0;
      for (int p = 0; p < size_; ++p) displs[size_t(p)] = as_count(off, "gather"), off += counts[size_t(p)];
      all.resize(size_t(off));
    }
    MPI_Igatherv(text.data(), n, MPI_BYTE, all.data(), counts.data(), displs.data(), MPI_BYTE, 0, comm_, &r);
    wait(&r, "a gather", rank_);
    std::vector<std::string> out;
    for (int p = 0; rank_ == 0 && p < size_; ++p) out.push_back(all.substr(size_t(displs[size_t(p)]), size_t(counts[size_t(p)])));
    return out;
  }
  void exchange(const std::vector<Transfer>& sends, const std::vector<Transfer>& recvs) override {
    std::vector<MPI_Request> reqs(sends.size() + recvs.size());
    size_t k = 0;
    for (const Transfer& t : recvs)
      MPI_Irecv(t.data, as_count(t.bytes, "exchange"), MPI_BYTE, t.peer, 7, comm_, &reqs[k++]);
    for (const Transfer& t : sends)
      MPI_Isend(t.data, as_count(t.bytes, "exchange"), MPI_BYTE, t.peer, 7, comm_, &reqs[k++]);
    wait_all(reqs, "a weight exchange (send/receive)", rank_);
  }
  std::unique_ptr<Collective> split() override { return std::make_unique<MpiCollective>(comm_); }

 private:
  static bool finalized() {
    int f = 0;
    MPI_Finalized(&f);
    return f != 0;
  }
  MPI_Comm comm_;
  int rank_ = 0, size_ = 1;
  std::vector<int> sc_, sd_, rc_, rd_;
};

#endif

}  // namespace

World init_world(int* argc, char*** argv) {
  (void)argc, (void)argv;
  if (const char* t = std::getenv("GANNET_MPI_TIMEOUT"); t && *t) {
    char* end = nullptr;
    const double v = std::strtod(t, &end);
    if (!end || *end || !(v > 0)) fail("GANNET_MPI_TIMEOUT must be a number of seconds > 0, got '", t, "'");
    g_timeout = v;
  }
  if (!launched_by_mpirun()) return g_world;
#ifdef GANNET_HAVE_MPI
  int provided = 0;
  MPI_Init_thread(argc, argv, MPI_THREAD_MULTIPLE, &provided);
  g_started = true;
  MPI_Comm_rank(MPI_COMM_WORLD, &g_world.rank);
  MPI_Comm_size(MPI_COMM_WORLD, &g_world.size);
  g_world.local_rank = env_int("OMPI_COMM_WORLD_LOCAL_RANK", 0);
  g_world.local_size = std::max(1, env_int("OMPI_COMM_WORLD_LOCAL_SIZE", 1));
  if (provided < MPI_THREAD_MULTIPLE && g_world.size > 1)
    fail("this MPI library gives thread level ", provided, "; gannet needs MPI_THREAD_MULTIPLE (", MPI_THREAD_MULTIPLE,
         ") to run several ranks");
#else
  if (env_int("OMPI_COMM_WORLD_SIZE", 1) > 1)
    fail("started by mpirun with ", env_int("OMPI_COMM_WORLD_SIZE", 1),
         " ranks, but this gannet was built without MPI (install libopenmpi-dev and rebuild)");
#endif
  return g_world;
}

const World& world() { return g_world; }

bool mpi_enabled() {
#ifdef GANNET_HAVE_MPI
  return true;
#else
  return false;
#endif
}

void finalize_world() {
#ifdef GANNET_HAVE_MPI
  if (g_started) {
    g_started = false;
    MPI_Finalize();
  }
#endif
}

void abort_world(int code) {
  std::fflush(stdout);
  std::fflush(stderr);
#ifdef GANNET_HAVE_MPI
  if (g_started && g_world.size > 1) MPI_Abort(MPI_COMM_WORLD, code);
#endif
  std::exit(code);
}

void set_collective_timeout(double seconds) {
  if (!(seconds > 0)) fail("the collective timeout must be > 0 seconds, got ", seconds);
  g_timeout = seconds;
}
double collective_timeout() { return g_timeout; }

std::unique_ptr<Collective> world_collective() {
#ifdef GANNET_HAVE_MPI
  if (g_started) return std::make_unique<MpiCollective>(MPI_COMM_WORLD);
#endif
  return single_rank();
}

}  // namespace gannet::parallel
