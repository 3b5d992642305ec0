#include "core/error.h"

#include <cstdio>
#include <cstdlib>

namespace gannet::detail {

void check_failed(const char* file, int line, const char* cond, const std::string& msg) {
  std::fprintf(stderr, "gannet: internal check failed at %s:%d: %s%s%s\n", file, line, cond,
               msg.empty() ? "" : ": ", msg.c_str());
  std::abort();
}

}  // namespace gannet::detail
