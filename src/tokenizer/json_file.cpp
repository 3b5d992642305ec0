#include "tokenizer/json_file.h"

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>

#include "core/error.h"

namespace gannet::tokenizer {

std::string read_file_bytes(const std::string& path) {
  std::error_code ec;
  if (std::filesystem::is_directory(path, ec)) fail(path, ": is a directory, expected a JSON file");
  std::ifstream in(path, std::ios::binary);
  if (!in) fail(path, ": cannot open: ", std::strerror(errno));
  std::ostringstream buf;
  buf << in.rdbuf();
  if (in.bad()) fail(path, ": read error");
  return std::move(buf).str();
}

nlohmann::json parse_json_text(const std::string& text, const std::string& path) {
  try {
    return nlohmann::json::parse(text);
  } catch (const nlohmann::json::exception& e) {
    fail(path, ": invalid JSON: ", e.what());
  }
}

nlohmann::json read_json_file(const std::string& path) { return parse_json_text(read_file_bytes(path), path); }

bool file_exists(const std::string& path) {
  std::error_code ec;
  return std::filesystem::is_regular_file(path, ec);
}

std::string join_path(const std::string& dir, const std::string& name) {
  return (std::filesystem::path(dir.empty() ? "." : dir) / name).string();
}

}  // namespace gannet::tokenizer
