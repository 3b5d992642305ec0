#include "bench/roofline.h"

#include <emmintrin.h>
#include <nlohmann/json.hpp>
#include <sys/mman.h>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <filesystem>
#include <fstream>

#include "bench/peak_loops.h"
#include "core/cpu_features.h"
#include "core/error.h"
#include "core/thread_pool.h"

namespace gannet::bench {

namespace fs = std::filesystem;
using nlohmann::json;

uint64_t read_bytes_sse2(const uint8_t* p, size_t begin, size_t end) {
  __m128i a = _mm_setzero_si128(), b = a, c = a, d = a;
  for (size_t i = begin; i < end; i += 64) {
    a = _mm_xor_si128(a, _mm_load_si128(reinterpret_cast<const __m128i*>(p + i)));
    b = _mm_xor_si128(b, _mm_load_si128(reinterpret_cast<const __m128i*>(p + i + 16)));
    c = _mm_xor_si128(c, _mm_load_si128(reinterpret_cast<const __m128i*>(p + i + 32)));
    d = _mm_xor_si128(d, _mm_load_si128(reinterpret_cast<const __m128i*>(p + i + 48)));
  }
  return uint64_t(_mm_cvtsi128_si64(_mm_xor_si128(_mm_xor_si128(a, b), _mm_xor_si128(c, d))));
}

namespace {

double elapsed_seconds(std::chrono::steady_clock::time_point a, std::chrono::steady_clock::time_point b) {
  return std::chrono::duration<double>(b - a).count();
}

// Best rate (ops/s) of `loop` on `threads` threads, each running `iters` iterations.
double peak_rate(ThreadPool& pool, double (*loop)(int64_t), double ops_per_iter) {
  int64_t iters = 1 << 16;
  // Calibrate to ~0.15 s on one thread.
  for (;;) {
    auto t0 = std::chrono::steady_clock::now();
    volatile double sink = loop(iters);
    (void)sink;
    if (elapsed_seconds(t0, std::chrono::steady_clock::now()) > 0.05 || iters > (int64_t(1) << 34)) break;
    iters *= 4;
  }
  iters *= 3;
  double best = 0;
  for (int rep = 0; rep < 3; ++rep) {
    auto t0 = std::chrono::steady_clock::now();
    pool.parallel_for(pool.size(), [&](int64_t, int64_t, int) {
      volatile double sink = loop(iters);
      (void)sink;
    });
    const double s = elapsed_seconds(t0, std::chrono::steady_clock::now());
    best = std::max(best, double(pool.size()) * double(iters) * ops_per_iter / s);
  }
  return best;
}

std::string now_utc() {
  std::time_t t = std::time(nullptr);
  char buf[32];
  std::strftime(buf, sizeof buf, "%Y-%m-%dT%H:%M:%SZ", std::gmtime(&t));
  return buf;
}

}  // namespace

uint64_t read_bytes(const uint8_t* p, size_t begin, size_t end) {
  switch (active_isa()) {
    case Isa::kAvx512: return avx512::read_bytes(p, begin, end);
    case Isa::kAvx2: return avx2::read_bytes(p, begin, end);
    default: return read_bytes_sse2(p, begin, end);
  }
}

std::string cpu_model_name() {
  std::ifstream in("/proc/cpuinfo");
  std::string line;
  while (std::getline(in, line))
    if (line.rfind("model name", 0) == 0) {
      auto c = line.find(':');
      return c == std::string::npos ? line : line.substr(c + 2);
    }
  return "unknown";
}

double measure_read_bandwidth(int threads, size_t bytes, int repeats) {
  void* mem = ::mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (mem == MAP_FAILED) fail("cannot allocate ", bytes, " bytes for the bandwidth measurement");
  ::madvise(mem, bytes, MADV_HUGEPAGE);  // as the weight mappings
  std::memset(mem, 1, bytes);
  const uint8_t* p = static_cast<const uint8_t*>(mem);
  ThreadPool pool(threads);
  constexpr int64_t kLine = 256;
  std::vector<uint64_t> sink(size_t(threads), 0);
  std::vector<double> rates;
  for (int r = 0; r < repeats; ++r) {
    auto t0 = std::chrono::steady_clock::now();
    pool.parallel_for(int64_t(bytes) / kLine, [&](int64_t b, int64_t e, int t) {
      sink[size_t(t)] ^= read_bytes(p, size_t(b * kLine), size_t(e * kLine));
    });
    rates.push_back(double(bytes) / elapsed_seconds(t0, std::chrono::steady_clock::now()) / 1e9);
  }
  ::munmap(mem, bytes);
  std::sort(rates.begin(), rates.end());
  return rates[rates.size() / 2];  // median
}

Roofline measure_roofline(int threads, const std::function<void(const std::string&)>& progress) {
  Roofline r;
  r.cpu = cpu_model_name();
  r.kernel_path = kernel_path_name();
  r.threads = threads;
  r.measured_at = now_utc();
  auto say = [&](const char* s) {
    if (progress) progress(s);
  };
  say("read bandwidth, 1 thread");
  r.read_gb_per_s_1t = measure_read_bandwidth(1);
  say("read bandwidth, all threads");
  r.read_gb_per_s = measure_read_bandwidth(threads);
  ThreadPool pool(threads);
  const Isa isa = active_isa();
  say("f32 FMA peak");
  if (isa == Isa::kAvx512) r.f32_fma_gflop_per_s = peak_rate(pool, avx512::f32_fma, kPeakChains * 16 * 2) / 1e9;
  else if (isa == Isa::kAvx2) r.f32_fma_gflop_per_s = peak_rate(pool, avx2::f32_fma, kPeakChains * 8 * 2) / 1e9;
  if (isa == Isa::kAvx512) {
    say("bf16 dot peak");
    r.bf16_dot_gflop_per_s = peak_rate(pool, avx512::bf16_dot, kPeakChains * 32 * 2) / 1e9;
    if (cpu_features().avx512vnni) {
      say("int8 dot peak");
      r.int8_dot_gop_per_s = peak_rate(pool, avx512::int8_dot, kPeakChains * 64 * 2) / 1e9;
    }
  }
  return r;
}

json to_json(const Roofline& r) {
  return {{"cpu", r.cpu}, {"kernel_path", r.kernel_path}, {"threads", r.threads},
          {"read_gb_per_s_1t", r.read_gb_per_s_1t}, {"read_gb_per_s", r.read_gb_per_s},
          {"f32_fma_gflop_per_s", r.f32_fma_gflop_per_s}, {"bf16_dot_gflop_per_s", r.bf16_dot_gflop_per_s},
          {"int8_dot_gop_per_s", r.int8_dot_gop_per_s}, {"measured_at", r.measured_at}};
}

Roofline roofline_from_json(const json& j) {
  Roofline r;
  r.cpu = j.at("cpu");
  r.kernel_path = j.at("kernel_path");
  r.threads = j.at("threads");
  r.read_gb_per_s_1t = j.at("read_gb_per_s_1t");
  r.read_gb_per_s = j.at("read_gb_per_s");
  r.f32_fma_gflop_per_s = j.at("f32_fma_gflop_per_s");
  r.bf16_dot_gflop_per_s = j.at("bf16_dot_gflop_per_s");
  r.int8_dot_gop_per_s = j.at("int8_dot_gop_per_s");
  r.measured_at = j.value("measured_at", "");
  return r;
}

std::string roofline_cache_path() {
  if (const char* p = std::getenv("GANNET_ROOFLINE_CACHE"); p && *p) return p;
  if (const char* x = std::getenv("XDG_CACHE_HOME"); x && *x) return (fs::path(x) / "gannet" / "roofline.json").string();
  const char* home = std::getenv("HOME");
  return (fs::path(home && *home ? home : "/tmp") / ".cache" / "gannet" / "roofline.json").string();
}

std::optional<Roofline> load_cached_roofline(int threads) {
  std::ifstream in(roofline_cache_path());
  if (!in) return std::nullopt;
  try {
    json all = json::parse(in);
    for (const json& e : all.value("entries", json::array())) {
      Roofline r = roofline_from_json(e);
      if (r.cpu == cpu_model_name() && r.threads == threads && r.kernel_path == kernel_path_name()) return r;
    }
  } catch (const std::exception&) {
    // A damaged cache is ignored and rewritten.
  }
  return std::nullopt;
}

void save_roofline(const Roofline& r) {
  const std::string path = roofline_cache_path();
  json all = {{"entries", json::array()}};
  {
    std::ifstream in(path);
    if (in) try {
        all = json::parse(in);
        if (!all.contains("entries") || !all["entries"].is_array()) all = {{"entries", json::array()}};
      } catch (const std::exception&) {
        all = {{"entries", json::array()}};
      }
  }
  json kept = json::array();
  for (const json& e : all["entries"]) {
    try {
      Roofline o = roofline_from_json(e);
      if (o.cpu == r.cpu && o.threads == r.threads && o.kernel_path == r.kernel_path) continue;
      kept.push_back(e);
    } catch (const std::exception&) {
    }
  }
  kept.push_back(to_json(r));
  all["entries"] = kept;
  std::error_code ec;
  fs::create_directories(fs::path(path).parent_path(), ec);
  std::ofstream out(path);
  if (!out) fail(path, ": cannot write the roofline cache");
  out << all.dump(2) << "\n";
}

Roofline roofline_for(int threads, const std::function<void(const std::string&)>& progress) {
  if (auto r = load_cached_roofline(threads)) return *r;
  Roofline r = measure_roofline(threads, progress);
  save_roofline(r);
  return r;
}

}  // namespace gannet::bench
