// NumpyPcg64 against numpy's own draws (tests/golden/numpy-integers.json, written by
// tools/make_numpy_random_golden.py): default_rng(seed).integers(0, high, 9) for seeds of
// one to three 32-bit words and bounds on both sides of the 32-bit and 64-bit Lemire
// paths, and the DeepSeek-V4.1 Engram multipliers (the spec's published values).
// labels: exact
#include <gtest/gtest.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>

#include "core/numpy_random.h"

namespace {

nlohmann::json load_golden() {
  const char* src = std::getenv("GANNET_SOURCE_DIR");
  const std::filesystem::path p = std::filesystem::path(src ? src : ".") / "tests" / "golden" / "numpy-integers.json";
  std::ifstream in(p);
  EXPECT_TRUE(in.good()) << p;
  std::stringstream ss;
  ss << in.rdbuf();
  return nlohmann::json::parse(ss.str());
}

TEST(CoreNumpyRandom, IntegersMatchNumpy) {
  const nlohmann::json g = load_golden();
  int checked = 0;
  for (const auto& c : g["cases"]) {
    const uint64_t seed = std::stoull(c["seed"].get<std::string>());
    const int64_t high = std::stoll(c["high"].get<std::string>());
    gannet::NumpyPcg64 rng(seed);
    const std::vector<int64_t> got = rng.integers(high, int64_t(c["values"].size()));
    for (size_t i = 0; i < got.size(); ++i)
      EXPECT_EQ(got[i], std::stoll(c["values"][i].get<std::string>())) << "seed " << seed << " high " << high << " #" << i;
    ++checked;
  }
  EXPECT_EQ(checked, 196);
}

TEST(CoreNumpyRandom, EngramMultipliers) {
  const nlohmann::json g = load_golden();
  for (const auto& m : g["engram_multipliers"]) {
    const int64_t vocab = m["compressed_vocab"], layer = m["layer"], n = m["n"];
    const int64_t bound = std::max<int64_t>(1, (INT64_MAX / vocab) / 2);
    EXPECT_EQ(bound, std::stoll(m["bound"].get<std::string>()));
    gannet::NumpyPcg64 rng(uint64_t(10007 * layer));
    const auto v = rng.integers(bound, n);
    for (int64_t i = 0; i < n; ++i)
      EXPECT_EQ(v[size_t(i)] * 2 + 1, std::stoll(m["multipliers"][size_t(i)].get<std::string>())) << vocab << " " << layer;
  }
  // The released V4.1 values (deepseek-v4-architecture.md §9.6), independent of the file.
  gannet::NumpyPcg64 l1(10007), l14(10007 * 14);
  const int64_t b = (INT64_MAX / 99092) / 2;
  const auto a = l1.integers(b, 4), c = l14.integers(b, 4);
  const int64_t want1[] = {76632096046245, 4839876093313, 35959672319349, 73987337458391};
  const int64_t want14[] = {67716810739261, 51510806800915, 30921347202721, 82619226485591};
  for (int i = 0; i < 4; ++i) {
    EXPECT_EQ(a[size_t(i)] * 2 + 1, want1[i]);
    EXPECT_EQ(c[size_t(i)] * 2 + 1, want14[i]);
  }
}

}  // namespace
