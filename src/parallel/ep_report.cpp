#include "parallel/ep_report.h"

#include <algorithm>
#include <nlohmann/json.hpp>
#include <numeric>

#include "model/eplb.h"

namespace gannet::parallel {

using nlohmann::json;

nlohmann::json expert_parallel_report(const model::ExpertParallel* ep, Collective& group) {
  if (!ep) return nullptr;
  const model::ExpertParallelStats& st = ep->stats();
  const int64_t L = ep->n_layers();
  json mine;
  auto total = [](const std::vector<int64_t>& v) { return std::accumulate(v.begin(), v.end(), int64_t(0)); };
  mine["rows"] = total(st.rows_computed);
  mine["rows_recent"] = total(st.rows_computed_since);
  mine["bytes"] = st.bytes_sent + st.bytes_received;
  mine["a2a_s"] = std::accumulate(st.exchange_seconds.begin(), st.exchange_seconds.end(), 0.0);
  mine["moved"] = st.weight_bytes_moved;
  std::vector<std::vector<int64_t>> window;
  for (int64_t l = 0; l < L; ++l) window.push_back(ep->window_load(l));
  mine["window"] = window;
  const std::vector<std::string> parts = group.gather(mine.dump());
  if (group.rank() != 0) return nullptr;
  json out;
  out["ranks"] = ep->ranks();
  out["slots_per_rank"] = ep->slots();
  out["forwards"] = st.forwards;
  out["rebalances"] = st.rebalances;
  std::vector<double> rows, recent;
  std::vector<std::vector<int64_t>> load(static_cast<size_t>(L));
  double bytes = 0, a2a = 0;
  uint64_t moved = 0;
  for (const std::string& p : parts) {
    const json j = json::parse(p);
    rows.push_back(j["rows"].get<double>());
    recent.push_back(j["rows_recent"].get<double>());
    bytes += j["bytes"].get<double>();
    a2a += j["a2a_s"].get<double>();
    moved += j["moved"].get<uint64_t>();
    const auto w = j["window"].get<std::vector<std::vector<int64_t>>>();
    for (int64_t l = 0; l < L; ++l) {
      if (load[size_t(l)].empty()) load[size_t(l)].assign(w[size_t(l)].size(), 0);
      for (size_t e = 0; e < w[size_t(l)].size(); ++e) load[size_t(l)][e] += w[size_t(l)][e];
    }
  }
  const double ranks = double(ep->ranks()), fw = double(std::max<int64_t>(1, st.forwards));
  out["weight_bytes_moved"] = moved;
  out["rows_computed"] = rows;
  out["rank_load_max_over_mean"] = model::max_over_mean(rows);
  out["rank_load_max_over_mean_recent"] = model::max_over_mean(recent);
  double skew = 0;
  for (const auto& l : load) skew += model::max_over_mean(std::vector<double>(l.begin(), l.end()));
  out["expert_load_max_over_mean"] = L ? skew / double(L) : 0.0;
  out["bytes_per_step_per_rank"] = bytes / ranks / fw;
  out["all_to_all_ms_per_layer"] = a2a / ranks / fw / double(std::max<int64_t>(1, L)) * 1e3;
  return out;
}

}  // namespace gannet::parallel
