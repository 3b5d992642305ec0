#include "chat/python_json.h"

#include <charconv>
#include <cmath>
#include <cstdio>

namespace gannet::chat {

std::string python_json_string(const std::string& text) {
  std::string out;
  out.reserve(text.size() + 2);
  out += '"';
  for (const char ch : text) {
    const unsigned char c = static_cast<unsigned char>(ch);
    switch (c) {
      case '"': out += "\\\""; break;
      case '\\': out += "\\\\"; break;
      case '\n': out += "\\n"; break;
      case '\r': out += "\\r"; break;
      case '\t': out += "\\t"; break;
      case '\b': out += "\\b"; break;
      case '\f': out += "\\f"; break;
      default:
        if (c < 0x20) {
          char buf[8];
          std::snprintf(buf, sizeof buf, "\\u%04x", c);
          out += buf;
        } else {
          out += ch;
        }
    }
  }
  out += '"';
  return out;
}

std::string python_float_repr(double x) {
  if (std::isnan(x)) return "NaN";
  if (std::isinf(x)) return x > 0 ? "Infinity" : "-Infinity";
  // Shortest round-trip digits, in scientific form: d[.ddd]e[+-]X.
  char buf[64];
  const auto r = std::to_chars(buf, buf + sizeof buf, x, std::chars_format::scientific);
  std::string s(buf, r.ptr);
  std::string sign;
  if (s[0] == '-') sign = "-", s.erase(0, 1);
  const size_t e = s.find('e');
  std::string digits = s.substr(0, e);
  const int exp10 = std::stoi(s.substr(e + 1));
  if (digits.size() > 1) digits.erase(1, 1);  // drop the '.'
  // repr: fixed notation while the decimal point sits in (-4, 16] (decpt = exp10 + 1).
  const int decpt = exp10 + 1;
  std::string out = sign;
  if (decpt > -4 && decpt <= 16) {
    const int n = int(digits.size());
    if (decpt <= 0) {
      out += "0." + std::string(size_t(-decpt), '0') + digits;
    } else if (decpt >= n) {
      out += digits + std::string(size_t(decpt - n), '0') + ".0";
    } else {
      out += digits.substr(0, size_t(decpt)) + "." + digits.substr(size_t(decpt));
    }
    return out;
  }
  out += digits.substr(0, 1);
  if (digits.size() > 1) out += "." + digits.substr(1);
  char ebuf[16];
  std::snprintf(ebuf, sizeof ebuf, "e%c%02d", exp10 < 0 ? '-' : '+', std::abs(exp10));
  return out + ebuf;
}

namespace {

void dump(const nlohmann::ordered_json& v, std::string& out) {
  switch (v.type()) {
    case nlohmann::ordered_json::value_t::null: out += "null"; break;
    case nlohmann::ordered_json::value_t::boolean: out += v.get<bool>() ? "true" : "false"; break;
    case nlohmann::ordered_json::value_t::number_integer: out += std::to_string(v.get<int64_t>()); break;
    case nlohmann::ordered_json::value_t::number_unsigned: out += std::to_string(v.get<uint64_t>()); break;
    case nlohmann::ordered_json::value_t::number_float: out += python_float_repr(v.get<double>()); break;
    case nlohmann::ordered_json::value_t::string: out += python_json_string(v.get_ref<const std::string&>()); break;
    case nlohmann::ordered_json::value_t::array: {
      out += '[';
      bool first = true;
      for (const auto& x : v) {
        if (!first) out += ", ";
        first = false;
        dump(x, out);
      }
      out += ']';
      break;
    }
    case nlohmann::ordered_json::value_t::object: {
      out += '{';
      bool first = true;
      for (auto it = v.begin(); it != v.end(); ++it) {
        if (!first) out += ", ";
        first = false;
        out += python_json_string(it.key());
        out += ": ";
        dump(it.value(), out);
      }
      out += '}';
      break;
    }
    default: out += "null"; break;  // binary / discarded: not produced by the JSON parser
  }
}

}  // namespace

std::string python_json_dumps(const nlohmann::ordered_json& value) {
  std::string out;
  dump(value, out);
  return out;
}

bool python_truthy(const nlohmann::ordered_json& v) {
  switch (v.type()) {
    case nlohmann::ordered_json::value_t::null: return false;
    case nlohmann::ordered_json::value_t::boolean: return v.get<bool>();
    case nlohmann::ordered_json::value_t::number_integer: return v.get<int64_t>() != 0;
    case nlohmann::ordered_json::value_t::number_unsigned: return v.get<uint64_t>() != 0;
    case nlohmann::ordered_json::value_t::number_float: return v.get<double>() != 0.0;
    case nlohmann::ordered_json::value_t::string: return !v.get_ref<const std::string&>().empty();
    case nlohmann::ordered_json::value_t::array:
    case nlohmann::ordered_json::value_t::object: return !v.empty();
    default: return false;
  }
}

}  // namespace gannet::chat
