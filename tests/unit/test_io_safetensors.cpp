// Safetensors reader/writer and checkpoint validation: every kind of bad file named in the
// foundation issue is rejected with a message naming the file and the problem.
#include <gtest/gtest.h>

#include <cstring>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "core/error.h"
#include "io/checkpoint.h"
#include "io/model_config.h"
#include "io/safetensors.h"

namespace fs = std::filesystem;
using namespace gannet;

namespace {

fs::path temp_dir(const std::string& name) {
  fs::path d = fs::temp_directory_path() / ("gannet_test_io_" + std::to_string(::getpid()) + "_" + name);
  fs::remove_all(d);
  fs::create_directories(d);
  return d;
}

// A raw safetensors file from a header string and a data section.
std::string raw_file(const std::string& header, size_t data_bytes) {
  std::string s(8, '\0');
  uint64_t n = header.size();
  for (int i = 0; i < 8; ++i) s[size_t(i)] = char(n >> (8 * i));
  return s + header + std::string(data_bytes, '\x01');
}

std::string parse_error(const std::string& file) {
  try {
    io::parse_safetensors_header(reinterpret_cast<const uint8_t*>(file.data()), file.size(), file.size(), "x.safetensors");
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

void expect_error(const std::string& file, const std::string& needle) {
  std::string msg = parse_error(file);
  EXPECT_NE(msg.find("x.safetensors"), std::string::npos) << msg;
  EXPECT_NE(msg.find(needle), std::string::npos) << "message: " << msg << "\nexpected to contain: " << needle;
}

}  // namespace

TEST(Safetensors, WriterRoundTrip) {
  fs::path d = temp_dir("rt");
  io::SafetensorsWriter w;
  w.add("a", DType::F32, {2, 3}, [](uint8_t* b, int64_t off, int64_t n) {
    for (int64_t i = 0; i < n; ++i) reinterpret_cast<float*>(b)[i] = float(off + i) * 0.5f;
  });
  w.add("b", DType::BF16, {5}, [](uint8_t* b, int64_t off, int64_t n) {
    for (int64_t i = 0; i < n; ++i) reinterpret_cast<uint16_t*>(b)[i] = f32_to_bf16(float(off + i));
  });
  w.add("c", DType::I64, {0}, [](uint8_t*, int64_t, int64_t) {});
  w.write((d / "m.safetensors").string());
  io::SafetensorsFile f((d / "m.safetensors").string());
  ASSERT_EQ(f.tensors().size(), 3u);
  const io::TensorInfo* a = nullptr;
  const io::TensorInfo* b = nullptr;
  for (auto& t : f.tensors()) {
    if (t.name == "a") a = &t;
    if (t.name == "b") b = &t;
  }
  ASSERT_TRUE(a && b);
  EXPECT_EQ(a->shape, (std::vector<int64_t>{2, 3}));
  const float* av = reinterpret_cast<const float*>(f.tensor_data(*a));
  for (int i = 0; i < 6; ++i) EXPECT_EQ(av[i], float(i) * 0.5f);
  const uint16_t* bv = reinterpret_cast<const uint16_t*>(f.tensor_data(*b));
  for (int i = 0; i < 5; ++i) EXPECT_EQ(bf16_to_f32(bv[i]), float(i));
  fs::remove_all(d);
}

TEST(Safetensors, RejectsBadFiles) {
  expect_error("abc", "truncated");
  expect_error(raw_file("{}", 0).substr(0, 7), "truncated");
  {
    std::string f = raw_file("{}", 0);
    f[0] = char(200);  // claims a 200-byte header in a 10-byte file
    expect_error(f, "past the end");
  }
  expect_error(raw_file("{not json", 0), "not valid JSON");
  expect_error(raw_file("[1,2]", 0), "not a JSON object");
  expect_error(raw_file(R"({"t":{"dtype":"Q4","shape":[1],"data_offsets":[0,1]}})", 1), "unknown dtype 'Q4'");
  expect_error(raw_file(R"({"t":{"dtype":"F32","shape":[2],"data_offsets":[0,4]}})", 8), "shape x dtype is 8 bytes");
  expect_error(raw_file(R"({"t":{"dtype":"F32","shape":[2],"data_offsets":[0,4]}})", 4), "more bytes than the whole data section");
  expect_error(raw_file(R"({"t":{"dtype":"F32","shape":[1],"data_offsets":[0,4]}})", 2), "out of range");
  expect_error(raw_file(R"({"t":{"dtype":"F32","shape":[1],"data_offsets":[4,0]}})", 8), "out of range");
  expect_error(raw_file(R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},)"
                        R"("b":{"dtype":"F32","shape":[2],"data_offsets":[4,12]}})", 12), "overlap");
  expect_error(raw_file(R"({"t":{"dtype":"F32","shape":[-1],"data_offsets":[0,4]}})", 4), "non-negative");
  expect_error(raw_file(R"({"t":{"dtype":"F32","shape":[1.5],"data_offsets":[0,4]}})", 4), "non-negative");
  expect_error(raw_file(R"({"t":{"dtype":"F32","shape":[1]}})", 4), "data_offsets");
  // Shapes whose byte count overflows 64 bits must not wrap around to a "matching" size.
  expect_error(raw_file(R"({"t":{"dtype":"F32","shape":[1152921504606846976,4],"data_offsets":[0,0]}})", 0),
               "shape x dtype");
  // Element counts past int64 are rejected even when a zero dimension makes 0 bytes.
  expect_error(raw_file(R"({"t":{"dtype":"F32","shape":[4611686018427387904,4],"data_offsets":[0,0]}})", 0),
               "more than 2^63 elements");
  expect_error(raw_file(R"({"t":{"dtype":"U8","shape":[1099511627776,1099511627776,0],"data_offsets":[0,0]}})", 0),
               "more than 2^63 elements");
}

TEST(Safetensors, AcceptsEveryDtype) {
  for (const char* dt : {"F32", "F16", "BF16", "F8_E4M3", "F8_E8M0", "I8", "I32", "I64", "U8"}) {
    auto t = parse_dtype(dt);
    ASSERT_TRUE(t) << dt;
    size_t bytes = dtype_size(*t) * 3;
    std::string h = std::string(R"({"t":{"dtype":")") + dt + R"(","shape":[3],"data_offsets":[0,)" +
                    std::to_string(bytes) + "]}}";
    std::string f = raw_file(h, bytes);
    EXPECT_EQ(parse_error(f), "") << dt;
  }
}

TEST(Checkpoint, ShardedIndexAndMissingTensors) {
  fs::path d = temp_dir("shards");
  auto fill = [](uint8_t* b, int64_t, int64_t n) { std::memset(b, 0, size_t(n) * 4); };
  io::SafetensorsWriter w1, w2;
  w1.add("x", DType::F32, {4}, fill);
  w2.add("y", DType::F32, {2, 2}, fill);
  w1.write((d / "s1.safetensors").string());
  w2.write((d / "s2.safetensors").string());
  {
    std::ofstream(d / "model.safetensors.index.json") << R"({"weight_map": {"x": "s1.safetensors", "y": "s2.safetensors"}})";
  }
  io::Checkpoint ck(d.string());
  EXPECT_TRUE(ck.has("x"));
  EXPECT_TRUE(ck.has("y"));
  EXPECT_EQ(ck.get("y", {2, 2}).info->numel(), 4);
  try {
    ck.get("z");
    FAIL();
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("'z' is missing"), std::string::npos) << e.what();
  }
  try {
    ck.get("y", {4});
    FAIL();
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("has shape [2, 2] but config.json implies [4]"), std::string::npos) << e.what();
  }
  // An index naming a shard that does not exist.
  { std::ofstream(d / "model.safetensors.index.json") << R"({"weight_map": {"x": "s3.safetensors"}})"; }
  try {
    io::Checkpoint bad(d.string());
    FAIL();
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("s3.safetensors"), std::string::npos) << e.what();
  }
  // An index mapping a tensor to a shard that does not hold it.
  { std::ofstream(d / "model.safetensors.index.json") << R"({"weight_map": {"x": "s2.safetensors"}})"; }
  EXPECT_THROW(io::Checkpoint bad(d.string()), Error);
  fs::remove_all(d);
}

TEST(Checkpoint, TruncatedFileNamesTheFile) {
  fs::path d = temp_dir("trunc");
  io::SafetensorsWriter w;
  w.add("x", DType::F32, {1024}, [](uint8_t* b, int64_t, int64_t n) { std::memset(b, 0, size_t(n) * 4); });
  w.write((d / "model.safetensors").string());
  fs::resize_file(d / "model.safetensors", fs::file_size(d / "model.safetensors") - 100);
  try {
    io::Checkpoint ck(d.string());
    FAIL();
  } catch (const Error& e) {
    std::string m = e.what();
    EXPECT_NE(m.find("model.safetensors"), std::string::npos) << m;
    EXPECT_NE(m.find("out of range"), std::string::npos) << m;
  }
  fs::remove_all(d);
}

TEST(ModelConfig, ParsesLongAndShortSpellings) {
  auto c = io::parse_model_config(
      R"({"architectures":["LlamaForCausalLM"],"hidden_size":64,"intermediate_size":128,"num_hidden_layers":2,)"
      R"("num_attention_heads":4,"num_key_value_heads":2,"vocab_size":100,"rope_scaling":{"rope_type":"llama3",)"
      R"("factor":8.0,"low_freq_factor":1.0,"high_freq_factor":4.0,"original_max_position_embeddings":8192},)"
      R"("eos_token_id":[1,2]})", "config.json");
  EXPECT_EQ(c.head_dim, 16);
  EXPECT_EQ(c.rope_scaling.kind, io::RopeScaling::Kind::kLlama3);
  EXPECT_EQ(c.eos_token_ids, (std::vector<int64_t>{1, 2}));
  auto s = io::parse_model_config(
      R"({"architectures":["LlamaForCausalLM"],"n_embd":32,"n_inner":64,"n_layer":1,"n_head":2,"n_vocab":10})", "c.json");
  EXPECT_EQ(s.hidden_size, 32);
  EXPECT_EQ(s.num_key_value_heads, 2);
  EXPECT_EQ(s.head_dim, 16);
}

TEST(ModelConfig, RejectsBadConfigs) {
  auto err = [](const std::string& text) {
    try {
      io::parse_model_config(text, "config.json");
    } catch (const Error& e) {
      return std::string(e.what());
    }
    return std::string();
  };
  EXPECT_NE(err("{").find("not valid JSON"), std::string::npos);
  EXPECT_NE(err(R"({"hidden_size":1})").find("architectures"), std::string::npos);
  EXPECT_NE(err(R"({"architectures":["X"],"hidden_size":64})").find("intermediate_size"), std::string::npos);
  EXPECT_NE(err(R"({"architectures":["X"],"hidden_size":64,"intermediate_size":1,"num_hidden_layers":1,)"
                R"("num_attention_heads":4,"num_key_value_heads":3,"vocab_size":5})").find("multiple"), std::string::npos);
  EXPECT_NE(err(R"({"architectures":["X"],"hidden_size":"64"})").find("must be an integer"), std::string::npos);
  EXPECT_NE(err(R"({"architectures":["X"],"hidden_size":64,"intermediate_size":1,"num_hidden_layers":1,)"
                R"("num_attention_heads":4,"vocab_size":5,"rope_scaling":{"type":"weird"}})").find("weird"), std::string::npos);
}

// Expert parallelism's sharded loading: a rank maps only the tensors its filter keeps
// (and reads the header without mapping the file); the others are listed but refused.
TEST(Checkpoint, KeepMapsOnlyTheChosenTensors) {
  fs::path d = temp_dir("keep");
  io::SafetensorsWriter w;
  const char* names[] = {"embed", "layers.0.ffn.experts.0.w1", "layers.0.ffn.experts.1.w1", "layers.0.ffn.experts.2.w1",
                         "norm"};
  for (int i = 0; i < 5; ++i)
    w.add(names[i], DType::F32, {1024}, [i](uint8_t* b, int64_t off, int64_t n) {
      for (int64_t k = 0; k < n; ++k) {
        const float v = float(i * 10000 + off + k);
        std::memcpy(b + 4 * k, &v, 4);
      }
    });
  w.write((d / "model.safetensors").string());
  const io::Checkpoint all(d.string());
  EXPECT_EQ(all.mapped_bytes(), fs::file_size(d / "model.safetensors"));
  auto keep = [](const std::string& n) { return n.find(".experts.1.") == std::string::npos; };
  const io::Checkpoint part(d.string(), nullptr, keep);
  EXPECT_EQ(part.total_bytes(), all.total_bytes());  // every tensor is still listed
  EXPECT_EQ(part.mapped_bytes(), 4u * 4096u);         // four of the five, no header
  EXPECT_TRUE(part.has("layers.0.ffn.experts.1.w1"));
  EXPECT_EQ(part.find("layers.0.ffn.experts.1.w1").data, nullptr);
  try {
    part.get("layers.0.ffn.experts.1.w1");
    FAIL();
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("not mapped by this rank"), std::string::npos) << e.what();
  }
  for (int i : {0, 1, 3, 4}) {
    const io::TensorRef a = part.get(names[i]), b = all.get(names[i]);
    ASSERT_NE(a.data, nullptr);
    EXPECT_EQ(std::memcmp(a.data, b.data, 4096), 0) << names[i];
  }
  part.prefault();
  fs::remove_all(d);
}

// page_in's copies (--weight-memory): the bytes move into anonymous memory at the same
// addresses, so tensor pointers taken before stay valid and read the same values, for a
// whole-file mapping and for expert parallelism's partial mappings (file offsets not 0).
TEST(Checkpoint, PageInCopiesInPlace) {
  fs::path d = temp_dir("page_in");
  io::SafetensorsWriter w;
  const int64_t n = 1 << 19;  // 2 MiB of f32 per tensor: the file spans whole 2 MiB pages
  const char* names[] = {"embed", "layers.0.ffn.experts.0.w1", "layers.0.ffn.experts.1.w1", "norm"};
  auto value = [](int i, int64_t k) { return float(i) * 1e7f + float(k % 9973) * 0.5f - float(k / 9973); };
  for (int i = 0; i < 4; ++i)
    w.add(names[i], DType::F32, {n}, [&, i](uint8_t* b, int64_t off, int64_t len) {
      for (int64_t k = 0; k < len; ++k) {
        const float v = value(i, off + k);
        std::memcpy(b + 4 * k, &v, 4);
      }
    });
  w.write((d / "model.safetensors").string());
  auto check = [&](const io::Checkpoint& ck, const std::vector<const uint8_t*>& before, const char* what) {
    for (int i = 0; i < 4; ++i) {
      const io::TensorRef t = ck.find(names[i]);
      EXPECT_EQ(t.data, before[size_t(i)]) << what << " " << names[i];
      if (!t.data) continue;
      const float* f = reinterpret_cast<const float*>(t.data);
      int64_t bad = 0;
      for (int64_t k = 0; k < n; ++k) bad += f[k] != value(i, k);
      EXPECT_EQ(bad, 0) << what << " " << names[i];
    }
  };
  auto pointers = [&](const io::Checkpoint& ck) {
    std::vector<const uint8_t*> p;
    for (const char* name : names) p.push_back(ck.find(name).data);
    return p;
  };
  for (const io::WeightMemory mode : {io::WeightMemory::kMap, io::WeightMemory::kCopy, io::WeightMemory::kAuto}) {
    io::Checkpoint all(d.string());
    const auto before = pointers(all);
    const io::PageInReport r = all.page_in(mode);
    EXPECT_EQ(r.mapped, all.mapped_bytes());
    if (mode == io::WeightMemory::kMap) {
      EXPECT_EQ(r.copied, 0u);
    }
    if (mode == io::WeightMemory::kCopy) {
      EXPECT_EQ(r.copied, fs::file_size(d / "model.safetensors"));
    }
    check(all, before, "whole file");
  }
  auto keep = [](const std::string& name) { return name.find(".experts.0.") == std::string::npos; };
  io::Checkpoint part(d.string(), nullptr, keep);
  const auto before = pointers(part);
  ASSERT_EQ(before[1], nullptr);
  const io::PageInReport r = part.page_in(io::WeightMemory::kCopy);
  EXPECT_GE(r.copied, part.mapped_bytes());  // whole pages: a neighbour's bytes come too
  check(part, before, "kept tensors");
  fs::remove_all(d);
}

TEST(Checkpoint, WeightMemoryNames) {
  EXPECT_EQ(io::parse_weight_memory("auto"), io::WeightMemory::kAuto);
  EXPECT_EQ(io::parse_weight_memory("map"), io::WeightMemory::kMap);
  EXPECT_EQ(io::parse_weight_memory("copy"), io::WeightMemory::kCopy);
  try {
    io::parse_weight_memory("mmap");
    FAIL();
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("--weight-memory must be auto, map or copy, got 'mmap'"), std::string::npos)
        << e.what();
  }
}
