// Safetensors files: header parsing with full validation, memory-mapped reading, and a
// streaming writer (used by `gannet make-model`).
//
// Layout: u64 little-endian header length N, N bytes of JSON header
// {"name": {"dtype": "BF16", "shape": [..], "data_offsets": [begin, end]}, "__metadata__": {..}},
// then the data section; offsets are relative to the start of the data section.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "core/dtype.h"

namespace gannet::io {

struct TensorInfo {
  std::string name;
  DType dtype = DType::F32;
  std::vector<int64_t> shape;
  uint64_t begin = 0, end = 0;  // byte offsets within the data section

  int64_t numel() const;
};

// Parses and validates a safetensors header. `data` holds the whole file prefix that is
// available (at least the 8-byte length and the header), `file_size` the full file size.
// Throws gannet::Error naming `file` and the problem: truncated file, header length past
// the end, bad JSON, unknown dtype, negative or non-integer shapes, offsets out of range or
// overlapping, shape x dtype not matching the byte length. Returns tensors sorted by
// offset; `data_start` receives 8 + N.
std::vector<TensorInfo> parse_safetensors_header(const uint8_t* data, size_t size,
                                                 uint64_t file_size, const std::string& file,
                                                 uint64_t* data_start = nullptr,
                                                 std::map<std::string, std::string>* metadata = nullptr);

// A read-only memory map of a whole file, or of bytes [offset, offset + length) of it.
class MappedFile {
 public:
  explicit MappedFile(const std::string& path);  // throws gannet::Error
  MappedFile(const std::string& path, uint64_t offset, uint64_t length);
  ~MappedFile();
  MappedFile(const MappedFile&) = delete;
  MappedFile& operator=(const MappedFile&) = delete;
  const uint8_t* data() const { return data_; }
  uint64_t size() const { return size_; }
  const std::string& path() const { return path_; }
  // The page-aligned mapping data() lies in.
  const void* base() const { return base_; }
  uint64_t base_size() const { return base_len_; }
  // Replaces the file mapping, at the same address, by anonymous memory holding the same
  // bytes (read from the file), on transparent huge pages where the kernel gives them.
  // data() and every pointer into it stay valid. The mapping is left as it was if reading
  // fails (an Error naming the file). Not safe while another thread reads the bytes.
  void copy_to_memory();
  bool copied() const { return copied_; }

 private:
  void map(int fd, uint64_t offset, uint64_t length);
  std::string path_;
  const uint8_t* data_ = nullptr;
  uint64_t size_ = 0;
  void* base_ = nullptr;  // the page-aligned mapping data_ lies in
  uint64_t base_len_ = 0;
  uint64_t base_offset_ = 0;  // the file offset of base_
  bool copied_ = false;
};

// One opened safetensors file: its tensors point into the mapping. With `keep`, only the
// tensors it accepts are mapped (runs of neighbouring ones share a mapping) and the others
// have no data: a rank of an expert-parallel job maps its share of the experts only.
class SafetensorsFile {
 public:
  using Keep = std::function<bool(const std::string& name)>;
  explicit SafetensorsFile(const std::string& path, const Keep& keep = nullptr);
  const std::vector<TensorInfo>& tensors() const { return tensors_; }
  // nullptr for a tensor `keep` left out.
  const uint8_t* tensor_data(const TensorInfo& t) const { return data_[size_t(&t - tensors_.data())]; }
  const std::string& path() const { return path_; }
  // The mapped byte ranges (for prefaulting), and their total.
  const std::vector<std::unique_ptr<MappedFile>>& maps() const { return maps_; }
  uint64_t mapped_size() const;

 private:
  std::string path_;
  std::vector<std::unique_ptr<MappedFile>> maps_;
  uint64_t data_start_ = 0;
  std::vector<TensorInfo> tensors_;
  std::vector<const uint8_t*> data_;  // [tensors]
};

// Streams tensors into a safetensors file. Declare every tensor first, then write each
// one's bytes in declaration order via its fill callback (so multi-GB checkpoints never
// sit in memory). Output bytes depend only on the declarations and the callbacks.
class SafetensorsWriter {
 public:
  // fill(buffer, offset_elems, count_elems) writes `count` elements starting at element
  // `offset` of the tensor into buffer (element size = dtype_size).
  using Fill = std::function<void(uint8_t* buffer, int64_t offset, int64_t count)>;

  void add(const std::string& name, DType dtype, std::vector<int64_t> shape, Fill fill);
  uint64_t total_bytes() const;
  void write(const std::string& path,
             const std::map<std::string, std::string>& metadata = {{"format", "pt"}}) const;

 private:
  struct Entry {
    std::string name;
    DType dtype;
    std::vector<int64_t> shape;
    Fill fill;
  };
  std::vector<Entry> entries_;
};

}  // namespace gannet::io
