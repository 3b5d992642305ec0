#include "engine/verify_schedule.h"

#include <algorithm>
#include <cmath>

#include "core/error.h"

namespace gannet::engine {

std::vector<int> choose_verify_depths(const std::vector<std::vector<double>>& conf,
                                      const std::vector<double>& step_seconds) {
  const size_t R = conf.size();
  std::vector<int> depth(R, 0);
  if (R == 0) return depth;
  if (step_seconds.size() < R)
    fail("verify schedule: a step profile of ", step_seconds.size(), " token counts cannot cover ", R, " requests");
  for (double t : step_seconds)
    if (!(t > 0) || !std::isfinite(t)) fail("verify schedule: step times must be positive, got ", t);
  struct Pair {
    double a;
    size_t r;
    int j;
  };
  std::vector<Pair> pairs;
  for (size_t r = 0; r < R; ++r) {
    double a = 1.0;
    for (size_t i = 0; i < conf[r].size(); ++i) {
      const double c = conf[r][i];
      if (!(c >= 0 && c <= 1)) fail("verify schedule: request ", r, " draft ", i + 1, " has confidence ", c);
      a *= c;
      pairs.push_back({a, r, int(i) + 1});
    }
  }
  std::stable_sort(pairs.begin(), pairs.end(), [](const Pair& x, const Pair& y) {
    if (x.a != y.a) return x.a > y.a;
    if (x.r != y.r) return x.r < y.r;
    return x.j < y.j;
  });
  size_t B = R;
  double tau = double(R);
  double best = tau / step_seconds[B - 1];
  for (const Pair& p : pairs) {
    if (B + 1 > step_seconds.size()) break;  // past the profile: no faster step is known
    const double rate = (tau + p.a) / step_seconds[B];
    if (!(rate > best)) break;
    best = rate;
    tau += p.a;
    ++B;
    depth[p.r] = p.j;  // pairs of one request come in depth order
  }
  return depth;
}

}  // namespace gannet::engine
