// A tiny random-weight checkpoint written once per test process (make-model's writer).
#pragma once

#include <unistd.h>

#include <filesystem>
#include <map>
#include <string>

#include "model/random_checkpoint.h"

namespace gannet::test_support {

inline const std::string& tiny_checkpoint(const std::string& arch, uint64_t seed) {
  static std::map<std::string, std::string> made;
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
