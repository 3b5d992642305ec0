#include "bench/report.h"

#include <algorithm>
#include <cmath>
#include <ctime>
#include <fstream>

#include "core/cpu_features.h"
#include "core/error.h"
#include "git_revision.h"

namespace gannet::bench {

double percentile(std::vector<double> v, double q) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  const double pos = q * double(v.size() - 1);
  const size_t lo = size_t(std::floor(pos)), hi = size_t(std::ceil(pos));
  return v[lo] + (v[hi] - v[lo]) * (pos - double(lo));
}

using nlohmann::ordered_json;

ordered_json make_meta(const std::string& model, int threads, const Roofline& roofline) {
  std::time_t t = std::time(nullptr);
  char date[32];
  std::strftime(date, sizeof date, "%Y-%m-%dT%H:%M:%SZ", std::gmtime(&t));
  ordered_json m;
  m["git_revision"] = GANNET_GIT_REVISION;
  m["model"] = model;
  m["threads"] = threads;
  m["kernel_path"] = kernel_path_name();
  m["cpu"] = roofline.cpu;
  m["date"] = date;
  m["roofline"] = to_json(roofline);
  return m;
}

namespace {
std::string cell(const nlohmann::ordered_json& v, int precision) {
  if (v.is_number_float()) {
    char buf[64];
    std::snprintf(buf, sizeof buf, "%.*f", precision, v.get<double>());
    return buf;
  }
  if (v.is_string()) return v.get<std::string>();
  if (v.is_null()) return "-";
  return v.dump();
}
}  // namespace

void Report::print_table(std::FILE* out) const {
  std::vector<size_t> width;
  for (const Column& c : columns) width.push_back(c.header.size());
  std::vector<std::vector<std::string>> cells;
  for (const auto& r : rows) {
    std::vector<std::string> line;
    for (size_t i = 0; i < columns.size(); ++i) {
      line.push_back(r.contains(columns[i].key) ? cell(r[columns[i].key], columns[i].precision) : "-");
      width[i] = std::max(width[i], line.back().size());
    }
    cells.push_back(line);
  }
  auto rule = [&] {
    for (size_t i = 0; i < columns.size(); ++i) std::fprintf(out, "%s%s", i ? "-+-" : "", std::string(width[i], '-').c_str());
    std::fprintf(out, "\n");
  };
  for (size_t i = 0; i < columns.size(); ++i)
    std::fprintf(out, "%s%*s", i ? " | " : "", int(width[i]), columns[i].header.c_str());
  std::fprintf(out, "\n");
  rule();
  for (const auto& line : cells) {
    for (size_t i = 0; i < line.size(); ++i) std::fprintf(out, "%s%*s", i ? " | " : "", int(width[i]), line[i].c_str());
    std::fprintf(out, "\n");
  }
}

ordered_json Report::to_json() const {
  ordered_json j = meta;
  j["bench"] = bench;
  j["rows"] = rows;
  return j;
}

void Report::write_json(const std::string& path) const {
  std::ofstream out(path);
  if (!out) fail(path, ": cannot write");
  out << to_json().dump(2) << "\n";
}

void Report::write_csv(const std::string& path) const {
  std::ofstream out(path);
  if (!out) fail(path, ": cannot write");
  std::vector<std::string> keys;
  for (const auto& r : rows)
    for (auto it = r.begin(); it != r.end(); ++it)
      if (std::find(keys.begin(), keys.end(), it.key()) == keys.end()) keys.push_back(it.key());
  for (size_t i = 0; i < keys.size(); ++i) out << (i ? "," : "") << keys[i];
  out << "\n";
  for (const auto& r : rows) {
    for (size_t i = 0; i < keys.size(); ++i) {
      out << (i ? "," : "");
      if (r.contains(keys[i])) out << (r[keys[i]].is_string() ? r[keys[i]].get<std::string>() : r[keys[i]].dump());
    }
    out << "\n";
  }
}

}  // namespace gannet::bench
