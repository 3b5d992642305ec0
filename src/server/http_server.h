// `gannet serve`: an OpenAI-compatible HTTP server over one engine (engine_loop.h).
// Endpoints: GET /health, GET /v1/models, GET /metrics (Prometheus text), POST
// /v1/completions and /v1/chat/completions (streaming as server-sent events), POST
// /tokenize, POST /detokenize.
// Errors are OpenAI-shaped JSON ({"error": {"message", "type", "param", "code"}}) naming
// the field; a bad request never affects the others.
#pragma once

#include <cstddef>
#include <functional>
#include <memory>
#include <string>

#include "core/collective.h"
#include "gannet/engine_args.h"

namespace gannet::server {

struct ServerOptions {
  std::string host = "127.0.0.1";
  int port = 8000;              // 0: any free port (the one taken is printed)
  std::string api_key;          // non-empty: /v1/*, /tokenize, /detokenize, /metrics need "Bearer KEY"
  std::string served_model_name;  // default: the model directory's name
  size_t max_body_bytes = size_t(4) << 20;
  int http_threads = 544;       // connections served at once (512 streams and some)
  std::string chat_template;    // a Jinja file replacing the checkpoint's chat template
  // Called with the port once the server accepts connections, instead of printing the
  // "listening" line (LocalServer).
  std::function<void(int port)> on_listening;
};

// Loads the model and serves until SIGINT/SIGTERM. Prints "listening on http://HOST:PORT"
// on stdout once it accepts connections. Returns the process exit status.
// group (an mpirun job of several ranks): rank 0 serves HTTP and shares the requests out
// by queued tokens; the other ranks run their share (data parallel, engine_loop.h).
int serve(const EngineArgs& engine_args, const ServerOptions& options, Collective* group = nullptr);

// The same server run inside this process on a thread of its own (gannet bench agent
// drives it over loopback HTTP, as clients would): the constructor loads the model and
// returns once a free port on 127.0.0.1 accepts connections; the destructor stops it.
class LocalServer {
 public:
  LocalServer(const EngineArgs& engine_args, ServerOptions options);
  ~LocalServer();
  LocalServer(const LocalServer&) = delete;
  LocalServer& operator=(const LocalServer&) = delete;
  int port() const;
  const std::string& model_name() const;
  // Whether the engine caches prefixes (the flags ask; some models or drafters refuse).
  bool prefix_caching() const;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace gannet::server
