// Reading the JSON files of a model directory with errors that name the file.
#pragma once

#include <string>

#include <nlohmann/json_fwd.hpp>

namespace gannet::tokenizer {

// Parses the file at `path`. Throws gannet::Error "<path>: <problem>" when it cannot be
// read or is not valid JSON.
nlohmann::json read_json_file(const std::string& path);
// The same, in two steps: the file's bytes, then their parse ("<path>: invalid JSON").
std::string read_file_bytes(const std::string& path);
nlohmann::json parse_json_text(const std::string& text, const std::string& path);

bool file_exists(const std::string& path);

// `dir` joined with `name` ("." for an empty dir).
std::string join_path(const std::string& dir, const std::string& name);

}  // namespace gannet::tokenizer
