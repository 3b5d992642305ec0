#include "cli/commands.h"

int main(int argc, char** argv) { return gannet::cli::main_dispatch(argc, argv); }
