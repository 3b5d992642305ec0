// Typed reads of config.json fields. Every read names the file and the field (with the
// enclosing object, e.g. 'rope_parameters.factor') in its error, and a present field of
// the wrong type is an error, never a silent default.
#pragma once

#include <cstdint>
#include <initializer_list>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>

namespace gannet::io::json_fields {

using nlohmann::json;

// True when `key` is present and not null.
bool has(const json& j, const char* key);

// First present key among spellings, as an integer in [0, max]; -1 when absent. `where`
// prefixes the key in messages ("rope_parameters." for a nested object).
int64_t get_int(const json& j, std::initializer_list<const char*> keys, const std::string& file,
                int64_t max = int64_t(1) << 40, const std::string& where = "");
std::optional<double> get_number(const json& j, const char* key, const std::string& file, const std::string& where = "");
double get_double(const json& j, const char* key, double def, const std::string& file, const std::string& where = "");
bool get_bool(const json& j, const char* key, bool def, const std::string& file, const std::string& where = "");
std::optional<std::string> get_string(const json& j, const char* key, const std::string& file,
                                      const std::string& where = "");

}  // namespace gannet::io::json_fields
