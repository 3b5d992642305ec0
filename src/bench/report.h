// A benchmark's result: metadata (git revision, model, threads, kernel path, roofline)
// and rows, printed as a table and written as JSON and CSV.
#pragma once

#include <cstdio>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "bench/roofline.h"

namespace gannet::bench {

struct Column {
  std::string key;     // JSON field
  std::string header;  // table heading
  int precision = 2;   // digits after the point for numbers
};

struct Report {
  std::string bench;             // "decode", "prefill", ...
  nlohmann::ordered_json meta;   // see make_meta
  std::vector<Column> columns;   // what the table shows (rows may hold more)
  std::vector<nlohmann::ordered_json> rows;

  void print_table(std::FILE* out) const;
  nlohmann::ordered_json to_json() const;
  void write_json(const std::string& path) const;
  void write_csv(const std::string& path) const;
};

// The q-quantile (0..1) of v, interpolated between neighbours; 0 for none.
double percentile(std::vector<double> v, double q);

// git_revision, model, threads, kernel_path, cpu, date and the roofline figures.
nlohmann::ordered_json make_meta(const std::string& model, int threads, const Roofline& roofline);

}  // namespace gannet::bench
