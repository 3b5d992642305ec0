#include <cstdio>
#include <cstring>
#include <exception>
#include <string>

#include "cli/commands.h"
#include "cli/flags.h"
#include "parallel/mpi_world.h"

namespace gannet::cli {

namespace {

const char* kMainUsage =
    "usage: gannet <command> [flags]\n"
    "\n"
    "commands:\n"
    "  bench       roofline | decode | prefill | throughput benchmarks against measured limits\n"
    "  chat-format a model's chat format on JSON lines (--model DIR render|parse [--input FILE])\n"
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
    std::fputs(kMainUsage, argc < 2 ? stderr : stdout);
    return argc < 2 ? 2 : 0;
  }
  std::string cmd = argv[1];
  Args args(argv + 2, argv + argc);
  // Under mpirun, every rank runs the same command (parallel/mpi_world.h); a failure on
  // any rank ends the whole job, naming the rank, instead of leaving the others waiting.
  std::string who;
  // A command that returns (whatever its exit code, e.g. 1 for bad input lines) ends with
  // the others; one that throws ends the job.
  auto end = [&](int code, bool failed) {
    if (parallel::world().size > 1 && failed) parallel::abort_world(code);
    parallel::finalize_world();
    return code;
  };
  try {
    parallel::init_world(&argc, &argv);
    if (parallel::world().size > 1) who = " (rank " + std::to_string(parallel::world().rank) + ")";
    if (parallel::world().size > 1 && cmd != "bench" && cmd != "generate" && cmd != "serve")
      throw UsageError(cmd + " runs as one process; only generate, bench and serve run as ranks of an mpirun job");
    int rc = 2;
    if (cmd == "bench") rc = cmd_bench(args);
    else if (cmd == "chat-format") rc = cmd_chat_format(args);
    else if (cmd == "generate") rc = cmd_generate(args);
    else if (cmd == "info") rc = cmd_info(args);
    else if (cmd == "make-model") rc = cmd_make_model(args);
    else if (cmd == "serve") rc = cmd_serve(args);
    else if (cmd == "tokenize") rc = cmd_tokenize(args);
    else std::fprintf(stderr, "gannet: unknown command '%s'\n\n%s", cmd.c_str(), kMainUsage);
    return end(rc, false);
  } catch (const UsageError& e) {
    std::fprintf(stderr, "gannet %s%s: %s\n(run `gannet %s --help` for usage)\n", cmd.c_str(), who.c_str(),
                 e.what(), cmd.c_str());
    return end(2, true);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "gannet %s%s: error: %s\n", cmd.c_str(), who.c_str(), e.what());
    return end(1, true);
  }
}

}  // namespace gannet::cli
