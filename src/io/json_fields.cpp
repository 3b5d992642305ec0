#include "io/json_fields.h"

#include "core/error.h"

namespace gannet::io::json_fields {

bool has(const json& j, const char* key) {
  auto it = j.find(key);
  return it != j.end() && !it->is_null();
}

int64_t get_int(const json& j, std::initializer_list<const char*> keys, const std::string& file, int64_t max,
                const std::string& where) {
  for (const char* k : keys) {
    auto it = j.find(k);
    if (it == j.end() || it->is_null()) continue;
    if (!it->is_number_integer()) fail(file, ": '", where, k, "' must be an integer, got ", it->dump());
    if (it->is_number_unsigned() ? it->get<uint64_t>() > uint64_t(max)
                                 : (it->get<int64_t>() < 0 || it->get<int64_t>() > max))
      fail(file, ": '", where, k, "' = ", it->dump(), " is outside [0, ", max, "]");
    return it->get<int64_t>();
  }
  return -1;
}

std::optional<double> get_number(const json& j, const char* key, const std::string& file, const std::string& where) {
  auto it = j.find(key);
  if (it == j.end() || it->is_null()) return std::nullopt;
  if (!it->is_number()) fail(file, ": '", where, key, "' must be a number, got ", it->dump());
  return it->get<double>();
}

double get_double(const json& j, const char* key, double def, const std::string& file, const std::string& where) {
  return get_number(j, key, file, where).value_or(def);
}

bool get_bool(const json& j, const char* key, bool def, const std::string& file, const std::string& where) {
  auto it = j.find(key);
  if (it == j.end() || it->is_null()) return def;
  if (!it->is_boolean()) fail(file, ": '", where, key, "' must be true or false, got ", it->dump());
  return it->get<bool>();
}

std::optional<std::string> get_string(const json& j, const char* key, const std::string& file,
                                      const std::string& where) {
  auto it = j.find(key);
  if (it == j.end() || it->is_null()) return std::nullopt;
  if (!it->is_string()) fail(file, ": '", where, key, "' must be a string, got ", it->dump());
  return it->get<std::string>();
}

}  // namespace gannet::io::json_fields
