#include <cstdio>

#include "cli/commands.h"
#include "cli/flags.h"
#include "parallel/data_parallel.h"
#include "parallel/mpi_world.h"
#include "core/error.h"
#include "server/http_server.h"

namespace gannet::cli {

namespace {

const char* kServeUsage =
    "usage: gannet serve --model DIR [--host 127.0.0.1] [--port 8000] [--api-key KEY]\n"
    "                    [--served-model-name NAME] [--chat-template FILE] [--max-body-bytes N]\n"
    "                    [--http-threads N] [engine flags]\n"
    "\n"
    "An OpenAI-compatible HTTP server: GET /health, GET /v1/models, GET /metrics,\n"
    "POST /v1/completions and /v1/chat/completions (\"stream\": true for server-sent events),\n"
    "POST /tokenize, POST /detokenize.\n"
    "It binds to loopback unless --host says otherwise; --port 0 takes a free port. It prints\n"
    "\"listening on http://HOST:PORT\" once it accepts connections and serves until SIGINT/SIGTERM.\n"
    "  --api-key KEY          requests must carry \"Authorization: Bearer KEY\" (not /health)\n"
    "  --served-model-name N  the model's name in the API (default: the model directory's name)\n"
    "  --chat-template FILE   a Jinja chat template replacing the checkpoint's (default: its\n"
    "                         chat_template.jinja or tokenizer_config.json; DeepSeek-V4 models\n"
    "                         without one use the built-in DeepSeek-V4 format)\n"
    "  --max-body-bytes N     larger request bodies get 413 (default 4194304)\n"
    "  --http-threads N       connections served at once (default 544)\n"
    "engine flags: as `gannet generate --help` lists them (--threads, --kv-cache-memory, ...).\n";

}  // namespace

int cmd_serve(const Args& args) {
  std::set<std::string> values = {"model", "host", "port", "api-key", "served-model-name", "chat-template", "max-body-bytes", "http-threads"};
  values.insert(kEngineValueFlags.begin(), kEngineValueFlags.end());
  std::set<std::string> bools = {"help"};
  bools.insert(kEngineBoolFlags.begin(), kEngineBoolFlags.end());
  Flags f(args, values, bools);
  if (f.has("help")) {
    std::fputs(kServeUsage, stdout);
    return 0;
  }
  EngineArgs ea;
  ea.model = f.require("model");
  server::ServerOptions o;
  o.host = f.get_or("host", o.host);
  o.port = int(f.get_int_in("port", o.port, 0, 65535));
  o.api_key = f.get_or("api-key", "");
  if (f.has("api-key") && o.api_key.empty()) throw UsageError("--api-key is empty");
  o.served_model_name = f.get_or("served-model-name", "");
  o.chat_template = f.get_or("chat-template", "");
  if (f.has("chat-template") && o.chat_template.empty()) throw UsageError("--chat-template is empty");
  o.max_body_bytes = size_t(f.get_int_in("max-body-bytes", int64_t(o.max_body_bytes), 1024, int64_t(1) << 32));
  o.http_threads = int(f.get_int_in("http-threads", o.http_threads, 1, 65536));
  apply_engine_flags(f, ea);
  const auto dp = f.get("dp"), tmo = f.get("mpi-timeout");
  parallel::apply_job_options(dp ? &*dp : nullptr, tmo ? &*tmo : nullptr, ea);
  std::unique_ptr<Collective> group;
  if (parallel::world().size > 1) group = parallel::world_collective();
  return server::serve(ea, o, group.get());
}

}  // namespace gannet::cli
