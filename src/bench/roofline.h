// The machine's own limits, measured: read bandwidth (1 thread and N threads) and the peak
// rate of the arithmetic gannet's kernels use (f32 FMA, bf16 dot products, int8 dot
// products where the CPU has them). Benchmarks report their results against these.
#pragma once

#include <functional>
#include <nlohmann/json_fwd.hpp>
#include <optional>
#include <string>

namespace gannet::bench {

struct Roofline {
  std::string cpu;            // model name from /proc/cpuinfo
  std::string kernel_path;    // e.g. "avx512 (bf16, vnni)"
  int threads = 1;
  double read_gb_per_s_1t = 0;   // one thread
  double read_gb_per_s = 0;      // `threads` threads
  double f32_fma_gflop_per_s = 0;    // `threads` threads, multiply-add = 2 FLOPs
  double bf16_dot_gflop_per_s = 0;   // vdpbf16ps (or its AVX2 emulation in our kernels: 0 when absent)
  double int8_dot_gop_per_s = 0;     // vpdpbusd (0 when the CPU lacks VNNI)
  std::string measured_at;       // UTC time
};

// Measures everything (a few seconds). progress(stage) names what runs now.
Roofline measure_roofline(int threads, const std::function<void(const std::string&)>& progress = nullptr);

// XOR of the bytes [begin, end) of p (256-byte aligned), with the widest loads the active
// kernel path has: the read loop behind the bandwidth figures.
uint64_t read_bytes(const uint8_t* p, size_t begin, size_t end);

// Read bandwidth alone (GB/s, 1e9 bytes), over `bytes` bytes with huge pages.
double measure_read_bandwidth(int threads, size_t bytes = size_t(1) << 30, int repeats = 5);

nlohmann::json to_json(const Roofline& r);
Roofline roofline_from_json(const nlohmann::json& j);

// Cache: $GANNET_ROOFLINE_CACHE, else $XDG_CACHE_HOME/gannet/roofline.json, else
// ~/.cache/gannet/roofline.json. One entry per (cpu, threads, kernel path).
std::string roofline_cache_path();
std::optional<Roofline> load_cached_roofline(int threads);
void save_roofline(const Roofline& r);
// Cached figures for this machine and thread count, or a fresh measurement (cached).
Roofline roofline_for(int threads, const std::function<void(const std::string&)>& progress = nullptr);

std::string cpu_model_name();

}  // namespace gannet::bench
