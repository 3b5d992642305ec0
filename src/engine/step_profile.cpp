#include "engine/step_profile.h"

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "core/error.h"

namespace gannet::engine {

namespace fs = std::filesystem;
using nlohmann::json;

std::vector<double> measure_step_profile(model::Model& model, cache::CacheEngine& cache, ThreadPool* pool,
                                         int64_t max_tokens) {
  GANNET_CHECK(max_tokens >= 1, "step profile of ", max_tokens, " tokens");
  const int64_t bs = cache.block_size(), V = model.config().vocab_size;
  const int64_t blocks = (max_tokens + bs - 1) / bs;
  GANNET_CHECK(blocks <= cache.num_blocks() && cache.views().num_state_slots > 0,
               "the cache is too small for a step profile of ", max_tokens, " tokens");
  std::vector<int32_t> table(static_cast<size_t>(blocks)), ids(static_cast<size_t>(max_tokens)),
      pos(static_cast<size_t>(max_tokens)), seq(static_cast<size_t>(max_tokens), 0),
      rows(static_cast<size_t>(max_tokens));
  for (int64_t i = 0; i < blocks; ++i) table[size_t(i)] = int32_t(i);
  for (int64_t i = 0; i < max_tokens; ++i) {
    ids[size_t(i)] = int32_t((i * 7919 + 3) % V);
    pos[size_t(i)] = int32_t(i);
    rows[size_t(i)] = int32_t(i);
  }
  std::vector<float> logits(size_t(max_tokens * V));
  kernels::AttentionSeq as;
  as.block_table = table.data();
  as.state_slot = 0;
  std::vector<int64_t> sizes;
  for (int64_t b = 1; b < max_tokens; b = std::max(b + 1, b * 3 / 2)) sizes.push_back(b);
  sizes.push_back(max_tokens);
  std::vector<double> at;
  for (int64_t b : sizes) {
    model::Batch batch;
    batch.n_tokens = b;
    batch.token_ids = ids.data();
    batch.positions = pos.data();
    batch.token_seq = seq.data();
    batch.n_seqs = 1;
    batch.seqs = &as;
    batch.n_logits = b;
    batch.logit_rows = rows.data();
    std::vector<double> t;
    for (int rep = 0; rep < 4; ++rep) {  // the first warms up
      const auto t0 = std::chrono::steady_clock::now();
      model.forward(batch, cache.views(), logits.data(), pool);
      if (rep) t.push_back(std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
    }
    std::sort(t.begin(), t.end());
    at.push_back(t[t.size() / 2]);
  }
  // Times never fall with more tokens (noise): a running maximum, then linear in between.
  for (size_t i = 1; i < at.size(); ++i) at[i] = std::max(at[i], at[i - 1]);
  std::vector<double> out(static_cast<size_t>(max_tokens));
  for (size_t i = 0; i < sizes.size(); ++i) {
    out[size_t(sizes[i] - 1)] = at[i];
    if (i + 1 == sizes.size()) break;
    const int64_t b0 = sizes[i], b1 = sizes[i + 1];
    for (int64_t b = b0 + 1; b < b1; ++b)
      out[size_t(b - 1)] = at[i] + double(b - b0) / double(b1 - b0) * (at[i + 1] - at[i]);
  }
  return out;
}

namespace {

std::string cache_path() {
  if (const char* p = std::getenv("GANNET_STEP_PROFILE_CACHE"); p && *p) return p;
  if (const char* x = std::getenv("XDG_CACHE_HOME"); x && *x) return (fs::path(x) / "gannet" / "step_profile.json").string();
  const char* home = std::getenv("HOME");
  return (fs::path(home && *home ? home : "/tmp") / ".cache" / "gannet" / "step_profile.json").string();
}

}  // namespace

std::vector<double> step_profile(const std::string& key, model::Model& model, cache::CacheEngine& cache,
                                 ThreadPool* pool, int64_t max_tokens) {
  const std::string path = cache_path();
  const bool use_cache = path != "off";
  json all = json::object();
  if (use_cache) {
    std::ifstream in(path);
    if (in) try {
        all = json::parse(in);
        if (!all.is_object()) all = json::object();
        if (all.contains(key)) {
          std::vector<double> v = all[key].get<std::vector<double>>();
          bool ok = int64_t(v.size()) >= max_tokens;
          for (double t : v) ok = ok && t > 0;
          if (ok) {
            v.resize(size_t(max_tokens));
            return v;
          }
        }
      } catch (const std::exception&) {
        all = json::object();  // a damaged cache is measured again and rewritten
      }
  }
  std::vector<double> v = measure_step_profile(model, cache, pool, max_tokens);
  if (use_cache) {
    all[key] = v;
    std::error_code ec;
    fs::create_directories(fs::path(path).parent_path(), ec);
    std::ofstream out(path);
    if (out) out << all.dump() << "\n";  // an unwritable cache only costs a measurement next time
  }
  return v;
}

}  // namespace gannet::engine
