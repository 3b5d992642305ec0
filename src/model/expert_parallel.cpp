#include "model/expert_parallel.h"

#include <chrono>
#include <cstring>

#include "core/error.h"

namespace gannet::model {

int64_t routed_expert_of_tensor(const std::string& name) {
  if (name.rfind("mtp.", 0) == 0) return -1;  // the drafter's experts stay on every rank
  const std::string key = ".experts.";
  const size_t at = name.find(key);
  if (at == std::string::npos) return -1;
  size_t i = at + key.size(), j = i;
  while (j < name.size() && name[j] >= '0' && name[j] <= '9') ++j;
  if (j == i || j >= name.size() || name[j] != '.') return -1;
  return std::stoll(name.substr(i, j - i));
}

ExpertParallel::ExpertParallel(int rank, int ranks, int64_t n_experts, int64_t n_layers,
                               const ExpertParallelOptions& opt)
    : rank_(rank), ranks_(ranks), n_experts_(n_experts), opt_(opt) {
  if (ranks < 1 || rank < 0 || rank >= ranks) fail("expert parallelism: rank ", rank, " of ", ranks);
  if (n_experts < ranks)
    fail("expert parallelism over ", ranks, " ranks needs at least as many routed experts; the model has ", n_experts);
  if (opt_.eplb_interval < 0) fail("--eplb-interval must be >= 0, got ", opt_.eplb_interval);
  if (opt_.eplb_window < 0) fail("--eplb-window must be >= 0, got ", opt_.eplb_window);
  if (opt_.eplb_window == 0) opt_.eplb_window = std::max<int64_t>(1, opt_.eplb_interval);
  initial_ = initial_placement(n_experts, ranks, opt_.redundant);
  layers_.resize(size_t(n_layers));
  for (Layer& L : layers_) {
    L.place = initial_;
    L.w.resize(size_t(initial_.slots));
    L.own.resize(size_t(initial_.slots));
    L.window.assign(size_t(opt_.eplb_window * n_experts), 0);
  }
  stats_.rows_sent.assign(size_t(n_layers), 0);
  stats_.rows_computed.assign(size_t(n_layers), 0);
  stats_.rows_computed_since.assign(size_t(n_layers), 0);
  stats_.exchange_seconds.assign(size_t(n_layers), 0.0);
}

bool ExpertParallel::loads_expert(int64_t e) const {
  for (int32_t g : initial_.replicas[size_t(e)])
    if (initial_.rank_of(g) == rank_) return true;
  return false;
}

void ExpertParallel::set_expert(int64_t layer, int64_t e, const MoeExpert& w) {
  Layer& L = layers_[size_t(layer)];
  bool placed = false;
  for (int32_t g : L.place.replicas[size_t(e)])
    if (L.place.rank_of(g) == rank_) {
      L.w[size_t(g % L.place.slots)] = w;
      placed = true;
    }
  GANNET_CHECK(placed, "expert ", e, " is not in rank ", rank_, "'s slots");
}

void ExpertParallel::finish_loading() {
  for (size_t l = 0; l < layers_.size(); ++l) {
    Layer& L = layers_[l];
    const MoeExpert* first = nullptr;
    for (int64_t s = 0; s < L.place.slots; ++s) {
      const int32_t e = L.place.slot_expert[size_t(rank_ * L.place.slots + s)];
      if (e < 0) continue;
      const MoeExpert& w = L.w[size_t(s)];
      if (!w.w1.data || !w.w2.data || !w.w3.data) fail("expert parallelism: layer ", l, " expert ", e, " was not loaded");
      if (!first) first = &w;
      for (auto [a, b] : {std::pair{&w.w1, &first->w1}, {&w.w3, &first->w3}, {&w.w2, &first->w2}})
        if (a->format != b->format || a->n != b->n || a->k != b->k || a->block_n != b->block_n || a->block_k != b->block_k)
          fail("expert parallelism: layer ", l, " expert ", e, "'s weights differ in format or shape from the others");
    }
    GANNET_CHECK(first, "rank without experts");
    L.inter = first->w1.n;
    L.like = *first;
  }
}

void ExpertParallel::begin_forward() {
  if (opt_.eplb_interval > 0 && stats_.forwards > 0 && stats_.forwards % opt_.eplb_interval == 0) rebalance_now();
  ++stats_.forwards;
  const int64_t slot = stats_.forwards % opt_.eplb_window;
  for (Layer& L : layers_) std::fill_n(L.window.begin() + slot * n_experts_, n_experts_, int64_t(0));
}

void ExpertParallel::count_load(int64_t layer, const int32_t* ids, int64_t n) {
  Layer& L = layers_[size_t(layer)];
  int64_t* w = L.window.data() + (stats_.forwards % opt_.eplb_window) * n_experts_;
  for (int64_t i = 0; i < n; ++i) ++w[ids[i]];
}

std::vector<int64_t> ExpertParallel::window_load(int64_t layer) const {
  const Layer& L = layers_[size_t(layer)];
  std::vector<int64_t> load(size_t(n_experts_), 0);
  for (int64_t k = 0; k < opt_.eplb_window; ++k)
    for (int64_t e = 0; e < n_experts_; ++e) load[size_t(e)] += L.window[size_t(k * n_experts_ + e)];
  return load;
}

std::vector<int64_t> ExpertParallel::global_window_load(int64_t layer) {
  std::vector<int64_t> load = window_load(layer);
  comm_->all_reduce_sum(load.data(), n_experts_);
  return load;
}

namespace {

// An expert's bytes in transit: its three fp8_plain flags, then w1, w3, w2 (codes, scales).
uint64_t expert_bytes(const MoeExpert& w) { return 3 + w.w1.bytes() + w.w3.bytes() + w.w2.bytes(); }

void pack_expert(const MoeExpert& w, uint8_t* out) {
  out[0] = w.w1.fp8_plain, out[1] = w.w3.fp8_plain, out[2] = w.w2.fp8_plain;
  out += 3;
  for (const kernels::PackedWeight* p : {&w.w1, &w.w3, &w.w2}) {
    std::memcpy(out, p->data, p->data_bytes());
    out += p->data_bytes();
    if (p->scale_bytes()) std::memcpy(out, p->scales, p->scale_bytes());
    out += p->scale_bytes();
  }
}

// Views of a received expert, shaped as `like` (every expert of a layer has one format).
MoeExpert unpack_expert(const MoeExpert& like, const uint8_t* in) {
  MoeExpert w = like;
  w.w1.fp8_plain = in[0], w.w3.fp8_plain = in[1], w.w2.fp8_plain = in[2];
  in += 3;
  for (kernels::PackedWeight* p : {&w.w1, &w.w3, &w.w2}) {
    p->data = in;
    in += p->data_bytes();
    p->scales = p->scale_bytes() ? in : nullptr;
    in += p->scale_bytes();
    // `like`'s marks of subnormal rows belong to another expert: these rows' own (a speed
    // hint only; scan_codes finds the same fp8_plain as the sender's scan)
    p->fp8_subnormal_rows.reset();
    p->fp8_subnormal_first = 0;
    if (p->format == kernels::WeightFormat::kFp8Block) p->scan_codes();
  }
  return w;
}

}  // namespace

void ExpertParallel::rebalance_now() {
  const auto t0 = std::chrono::steady_clock::now();
  const int64_t NL = n_layers(), E = n_experts_;
  // Every layer's window loads in one sum.
  std::vector<int64_t> load(size_t(NL * E), 0);
  for (int64_t l = 0; l < NL; ++l)
    for (int64_t k = 0; k < opt_.eplb_window; ++k)
      for (int64_t e = 0; e < E; ++e) load[size_t(l * E + e)] += layers_[size_t(l)].window[size_t(k * E + e)];
  comm_->all_reduce_sum(load.data(), NL * E);

  std::vector<ExpertPlacement> next(static_cast<size_t>(NL));
  std::vector<Collective::Transfer> sends, recvs;
  std::vector<std::unique_ptr<std::vector<uint8_t>>> send_bufs;
  struct Incoming {
    int64_t layer, slot;
    std::shared_ptr<std::vector<uint8_t>> buf;
  };
  std::vector<Incoming> incoming;
  // The same (layer, slot) order on every rank: the k-th send from a to b is b's k-th receive.
  for (int64_t l = 0; l < NL; ++l) {
    Layer& L = layers_[size_t(l)];
    const ExpertPlacement& old = L.place;
    next[size_t(l)] = rebalance(std::vector<int64_t>(load.begin() + l * E, load.begin() + (l + 1) * E), old);
    const ExpertPlacement& nw = next[size_t(l)];
    const uint64_t bytes = expert_bytes(L.like);
    for (int64_t g = 0; g < int64_t(nw.slot_expert.size()); ++g) {
      const int32_t e = nw.slot_expert[size_t(g)];
      if (e < 0) continue;
      const int dst = nw.rank_of(int32_t(g));
      bool has = false;  // dst already holds e: no bytes move
      for (int32_t og : old.replicas[size_t(e)]) has |= old.rank_of(og) == dst;
      if (has) continue;
      const auto& reps = old.replicas[size_t(e)];
      const int src = old.rank_of(reps[size_t(dst) % reps.size()]);
      if (src == rank_) {
        int64_t s_old = -1;
        for (int32_t og : reps)
          if (old.rank_of(og) == rank_) s_old = og % old.slots;
        send_bufs.push_back(std::make_unique<std::vector<uint8_t>>(bytes));
        pack_expert(L.w[size_t(s_old)], send_bufs.back()->data());
        sends.push_back({dst, send_bufs.back()->data(), int64_t(bytes)});
        stats_.weight_bytes_moved += bytes;
      }
      if (dst == rank_) {
        auto buf = std::make_shared<std::vector<uint8_t>>(bytes);
        recvs.push_back({src, buf->data(), int64_t(bytes)});
        incoming.push_back({l, g % nw.slots, buf});
      }
    }
  }
  comm_->exchange(sends, recvs);
  for (int64_t l = 0; l < NL; ++l) {
    Layer& L = layers_[size_t(l)];
    const ExpertPlacement& old = L.place;
    const ExpertPlacement& nw = next[size_t(l)];
    const MoeExpert& like = L.like;
    std::vector<MoeExpert> w(size_t(nw.slots));
    std::vector<std::shared_ptr<std::vector<uint8_t>>> own(size_t(nw.slots));
    for (int64_t s = 0; s < nw.slots; ++s) {  // experts this rank keeps (maybe in another slot)
      const int32_t e = nw.slot_expert[size_t(rank_ * nw.slots + s)];
      if (e < 0) continue;
      for (int32_t og : old.replicas[size_t(e)])
        if (old.rank_of(og) == rank_) {
          w[size_t(s)] = L.w[size_t(og % old.slots)];
          own[size_t(s)] = L.own[size_t(og % old.slots)];
        }
    }
    for (const Incoming& in : incoming)
      if (in.layer == l) {
        w[size_t(in.slot)] = unpack_expert(like, in.buf->data());
        own[size_t(in.slot)] = in.buf;
      }
    L.place = nw;
    L.w = std::move(w);
    L.own = std::move(own);
  }
  if (stats_.rebalances == 0)  // the balance EPLB reaches: counted from its first placement on
    std::fill(stats_.rows_computed_since.begin(), stats_.rows_computed_since.end(), int64_t(0));
  ++stats_.rebalances;
  stats_.rebalance_seconds += std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

}  // namespace gannet::model
