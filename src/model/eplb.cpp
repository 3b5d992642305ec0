#include "model/eplb.h"

#include <algorithm>
#include <numeric>

#include "core/error.h"

namespace gannet::model {

void ExpertPlacement::derive() {
  replicas.assign(size_t(n_experts), {});
  GANNET_CHECK(int64_t(slot_expert.size()) == int64_t(ranks) * slots, "placement size");
  for (size_t g = 0; g < slot_expert.size(); ++g) {
    const int32_t e = slot_expert[g];
    if (e < 0) continue;
    GANNET_CHECK(e < n_experts, "expert ", e, " of ", n_experts);
    replicas[size_t(e)].push_back(int32_t(g));
  }
  for (int64_t e = 0; e < n_experts; ++e)
    if (replicas[size_t(e)].empty()) fail("expert placement: expert ", e, " has no replica");
}

int64_t slots_per_rank(int64_t n_experts, int ranks, int64_t redundant) {
  if (ranks < 1) fail("expert parallelism needs at least one rank");
  if (redundant < 0) fail("redundant experts per rank must be >= 0, got ", redundant);
  return (n_experts + ranks - 1) / ranks + redundant;
}

ExpertPlacement initial_placement(int64_t n_experts, int ranks, int64_t redundant) {
  ExpertPlacement p;
  p.ranks = ranks;
  p.n_experts = n_experts;
  p.slots = slots_per_rank(n_experts, ranks, redundant);
  p.slot_expert.assign(size_t(int64_t(ranks) * p.slots), -1);
  // Rank r: experts [r E / N, (r + 1) E / N), so every rank has floor or ceil of E / N.
  for (int r = 0; r < ranks; ++r) {
    const int64_t first = int64_t(r) * n_experts / ranks, end = int64_t(r + 1) * n_experts / ranks;
    for (int64_t e = first; e < end; ++e) p.slot_expert[size_t(r * p.slots + (e - first))] = int32_t(e);
  }
  p.derive();
  return p;
}

ExpertPlacement rebalance(const std::vector<int64_t>& load, const ExpertPlacement& old) {
  const int64_t E = old.n_experts, S = old.slots;
  const int N = old.ranks;
  GANNET_CHECK(int64_t(load.size()) == E, "loads for ", load.size(), " experts, placement has ", E);
  // 1. Replica counts: each further slot to the expert with the highest load per replica
  // (a/b > c/d compared as a*d > c*b, exact).
  std::vector<int64_t> count(size_t(E), 1);
  const int64_t spare = int64_t(N) * S - E;
  GANNET_CHECK(spare >= 0, "fewer slots than experts");
  for (int64_t j = 0; j < spare; ++j) {
    int64_t best = -1;
    for (int64_t e = 0; e < E; ++e) {
      if (count[size_t(e)] >= N) continue;
      if (best < 0 || load[size_t(e)] * count[size_t(best)] > load[size_t(best)] * count[size_t(e)]) best = e;
    }
    if (best < 0 || load[size_t(best)] == 0) break;  // nothing gains from another copy
    ++count[size_t(best)];
  }
  // 2. Replicas, heaviest first, to the least loaded rank that has room and lacks the expert.
  struct Rep {
    int32_t e;
    int64_t copy;
  };
  std::vector<Rep> reps;
  for (int64_t e = 0; e < E; ++e)
    for (int64_t c = 0; c < count[size_t(e)]; ++c) reps.push_back({int32_t(e), c});
  auto share = [&](const Rep& r) { return double(load[size_t(r.e)]) / double(count[size_t(r.e)]); };
  std::stable_sort(reps.begin(), reps.end(), [&](const Rep& a, const Rep& b) {
    // load_a / count_a > load_b / count_b, exactly
    const int64_t l = load[size_t(a.e)] * count[size_t(b.e)], r = load[size_t(b.e)] * count[size_t(a.e)];
    if (l != r) return l > r;
    return a.e != b.e ? a.e < b.e : a.copy < b.copy;
  });
  std::vector<double> rank_load(size_t(N), 0.0);
  std::vector<int64_t> used(size_t(N), 0);
  std::vector<std::vector<int32_t>> held(static_cast<size_t>(N));  // experts per rank, as assigned
  for (const Rep& r : reps) {
    int best = -1;
    for (int pass = 0; pass < 2 && best < 0; ++pass)  // pass 1 allows a second copy on a rank
      for (int k = 0; k < N; ++k) {
        if (used[size_t(k)] >= S) continue;
        if (pass == 0 && std::find(held[size_t(k)].begin(), held[size_t(k)].end(), r.e) != held[size_t(k)].end())
          continue;
        // Least loaded; of equal loads the one with the fewest experts (so that every rank
        // gets some even when nothing has load), then the lower rank.
        if (best < 0 || rank_load[size_t(k)] < rank_load[size_t(best)] ||
            (rank_load[size_t(k)] == rank_load[size_t(best)] && used[size_t(k)] < used[size_t(best)]))
          best = k;
      }
    GANNET_CHECK(best >= 0, "no slot left for expert ", r.e);
    rank_load[size_t(best)] += share(r);
    ++used[size_t(best)];
    held[size_t(best)].push_back(r.e);
  }
  // 3. Slots: an expert a rank already held keeps its slot; the others fill free slots in order.
  ExpertPlacement p;
  p.ranks = N;
  p.slots = S;
  p.n_experts = E;
  p.slot_expert.assign(size_t(int64_t(N) * S), -1);
  for (int k = 0; k < N; ++k) {
    std::vector<int32_t> rest;
    int32_t* slot = p.slot_expert.data() + int64_t(k) * S;
    const int32_t* prev = old.slot_expert.data() + int64_t(k) * S;
    std::vector<uint8_t> taken(size_t(S), 0);
    std::sort(held[size_t(k)].begin(), held[size_t(k)].end());
    for (int32_t e : held[size_t(k)]) {
      int64_t s = 0;
      while (s < S && (taken[size_t(s)] || prev[s] != e)) ++s;
      if (s < S) {
        slot[s] = e;
        taken[size_t(s)] = 1;
      } else {
        rest.push_back(e);
      }
    }
    int64_t s = 0;
    for (int32_t e : rest) {
      while (taken[size_t(s)]) ++s;
      slot[s] = e;
      taken[size_t(s)] = 1;
    }
  }
  p.derive();
  for (int k = 0; k < N; ++k) GANNET_CHECK(used[size_t(k)] > 0, "rebalance left rank ", k, " without experts");
  return p;
}

std::vector<double> rank_loads(const std::vector<int64_t>& load, const ExpertPlacement& p) {
  std::vector<double> out(size_t(p.ranks), 0.0);
  for (int64_t e = 0; e < p.n_experts; ++e) {
    const auto& r = p.replicas[size_t(e)];
    for (int32_t g : r) out[size_t(p.rank_of(g))] += double(load[size_t(e)]) / double(r.size());
  }
  return out;
}

double max_over_mean(const std::vector<double>& v) {
  if (v.empty()) return 0.0;
  const double sum = std::accumulate(v.begin(), v.end(), 0.0);
  if (sum == 0) return 0.0;
  return *std::max_element(v.begin(), v.end()) / (sum / double(v.size()));
}

}  // namespace gannet::model
