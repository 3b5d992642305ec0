#include "io/checkpoint.h"

#include <filesystem>
#include <nlohmann/json.hpp>
#include <set>
#include <sstream>

#include "core/error.h"
#include "core/memory_info.h"
#include "io/model_config.h"

namespace gannet::io {

namespace fs = std::filesystem;
using nlohmann::json;

std::string shape_str(const std::vector<int64_t>& s) {
  std::ostringstream os;
  os << '[';
  for (size_t i = 0; i < s.size(); ++i) os << (i ? ", " : "") << s[i];
  os << ']';
  return os.str();
}

namespace {

}  // namespace

Checkpoint::Checkpoint(const std::string& model_dir, const std::function<void(int, int)>& on_file,
                       const SafetensorsFile::Keep& keep)
    : dir_(model_dir) {
  if (!fs::is_directory(model_dir)) fail(model_dir, ": not a directory");
  const fs::path index_path = fs::path(model_dir) / "model.safetensors.index.json";
  const fs::path single = fs::path(model_dir) / "model.safetensors";
  std::vector<std::string> files;
  std::map<std::string, std::string> expected_file;  // tensor -> shard, from the index
  if (fs::exists(index_path)) {
    json j;
    try {
      j = json::parse(read_file(index_path.string()));
    } catch (const json::exception& e) {
      fail(index_path.string(), ": not valid JSON: ", e.what());
    }
    if (!j.is_object() || !j.contains("weight_map") || !j["weight_map"].is_object())
      fail(index_path.string(), ": missing 'weight_map' object");
    std::set<std::string> seen;
    for (auto it = j["weight_map"].begin(); it != j["weight_map"].end(); ++it) {
      if (!it.value().is_string()) fail(index_path.string(), ": weight_map['", it.key(), "'] is not a file name");
      std::string f = it.value().get<std::string>();
      if (f.find('/') != std::string::npos || f == ".." || f.empty())
        fail(index_path.string(), ": weight_map['", it.key(), "'] = '", f, "' is not a plain file name");
      expected_file[it.key()] = f;
      if (seen.insert(f).second) files.push_back(f);
    }
  } else if (fs::exists(single)) {
    files.push_back("model.safetensors");
  } else {
    fail(model_dir, ": no model.safetensors or model.safetensors.index.json");
  }
  int done = 0;
  for (const std::string& f : files) {
    std::string path = (fs::path(model_dir) / f).string();
    if (!fs::exists(path)) fail(path, ": shard listed in model.safetensors.index.json does not exist");
    files_.push_back(std::make_unique<SafetensorsFile>(path, keep));
    const SafetensorsFile& sf = *files_.back();
    for (const TensorInfo& t : sf.tensors()) {
      if (index_.count(t.name)) fail(path, ": tensor '", t.name, "' also appears in ", *index_[t.name].file);
      index_[t.name] = TensorRef{&t, sf.tensor_data(t), &sf.path()};
    }
    if (on_file) on_file(++done, int(files.size()));
  }
  for (auto& [name, f] : expected_file) {
    auto it = index_.find(name);
    if (it == index_.end())
      fail(index_path.string(), ": tensor '", name, "' is mapped to ", f, " but that file does not contain it");
    if (fs::path(*it->second.file).filename() != f)
      fail(index_path.string(), ": tensor '", name, "' is mapped to ", f, " but found in ", *it->second.file);
  }
}

TensorRef Checkpoint::get(const std::string& name) const {
  auto it = index_.find(name);
  if (it == index_.end()) fail(dir_, ": tensor '", name, "' is missing from the checkpoint");
  if (!it->second.data && it->second.info->end > it->second.info->begin)
    fail(dir_, ": tensor '", name, "' is not mapped by this rank (expert parallelism: it belongs to another rank's share)");
  return it->second;
}

TensorRef Checkpoint::find(const std::string& name) const {
  auto it = index_.find(name);
  if (it == index_.end()) fail(dir_, ": tensor '", name, "' is missing from the checkpoint");
  return it->second;
}

TensorRef Checkpoint::get(const std::string& name, const std::vector<int64_t>& expected) const {
  TensorRef r = get(name);
  if (r.info->shape != expected)
    fail(*r.file, ": tensor '", name, "' has shape ", shape_str(r.info->shape), " but config.json implies ",
         shape_str(expected));
  return r;
}

std::vector<std::string> Checkpoint::names() const {
  std::vector<std::string> out;
  for (auto& [n, r] : index_) out.push_back(n);
  return out;
}

uint64_t Checkpoint::total_bytes() const {
  uint64_t b = 0;
  for (auto& [n, r] : index_) b += r.info->end - r.info->begin;
  return b;
}

std::map<std::string, uint64_t> Checkpoint::bytes_by_dtype() const {
  std::map<std::string, uint64_t> out;
  for (auto& [n, r] : index_) out[std::string(dtype_name(r.info->dtype))] += r.info->end - r.info->begin;
  return out;
}

int64_t Checkpoint::total_elements() const {
  int64_t e = 0;
  for (auto& [n, r] : index_) e += r.info->numel();
  return e;
}

}  // namespace gannet::io

namespace gannet::io {

uint64_t Checkpoint::mapped_bytes() const {
  uint64_t b = 0;
  for (auto& f : files_) b += f->mapped_size();
  return b;
}

void Checkpoint::prefault(const std::function<void(uint64_t, uint64_t)>& progress) const {
  const uint64_t total = mapped_bytes();
  uint64_t done = 0;
  volatile uint8_t sink = 0;
  for (auto& f : files_)
    for (auto& m : f->maps()) {
      const uint8_t* p = m->data();
      const uint64_t n = m->size();
      for (uint64_t off = 0; off < n; off += 4096) {
        sink = sink + p[off];
        if ((off & ((64u << 20) - 1)) == 0 && progress) progress(done + off, total);
      }
      done += n;
    }
  if (progress) progress(total, total);
}

WeightMemory parse_weight_memory(const std::string& text) {
  if (text == "auto") return WeightMemory::kAuto;
  if (text == "map") return WeightMemory::kMap;
  if (text == "copy") return WeightMemory::kCopy;
  fail("--weight-memory must be auto, map or copy, got '", text, "'");
}

PageInReport Checkpoint::page_in(WeightMemory mode, const std::function<void(uint64_t, uint64_t)>& progress) {
  PageInReport rep;
  rep.mapped = mapped_bytes();
  std::vector<MappedFile*> maps;
  for (auto& f : files_)
    for (auto& m : f->maps())
      if (m->base()) maps.push_back(m.get());
  std::vector<MappedFile*> to_copy;
  if (mode == WeightMemory::kCopy) {
    to_copy = maps;
  } else {
    prefault(progress);
    if (mode == WeightMemory::kMap || !transparent_huge_pages_available()) return rep;
    constexpr uintptr_t kHuge = uintptr_t(2) << 20;
    std::vector<std::pair<uintptr_t, uintptr_t>> ranges;
    for (const MappedFile* m : maps) {
      const uintptr_t b = reinterpret_cast<uintptr_t>(m->base());
      ranges.emplace_back(b, b + m->base_size());
    }
    const auto huge = huge_mapped_bytes(ranges);
    if (!huge) return rep;
    for (size_t i = 0; i < maps.size(); ++i) {
      // Only whole aligned 2 MiB stretches can be huge pages; a mapping with more than a
      // tenth of them on 4 KiB pages is copied.
      const uintptr_t lo = (ranges[i].first + kHuge - 1) / kHuge * kHuge, hi = ranges[i].second / kHuge * kHuge;
      const uint64_t eligible = hi > lo ? hi - lo : 0;
      if (eligible >= kHuge && (*huge)[i] < eligible - eligible / 10) to_copy.push_back(maps[i]);
    }
  }
  uint64_t total = 0;
  for (const MappedFile* m : to_copy) total += m->base_size();
  if (total == 0) return rep;
  const std::optional<uint64_t> avail = mem_available_bytes();
  if (mode == WeightMemory::kAuto && (!avail || total + total / 8 > *avail)) {
    rep.small_pages = total;
    return rep;
  }
  if (mode == WeightMemory::kCopy && avail && total > *avail)
    fail("--weight-memory copy: the weights of ", dir_, " take ", total, " bytes, more than the ", *avail,
         " bytes of memory available (MemAvailable); use --weight-memory map");
  uint64_t done = 0;
  for (MappedFile* m : to_copy) {
    if (progress) progress(done, total);
    m->copy_to_memory();
    done += m->base_size();
  }
  if (progress) progress(total, total);
  rep.copied = total;
  return rep;
}

}  // namespace gannet::io
