// Errors that cross the public API, and internal invariant checks (DESIGN principle 5).
#pragma once

#include <sstream>
#include <stdexcept>
#include <string>

namespace gannet {

// A problem the user can act on: bad input file, bad flag, bad request.
class Error : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

namespace detail {
[[noreturn]] void check_failed(const char* file, int line, const char* cond, const std::string& msg);

template <typename... Args>
std::string concat(const Args&... args) {
  std::ostringstream os;
  (os << ... << args);
  return os.str();
}
}  // namespace detail

// Builds a message from pieces and throws gannet::Error.
template <typename... Args>
[[noreturn]] void fail(const Args&... args) {
  throw Error(detail::concat(args...));
}

}  // namespace gannet

// Internal invariant: aborts with context. Not for user input (throw gannet::Error).
#define GANNET_CHECK(cond, ...)                                                          \
  do {                                                                                   \
    if (!(cond)) [[unlikely]]                                                            \
      ::gannet::detail::check_failed(__FILE__, __LINE__, #cond,                          \
                                     ::gannet::detail::concat("" __VA_OPT__(, ) __VA_ARGS__)); \
  } while (0)
