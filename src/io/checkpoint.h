// A Hugging Face model directory's weights: model.safetensors, or shards listed by
// model.safetensors.index.json. Tensors are memory-mapped; page_in() may then move the
// mapped bytes into memory of the process's own, at the same addresses (WeightMemory).
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "io/safetensors.h"

namespace gannet::io {

// "[2, 3]": a shape as error messages print it.
std::string shape_str(const std::vector<int64_t>& shape);

struct TensorRef {
  const TensorInfo* info = nullptr;
  const uint8_t* data = nullptr;
  const std::string* file = nullptr;
};

// Where the weights' bytes live once loaded. Results never depend on it; speed and memory
// accounting do. Decode streams every weight once per token, and where a mapping is backed
// by 4 KiB pages rather than 2 MiB ones the TLB misses and the prefetchers' stops at page
// boundaries cost up to half the speed. A file read from disk through a mapping that asks
// for huge pages gets them, but a file already in the page cache in small pieces (one just
// written or copied) keeps them.
enum class WeightMemory {
  kAuto,  // the file mapping, except ranges the kernel backs mostly with 4 KiB pages while
          // transparent huge pages are on: those are copied (when memory allows)
  kMap,   // the file mapping (shared page cache), however the kernel backs it
  kCopy,  // everything copied into anonymous memory of this process
};
// "auto", "map" or "copy"; anything else is an error naming --weight-memory.
WeightMemory parse_weight_memory(const std::string& text);

struct PageInReport {
  uint64_t mapped = 0;       // bytes mapped in all
  uint64_t copied = 0;       // bytes moved into the process's own memory
  uint64_t small_pages = 0;  // kAuto: bytes left on 4 KiB pages because memory was short
};

class Checkpoint {
 public:
  // Opens and validates every file. on_file(done, total) reports progress.
  // keep, if given, chooses the tensors to map (expert parallelism: a rank's share of the
  // routed experts); the others are listed (has(), names()) but get() refuses them.
  explicit Checkpoint(const std::string& model_dir,
                      const std::function<void(int, int)>& on_file = nullptr,
                      const SafetensorsFile::Keep& keep = nullptr);

  bool has(const std::string& name) const { return index_.count(name) > 0; }
  // Throws gannet::Error naming the tensor and directory when it is missing.
  TensorRef get(const std::string& name) const;
  // Any listed tensor, mapped or not (data null when `keep` left it out).
  TensorRef find(const std::string& name) const;
  // get() plus a check of dtype-independent shape; error names file, tensor, both shapes.
  TensorRef get(const std::string& name, const std::vector<int64_t>& expected_shape) const;

  const std::string& dir() const { return dir_; }
  std::vector<std::string> names() const;
  uint64_t total_bytes() const;
  std::map<std::string, uint64_t> bytes_by_dtype() const;
  int64_t total_elements() const;
  // Bytes mapped (all of total_bytes() without `keep`).
  uint64_t mapped_bytes() const;
  // Touches every page of every file so the first forward pass does not wait on disk;
  // progress(bytes_done, total) drives a progress bar.
  void prefault(const std::function<void(uint64_t, uint64_t)>& progress = nullptr) const;
  // Prefaults (kMap, kAuto) and copies what `mode` says into memory of the process's own
  // (MappedFile::copy_to_memory: tensor pointers stay valid). Call before anything reads the
  // tensors from another thread. kCopy refuses, naming the sizes, when MemAvailable is
  // below the bytes to copy.
  PageInReport page_in(WeightMemory mode, const std::function<void(uint64_t, uint64_t)>& progress = nullptr);

 private:
  std::string dir_;
  std::vector<std::unique_ptr<SafetensorsFile>> files_;
  std::map<std::string, TensorRef> index_;
};

}  // namespace gannet::io
