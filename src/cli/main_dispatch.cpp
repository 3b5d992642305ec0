#include <cstdio>
#include <cstring>
#include <exception>
#include <string>

#include "cli/commands.h"
#include "cli/flags.h"

namespace gannet::cli {

namespace {

const char* kUsage =
    "usage: gannet <command> [flags]\n"
    "\n"
    "commands:\n"
    "  bench       roofline | decode | prefill | throughput benchmarks against measured limits\n"
    "  generate    generate text from a model (--model DIR --prompt TEXT | --prompts FILE.jsonl)\n"
    "  info        describe a checkpoint (--model DIR [--json])\n"
    "  make-model  write a random-weight checkpoint (--arch llama|qwen2|qwen3 --preset tiny|small|1b)\n"
    "  serve       an OpenAI-compatible HTTP server (--model DIR [--host H] [--port P] [--api-key K])\n"
    "  tokenize    JSON lines {\"text\": ...} on stdin -> {\"ids\": [...]} (--model DIR [--decode])\n"
    "\n"
    "run `gannet <command> --help` for a command's flags\n";

}  // namespace

int main_dispatch(int argc, char** argv) {
  if (argc < 2 || !std::strcmp(argv[1], "--help") || !std::strcmp(argv[1], "-h")) {
    std::fputs(kUsage, argc < 2 ? stderr : stdout);
    return argc < 2 ? 2 : 0;
  }
  std::string cmd = argv[1];
  Args args(argv + 2, argv + argc);
  try {
    if (cmd == "bench") return cmd_bench(args);
    if (cmd == "generate") return cmd_generate(args);
    if (cmd == "info") return cmd_info(args);
    if (cmd == "make-model") return cmd_make_model(args);
    if (cmd == "serve") return cmd_serve(args);
    if (cmd == "tokenize") return cmd_tokenize(args);
    std::fprintf(stderr, "gannet: unknown command '%s'\n\n%s", cmd.c_str(), kUsage);
    return 2;
  } catch (const UsageError& e) {
    std::fprintf(stderr, "gannet %s: %s\n(run `gannet %s --help` for usage)\n", cmd.c_str(),
                 e.what(), cmd.c_str());
    return 2;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "gannet %s: error: %s\n", cmd.c_str(), e.what());
    return 1;
  }
}

}  // namespace gannet::cli
