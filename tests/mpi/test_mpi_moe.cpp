// Expert parallelism under mpirun (tests/mpirun.sh -np N): each rank's MoE outputs over its
// own tokens equal, bit for bit, a single process computing every rank's tokens with all
// the experts, before and after EPLB rebalances (redundant copies and moved experts,
// weights shuffled between ranks); with a skewed router the rebalance evens the ranks'
// load. One rank has no tokens (it takes part in the exchanges all the same), and a forward
// where no rank has tokens still completes. Prints "ok" on rank 0 and exits 0 when all hold.
//
// test_mpi_moe --timeout-case: rank 1 stops answering (sleeps), and rank 0's collective
// must end the job after the 2-second timeout, naming what it waited for (tests/python).
#include <algorithm>
#include <chrono>
#include <string>
#include <thread>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <random>
#include <vector>

#include "core/collective.h"
#include "core/dtype.h"
#include "model/expert_parallel.h"
#include "model/moe.h"
#include "parallel/mpi_world.h"

using namespace gannet;
using namespace gannet::model;

namespace {

int g_failures = 0;
int g_rank = 0;
#define EXPECT(cond, ...)                                       \
  do {                                                          \
    if (!(cond)) {                                              \
      ++g_failures;                                             \
      std::fprintf(stderr, "rank %d: FAILED %s: ", g_rank, #cond); \
      std::fprintf(stderr, __VA_ARGS__);                        \
      std::fprintf(stderr, "\n");                               \
    }                                                           \
  } while (0)

struct Owned {
  std::vector<float> f32;
  std::vector<uint16_t> bf16;
};

kernels::PackedWeight weight(int64_t n, int64_t k, bool bf16, std::mt19937& rng, std::vector<Owned>& keep) {
  std::normal_distribution<float> d(0.0f, 1.0f / std::sqrt(float(k)));
  keep.emplace_back();
  Owned& o = keep.back();
  kernels::PackedWeight w;
  w.n = n;
  w.k = k;
  if (bf16) {
    for (int64_t i = 0; i < n * k; ++i) o.bf16.push_back(f32_to_bf16(d(rng)));
    w.format = kernels::WeightFormat::kBF16;
    w.data = o.bf16.data();
  } else {
    for (int64_t i = 0; i < n * k; ++i) o.f32.push_back(d(rng));
    w.format = kernels::WeightFormat::kF32;
    w.data = o.f32.data();
  }
  return w;
}

// Every rank's tokens, made identically on every rank: rank r has tokens_of(r) rows.
int64_t tokens_of(int r, int ranks) { return r == ranks - 1 ? 0 : 24 + 7 * r; }

void run_case(Collective& comm, bool bf16, int64_t act_quant) {
  const int P = comm.size(), me = comm.rank();
  const int64_t H = 48, inter = 40, E = 10, K = 3;
  MoeConfig cfg;
  cfg.hidden = H;
  cfg.n_experts = E;
  cfg.top_k = K;
  cfg.n_shared = 1;
  cfg.routed_scaling_factor = 1.5f;
  cfg.swiglu_limit = 10.0f;
  cfg.act_quant_block = act_quant;
  std::mt19937 rng(1234);
  std::vector<Owned> keep;
  keep.reserve(128);
  MoeWeights w;
  w.router = weight(E, H, false, rng, keep);
  // A skewed router: selection biases rise toward expert 0.
  for (int64_t e = 0; e < E; ++e) w.selection_bias.push_back(2.0f * float(E - 1 - e) / float(E - 1));
  for (int64_t e = 0; e < E; ++e)
    w.experts.push_back({weight(inter, H, bf16, rng, keep), weight(inter, H, bf16, rng, keep), weight(H, inter, bf16, rng, keep)});
  w.shared.push_back({weight(inter, H, bf16, rng, keep), weight(inter, H, bf16, rng, keep), weight(H, inter, bf16, rng, keep)});
  const MoeLayer whole(cfg, w);

  int64_t total = 0, first = 0;
  for (int r = 0; r < P; ++r) {
    if (r == me) first = total;
    total += tokens_of(r, P);
  }
  const int64_t T = tokens_of(me, P);
  std::vector<float> x(size_t(total * H));
  std::normal_distribution<float> nd(0.0f, 1.0f);
  std::mt19937 xr(99);
  for (float& v : x) v = nd(xr);
  std::vector<float> ref(size_t(total * H));
  MoeWorkspace ws_ref;
  whole.forward(x.data(), total, ref.data(), ws_ref, nullptr);

  ExpertParallelOptions opt;
  opt.redundant = 2;
  ExpertParallel ep(me, P, E, 1, opt);
  for (int64_t e = 0; e < E; ++e)
    if (ep.loads_expert(e)) ep.set_expert(0, e, w.experts[size_t(e)]);
  ep.finish_loading();
  ep.set_comm(&comm);
  MoeWeights wl = w;
  wl.experts.clear();
  const MoeLayer layer(cfg, wl, &ep, 0);
  MoeWorkspace ws;
  std::vector<float> y(size_t(std::max<int64_t>(T, 1) * H), NAN);
  auto rows_max_over_mean = [&](int64_t before) {
    std::vector<int64_t> rows(size_t(P), 0);
    rows[size_t(me)] = ep.stats().rows_computed[0] - before;
    comm.all_reduce_sum(rows.data(), P);
    return max_over_mean(std::vector<double>(rows.begin(), rows.end()));
  };
  for (int pass = 0; pass < 3; ++pass) {
    const int64_t before = ep.stats().rows_computed[0];
    ep.begin_forward();
    layer.forward(x.data() + first * H, T, y.data(), ws, nullptr);
    EXPECT(std::memcmp(y.data(), ref.data() + first * H, size_t(T * H) * 4) == 0,
           "pass %d (bf16 %d, act_quant %lld): expert-parallel output differs from one process", pass, int(bf16),
           (long long)act_quant);
    const double balance = rows_max_over_mean(before);
    if (pass == 0) EXPECT(balance > 1.5, "the skewed router should load rank 0 most at first (max/mean %.3f)", balance);
    if (pass == 2) EXPECT(balance < 1.25, "after rebalancing the ranks should be near even (max/mean %.3f)", balance);
    // EPLB from this forward's loads: the hot experts gain copies, weights move.
    ep.rebalance_now();
    EXPECT(ep.placement(0).replicas[0].size() > 1, "the hottest expert should have a redundant copy");
  }
  int64_t moved = int64_t(ep.stats().weight_bytes_moved);
  comm.all_reduce_sum(&moved, 1);
  EXPECT(moved > 0, "the rebalances should have moved weights between ranks");
  // No rank has tokens: the exchanges still pair up and finish.
  ep.begin_forward();
  layer.forward(nullptr, 0, nullptr, ws, nullptr);
}

}  // namespace

int main(int argc, char** argv) {
  try {
    parallel::init_world(&argc, &argv);
    parallel::set_collective_timeout(120);
    std::unique_ptr<Collective> comm = parallel::world_collective();
    g_rank = comm->rank();
    if (argc > 1 && std::string(argv[1]) == "--timeout-case") {
      parallel::set_collective_timeout(2);
      if (g_rank == 1) std::this_thread::sleep_for(std::chrono::seconds(60));
      else comm->any(true);
      std::fprintf(stderr, "rank %d: the collective returned without rank 1\n", g_rank);
      return 1;
    }
    if (comm->size() < 2) {
      std::fprintf(stderr, "test_mpi_moe must run under mpirun with at least 2 ranks (tests/mpirun.sh -np 2 ...)\n");
      return 1;
    }
    for (bool bf16 : {false, true})
      for (int64_t aq : {int64_t(0), int64_t(16)}) run_case(*comm, bf16, aq);
    int64_t f = g_failures;
    comm->all_reduce_sum(&f, 1);
    if (g_rank == 0) std::printf(f ? "FAILED: %lld checks\n" : "ok\n", (long long)f);
    comm.reset();
    parallel::finalize_world();
    return f ? 1 : 0;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "rank %d: error: %s\n", g_rank, e.what());
    parallel::abort_world(1);
  }
}
