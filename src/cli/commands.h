// Subcommands of the `gannet` executable; one file each (src/cli/cmd_*.cpp).
#pragma once

#include <string>
#include <vector>

namespace gannet::cli {

using Args = std::vector<std::string>;  // arguments after the subcommand name

int main_dispatch(int argc, char** argv);

int cmd_bench(const Args& args);
int cmd_chat_format(const Args& args);
int cmd_generate(const Args& args);
int cmd_info(const Args& args);
int cmd_make_model(const Args& args);
int cmd_serve(const Args& args);
int cmd_tokenize(const Args& args);

}  // namespace gannet::cli
