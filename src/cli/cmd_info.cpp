#include "cli/commands.h"
#include "cli/flags.h"

namespace gannet::cli {
int cmd_info(const Args&) { throw Error("not implemented yet"); }
}  // namespace gannet::cli
