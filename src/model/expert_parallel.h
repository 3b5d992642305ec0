// Expert parallelism (deepinfer-system.md, MoE + EP + EPLB): the routed experts of every
// MoE layer are spread over the ranks of a job, each rank holding its slots' experts
// (ExpertPlacement, eplb.h); attention, routers and shared experts stay on every rank.
// Per MoE layer, each rank routes its own tokens, sends every (token, expert) row to a
// rank holding a replica of that expert (all-to-all-v), computes the rows it received
// with its slots' weights, and sends the results back; the token's owner adds them in the
// fixed order of moe.h step 6. An expert's product of a row depends on that row alone, so
// the sums are the single-rank bits whatever the placement or the replica chosen.
//
// Every rank must run the same sequence of forwards (a rank with no tokens runs an idle
// one, MoeLayer with zero rows) so the exchanges pair up; begin_forward() marks each, and
// every `eplb_interval` forwards the placement is rebalanced from the loads of the last
// `eplb_window` forwards (summed over the ranks), the weights moving between ranks.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "core/collective.h"
#include "model/eplb.h"
#include "model/moe.h"

namespace gannet::model {

struct ExpertParallelOptions {
  int64_t redundant = 0;       // spare slots per rank (redundant experts)
  int64_t eplb_interval = 0;   // forwards between rebalances; 0: never
  int64_t eplb_window = 0;     // forwards of load history; 0: eplb_interval
};

// Statistics of this rank (per MoE layer where it says so).
struct ExpertParallelStats {
  int64_t forwards = 0, rebalances = 0;
  std::vector<int64_t> rows_sent, rows_computed;  // [layers]: (token, expert) rows
  std::vector<int64_t> rows_computed_since;      // [layers]: since the first rebalance
  std::vector<double> exchange_seconds;          // [layers]: time in the all-to-alls
  uint64_t bytes_sent = 0, bytes_received = 0;   // all-to-all payloads, this rank
  uint64_t weight_bytes_moved = 0;               // sent by rebalances
  double rebalance_seconds = 0;
};

// The tensor name's routed expert (".experts.<e>." outside the DSpark drafter's "mtp."),
// or -1: a checkpoint filter keeps only a rank's experts.
int64_t routed_expert_of_tensor(const std::string& name);

class ExpertParallel {
 public:
  ExpertParallel(int rank, int ranks, int64_t n_experts, int64_t n_layers, const ExpertParallelOptions& opt);

  int rank() const { return rank_; }
  int ranks() const { return ranks_; }
  int64_t n_layers() const { return int64_t(layers_.size()); }
  int64_t slots() const { return placement(0).slots; }
  const ExpertPlacement& placement(int64_t layer) const { return layers_[size_t(layer)].place; }
  // Experts this rank loads from the checkpoint (the initial placement's), for every layer.
  bool loads_expert(int64_t e) const;

  // Loading: the weights of expert e of `layer` (one of loads_expert()); views stay valid
  // for the model's life (the checkpoint's map).
  void set_expert(int64_t layer, int64_t e, const MoeExpert& w);
  // After every set_expert: checks each layer has all its slots and one format.
  void finish_loading();
  int64_t inter(int64_t layer) const { return layers_[size_t(layer)].inter; }
  const MoeExpert& slot_weights(int64_t layer, int64_t slot) const { return layers_[size_t(layer)].w[size_t(slot)]; }

  // The stream the exchanges run on (the executor thread's); before the first forward.
  void set_comm(Collective* comm) { comm_ = comm; }
  Collective& comm() const { return *comm_; }

  // Before every forward (real or idle): counts it and rebalances when one is due.
  void begin_forward();
  // The rows of one forward routed to each expert (for EPLB's window).
  void count_load(int64_t layer, const int32_t* ids, int64_t n);
  // Rebalances now from the window's loads (all ranks call it together).
  void rebalance_now();
  // The last window's loads of a layer summed over all ranks ([n_experts]); collective.
  std::vector<int64_t> global_window_load(int64_t layer);
  // This rank's share of it (no communication).
  std::vector<int64_t> window_load(int64_t layer) const;

  ExpertParallelStats& stats() { return stats_; }
  const ExpertParallelStats& stats() const { return stats_; }

 private:
  struct Layer {
    ExpertPlacement place;
    int64_t inter = 0;
    MoeExpert like;  // formats and shapes of every expert of the layer (data: the first loaded)
    std::vector<MoeExpert> w;                               // [slots] this rank's slot weights
    std::vector<std::shared_ptr<std::vector<uint8_t>>> own;  // [slots] bytes after a move
    std::vector<int64_t> window;                            // [window, n_experts] ring
  };
  int rank_, ranks_;
  int64_t n_experts_;
  ExpertParallelOptions opt_;
  Collective* comm_ = nullptr;
  std::vector<Layer> layers_;
  ExpertPlacement initial_;
  ExpertParallelStats stats_;
};

}  // namespace gannet::model
