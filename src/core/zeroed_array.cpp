#include "core/zeroed_array.h"

#include <sys/mman.h>

#include <cerrno>
#include <cstring>

#include "core/error.h"
#include "core/progress_bar.h"

namespace gannet::detail {

void* map_zeroed(size_t bytes) {
  void* p = ::mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (p == MAP_FAILED) fail("cannot reserve ", format_bytes(bytes), " of memory: ", std::strerror(errno));
  return p;
}

void unmap_zeroed(void* p, size_t bytes) { ::munmap(p, bytes); }

}  // namespace gannet::detail
