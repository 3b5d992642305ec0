#include "cli/commands.h"
#include "cli/flags.h"

namespace gannet::cli {
int cmd_make_model(const Args&) { throw Error("not implemented yet"); }
}  // namespace gannet::cli
