// Expert placement for expert parallelism, and EPLB's greedy rebalance (DeepInfer's eplb/
// policy, after DeepSeek's public EPLB; deepinfer-system.md, MoE + EP + EPLB).
//
// Each of `ranks` ranks has `slots` expert slots; a slot holds one routed expert (a
// replica) or nothing. Every expert has at least one replica. All of it is a pure
// function of its inputs, so every rank computes the same placement from the same loads.
#pragma once

#include <cstdint>
#include <vector>

namespace gannet::model {

struct ExpertPlacement {
  int ranks = 1;
  int64_t slots = 0;                  // per rank
  int64_t n_experts = 0;
  std::vector<int32_t> slot_expert;   // [ranks * slots]: expert in global slot g, or -1
  std::vector<std::vector<int32_t>> replicas;  // [n_experts]: global slots holding it, increasing

  int rank_of(int32_t global_slot) const { return int(global_slot / slots); }
  // Fills replicas from slot_expert; throws gannet::Error when an expert has none.
  void derive();
};

// Slots per rank: an equal share of the experts (rounded up) plus `redundant` spare slots.
int64_t slots_per_rank(int64_t n_experts, int ranks, int64_t redundant);
// Before any load is known: rank r holds experts [r E / N, (r + 1) E / N) in its first
// slots (every rank some, given E >= N); the spare slots are empty.
ExpertPlacement initial_placement(int64_t n_experts, int ranks, int64_t redundant);

// EPLB: load[e] is expert e's token count over the recent window (all ranks). Replicas go
// one at a time to the expert with the highest load per replica (no more replicas than
// ranks), then the replicas, heaviest first, each to the least loaded rank with a free
// slot that does not already hold that expert. A rank keeps an expert it already holds
// (`old`) in the same slot, so unchanged experts move no bytes. Of equally loaded ranks the
// one with fewer experts wins, then the lower id, so every rank keeps at least one expert.
ExpertPlacement rebalance(const std::vector<int64_t>& load, const ExpertPlacement& old);

// Each rank's expected share of the load under `p` (a token of expert e is split evenly
// over its replicas), [ranks].
std::vector<double> rank_loads(const std::vector<int64_t>& load, const ExpertPlacement& p);
// max / mean of v (1 for an even spread; 0 when all are 0).
double max_over_mean(const std::vector<double>& v);

}  // namespace gannet::model
