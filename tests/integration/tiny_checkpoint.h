// A tiny random-weight checkpoint written once per test process (make-model's writer).
#pragma once

#include <unistd.h>

#include <filesystem>
#include <map>
#include <string>
#include <system_error>

#include "model/random_checkpoint.h"

namespace gannet::test_support {

// The directories made, removed when the test process exits (each is about 40 MB).
struct TinyCheckpoints {
  std::map<std::string, std::string> dirs;
  ~TinyCheckpoints() {
    std::error_code ec;
    for (const auto& [key, dir] : dirs) std::filesystem::remove_all(dir, ec);
  }
};

inline const std::string& tiny_checkpoint(const std::string& arch, uint64_t seed) {
  static TinyCheckpoints checkpoints;
  auto& made = checkpoints.dirs;
  const std::string key = arch + "-" + std::to_string(seed);
  auto it = made.find(key);
  if (it != made.end()) return it->second;
  const auto dir = std::filesystem::temp_directory_path() /
                   ("gannet_test_" + key + "_" + std::to_string(::getpid()));
  std::filesystem::remove_all(dir);
  model::RandomCheckpointOptions o;
  o.arch = arch;
  o.preset = "tiny";
  o.seed = seed;
  model::write_random_checkpoint(o, dir.string());
  return made[key] = dir.string();
}

}  // namespace gannet::test_support
