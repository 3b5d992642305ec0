#include "server/http_server.h"

#include <httplib.h>

#include <atomic>
#include <cctype>
#include <chrono>
#include <csignal>
#include <cstdio>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <optional>
#include <sys/socket.h>

#include "core/cpu_features.h"
#include "core/error.h"
#include "engine/engine.h"
#include "git_revision.h"
#include "server/engine_loop.h"
#include "server/request_json.h"

namespace gannet::server {

namespace {

using json = nlohmann::json;
using ojson = nlohmann::ordered_json;

// An OpenAI-shaped error: HTTP status, message, type, the offending field.
struct ApiError {
  int status;
  std::string message, type, param, code;
};

json error_body(const ApiError& e) {
  json err = {{"message", e.message}, {"type", e.type}, {"param", nullptr}, {"code", nullptr}};
  if (!e.param.empty()) err["param"] = e.param;
  if (!e.code.empty()) err["code"] = e.code;
  return json{{"error", err}};
}

ApiError bad_request(std::string message, std::string param = "") {
  return {400, std::move(message), "invalid_request_error", std::move(param), ""};
}

void send_json(httplib::Response& res, int status, const json& body) {
  res.status = status;
  res.set_content(body.dump(-1, ' ', false, json::error_handler_t::replace), "application/json");
}

void send_error(httplib::Response& res, const ApiError& e) { send_json(res, e.status, error_body(e)); }

// The field a gannet::Error message names: quoted ("'stop' must be ...") or leading
// ("max_tokens must be >= 1, ..."); empty if none.
std::string field_of(const std::string& message) {
  const size_t a = message.find('\'');
  if (a != std::string::npos) {
    const size_t b = message.find('\'', a + 1);
    if (b != std::string::npos) return message.substr(a + 1, b - a - 1);
  }
  size_t n = 0;
  while (n < message.size() && (std::islower((unsigned char)message[n]) || message[n] == '_')) ++n;
  return n > 0 && message.compare(n, 6, " must ") == 0 ? message.substr(0, n) : "";
}

int64_t unix_now() {
  return std::chrono::duration_cast<std::chrono::seconds>(std::chrono::system_clock::now().time_since_epoch()).count();
}

// One prompt of a completion request: text, or token ids.
struct Prompt {
  std::string text;
  std::vector<int32_t> ids;
};

struct CompletionRequest {
  std::vector<Prompt> prompts;
  SamplingParams params;
  bool stream = false, include_usage = false, echo = false;
};

// The request body -> prompts and SamplingParams. Server fields are taken here; every
// other field goes through the same parser as `generate` lines (unknown fields refused).
CompletionRequest parse_completion(const ojson& body, const std::string& served_name) {
  if (!body.is_object()) throw bad_request("the request body must be a JSON object");
  CompletionRequest r;
  ojson rest = ojson::object();
  bool have_prompt = false;
  for (auto it = body.begin(); it != body.end(); ++it) {
    const std::string& k = it.key();
    const ojson& v = it.value();
    if (k == "model") {
      if (!v.is_string()) throw bad_request("'model' must be a string", "model");
      if (v.get<std::string>() != served_name)
        throw ApiError{404, "the model '" + v.get<std::string>() + "' does not exist (this server serves '" + served_name + "')",
                       "invalid_request_error", "model", "model_not_found"};
    } else if (k == "prompt") {
      have_prompt = true;
      auto ids_of = [&](const ojson& a) {
        std::vector<int32_t> ids;
        for (const ojson& t : a) {
          if (!t.is_number_integer() || t.get<int64_t>() < 0 || t.get<int64_t>() > INT32_MAX)
            throw bad_request("'prompt' token ids must be non-negative integers", "prompt");
          ids.push_back(int32_t(t.get<int64_t>()));
        }
        return ids;
      };
      if (v.is_string()) {
        r.prompts.push_back({v.get<std::string>(), {}});
      } else if (v.is_array() && !v.empty() && v[0].is_number()) {
        r.prompts.push_back({"", ids_of(v)});
      } else if (v.is_array() && !v.empty()) {
        for (const ojson& p : v) {
          if (p.is_string()) r.prompts.push_back({p.get<std::string>(), {}});
          else if (p.is_array() && !p.empty()) r.prompts.push_back({"", ids_of(p)});
          else throw bad_request("'prompt' must be a string, a list of strings, a list of token ids or a list of such lists", "prompt");
        }
      } else {
        throw bad_request("'prompt' must be a string, a list of strings, a list of token ids or a list of such lists", "prompt");
      }
    } else if (k == "stream") {
      if (!v.is_boolean()) throw bad_request("'stream' must be true or false", "stream");
      r.stream = v.get<bool>();
    } else if (k == "stream_options") {
      if (v.is_null()) continue;
      if (!v.is_object()) throw bad_request("'stream_options' must be an object", "stream_options");
      for (auto f = v.begin(); f != v.end(); ++f) {
        if (f.key() != "include_usage" || !f.value().is_boolean())
          throw bad_request("'stream_options' takes only 'include_usage' (true or false)", "stream_options");
        r.include_usage = f.value().get<bool>();
      }
    } else if (k == "echo") {
      if (!v.is_boolean()) throw bad_request("'echo' must be true or false", "echo");
      r.echo = v.get<bool>();
    } else if (k == "user") {
      if (!v.is_string() && !v.is_null()) throw bad_request("'user' must be a string", "user");
    } else if (k == "suffix") {
      if (!v.is_null()) throw bad_request("'suffix' is not supported", "suffix");
    } else if (k == "logit_bias") {
      if (!v.is_null() && !(v.is_object() && v.empty())) throw bad_request("'logit_bias' is not supported", "logit_bias");
    } else if (k == "best_of") {
      if (!v.is_null() && !(v.is_number_integer() && v.get<int64_t>() == 1))
        throw bad_request("'best_of' other than 1 is not supported", "best_of");
    } else if (k == "logprobs" && !v.is_null()) {
      throw bad_request("'logprobs' is not supported by the server yet", "logprobs");
    } else if (k == "prompt_token_ids" || k == "prompt_logprobs") {
      throw bad_request("unknown field '" + k + "'", k);
    } else if (!v.is_null()) {
      rest[k] = v;
    }
  }
  if (!have_prompt) throw bad_request("missing 'prompt'", "prompt");
  if (r.stream == false && body.contains("stream_options") && !body["stream_options"].is_null())
    throw bad_request("'stream_options' is only allowed with 'stream': true", "stream_options");
  for (const Prompt& p : r.prompts)
    if (p.ids.empty() && p.text.empty()) throw bad_request("the prompt is empty", "prompt");
  SamplingParams defaults;
  defaults.max_tokens = 16;  // OpenAI's default for completions
  rest["prompt"] = "-";
  try {
    r.params = parse_prompt_line(rest.dump(), defaults).params;
  } catch (const Error& e) {
    throw bad_request(e.what(), field_of(e.what()));
  }
  return r;
}

struct Usage {
  int64_t prompt = 0, completion = 0;
  json to_json() const { return {{"prompt_tokens", prompt}, {"completion_tokens", completion}, {"total_tokens", prompt + completion}}; }
};

class Server {
 public:
  Server(std::unique_ptr<engine::Engine> engine, ServerOptions o)
      : o_(std::move(o)), loop_(std::move(engine)),
        fingerprint_(std::string("gannet-") + GANNET_GIT_REVISION + "-" + kernel_path_name()) {}

  int run();
  void stop() { http_.stop(); }

 private:
  bool authorized(const httplib::Request& req, httplib::Response& res);
  void completions(const httplib::Request& req, httplib::Response& res);
  void tokenize(const httplib::Request& req, httplib::Response& res, bool detokenize);
  void metrics(httplib::Response& res);
  std::string next_id() { return "cmpl-" + std::to_string(++ids_); }

  ServerOptions o_;
  EngineLoop loop_;
  std::string fingerprint_;
  httplib::Server http_;
  std::atomic<int64_t> ids_{0};
  std::atomic<int64_t> http_requests_{0}, http_errors_{0};
};

bool Server::authorized(const httplib::Request& req, httplib::Response& res) {
  if (o_.api_key.empty()) return true;
  if (req.get_header_value("Authorization") == "Bearer " + o_.api_key) return true;
  send_error(res, {401, "invalid API key", "authentication_error", "", "invalid_api_key"});
  return false;
}

void Server::completions(const httplib::Request& req, httplib::Response& res) {
  ojson body;
  try {
    body = ojson::parse(req.body);
  } catch (const ojson::exception& e) {
    return send_error(res, bad_request(std::string("malformed JSON: ") + e.what()));
  }
  CompletionRequest cr;
  try {
    cr = parse_completion(body, o_.served_model_name);
  } catch (const ApiError& e) {
    return send_error(res, e);
  }
  const std::string id = next_id();
  const int64_t created = unix_now();
  const int n = cr.params.n;
  std::vector<std::string> rids;
  std::vector<std::shared_ptr<OutputStream>> streams;
  for (size_t i = 0; i < cr.prompts.size(); ++i) {
    rids.push_back(id + "-" + std::to_string(i));
    streams.push_back(loop_.submit(rids.back(), cr.prompts[i].text, cr.prompts[i].ids, cr.params));
  }
  auto abort_all = [this, rids] {
    for (const std::string& r : rids) loop_.abort(r);
  };
  auto choice_text = [&](size_t prompt, const std::string& text) {
    return cr.echo && !cr.prompts[prompt].text.empty() ? cr.prompts[prompt].text + text : text;
  };
  json head = {{"id", id}, {"object", "text_completion"}, {"created", created}, {"model", o_.served_model_name},
               {"system_fingerprint", fingerprint_}};

  if (!cr.stream) {
    std::vector<std::optional<RequestOutput>> finals(streams.size());
    for (size_t i = 0; i < streams.size(); ++i) {
      while (!streams[i]->done()) {
        std::optional<RequestOutput> o = streams[i]->next(1000);
        if (o && o->finished) finals[i] = std::move(o);
      }
      if (!streams[i]->error().empty()) {
        abort_all();
        const std::string msg = streams[i]->error();
        return send_error(res, bad_request(msg, field_of(msg)));
      }
    }
    json choices = json::array();
    Usage usage;
    for (size_t i = 0; i < finals.size(); ++i) {
      const RequestOutput& o = *finals[i];
      if (!o.error.empty()) return send_error(res, bad_request(o.error, "response_format"));
      usage.prompt += int64_t(o.prompt_token_ids.size());
      for (const CompletionOutput& c : o.outputs) {
        usage.completion += int64_t(c.token_ids.size());
        choices.push_back({{"index", int64_t(i) * n + c.index}, {"text", choice_text(i, c.text)}, {"logprobs", nullptr},
                           {"finish_reason", c.finish_reason}});
      }
    }
    json out = head;
    out["choices"] = choices;
    out["usage"] = usage.to_json();
    return send_json(res, 200, out);
  }

  // Streaming: server-sent events, one chunk per output of any prompt; the final output
  // of a request is complete, so only what was not yet sent goes out.
  struct State {
    std::vector<std::vector<size_t>> sent;  // per prompt, per sample: text bytes sent
    std::vector<bool> done;
    Usage usage;
    bool echoed = false, finished = false;
  };
  auto st = std::make_shared<State>();
  st->sent.assign(streams.size(), std::vector<size_t>(size_t(n), 0));
  st->done.assign(streams.size(), false);
  res.set_header("Cache-Control", "no-cache");
  res.set_chunked_content_provider(
      "text/event-stream",
      [st, streams, head, cr, n, abort_all](size_t, httplib::DataSink& sink) {
        auto send = [&](const json& j) {
          const std::string s = "data: " + j.dump(-1, ' ', false, json::error_handler_t::replace) + "\n\n";
          return sink.write(s.data(), s.size());
        };
        auto chunk = [&](json choices) {
          json j = head;
          j["choices"] = std::move(choices);
          return j;
        };
        if (!st->echoed) {
          st->echoed = true;
          if (cr.echo) {
            json choices = json::array();
            for (size_t i = 0; i < streams.size(); ++i)
              for (int k = 0; k < n; ++k)
                if (!cr.prompts[i].text.empty())
                  choices.push_back({{"index", int64_t(i) * n + k}, {"text", cr.prompts[i].text}, {"logprobs", nullptr},
                                     {"finish_reason", nullptr}});
            if (!choices.empty() && !send(chunk(choices))) return abort_all(), false;
          }
        }
        bool all_done = true;
        for (size_t i = 0; i < streams.size(); ++i) {
          if (st->done[i]) continue;
          all_done = false;
          std::optional<RequestOutput> o = streams[i]->next(streams.size() > 1 ? 10 : 200);
          if (!o) {
            if (streams[i]->done()) {
              st->done[i] = true;
              const std::string err = streams[i]->error();
              if (!err.empty()) {
                send(error_body(bad_request(err, field_of(err))));
                abort_all();
                sink.done();
                return true;
              }
            }
            continue;
          }
          if (!o->error.empty()) {
            send(error_body(bad_request(o->error, "response_format")));
            abort_all();
            sink.done();
            return true;
          }
          json choices = json::array();
          for (const CompletionOutput& c : o->outputs) {
            size_t& sent = st->sent[i][size_t(c.index)];
            std::string delta;
            if (o->finished) delta = c.text.size() > sent ? c.text.substr(sent) : std::string();
            else delta = c.text;
            sent += delta.size();
            if (delta.empty() && !o->finished) continue;
            json ch = {{"index", int64_t(i) * n + c.index}, {"text", delta}, {"logprobs", nullptr},
                       {"finish_reason", o->finished ? json(c.finish_reason) : json(nullptr)}};
            choices.push_back(ch);
            if (o->finished) st->usage.completion += int64_t(c.token_ids.size());
          }
          if (o->finished) {
            st->usage.prompt += int64_t(o->prompt_token_ids.size());
            st->done[i] = true;
          }
          if (!choices.empty() && !send(chunk(choices))) return abort_all(), false;
        }
        if (all_done) {
          if (cr.include_usage) {
            json j = chunk(json::array());
            j["usage"] = st->usage.to_json();
            if (!send(j)) return false;
          }
          const std::string end = "data: [DONE]\n\n";
          sink.write(end.data(), end.size());
          sink.done();
        }
        return true;
      },
      [abort_all](bool success) {
        if (!success) abort_all();  // the client went away: free its requests
      });
}

void Server::tokenize(const httplib::Request& req, httplib::Response& res, bool detokenize) {
  const tokenizer::Tokenizer* tok = loop_.engine().tokenizer();
  if (!tok) return send_error(res, bad_request("this model has no tokenizer"));
  json body;
  try {
    body = json::parse(req.body);
  } catch (const json::exception& e) {
    return send_error(res, bad_request(std::string("malformed JSON: ") + e.what()));
  }
  if (!body.is_object()) return send_error(res, bad_request("the request body must be a JSON object"));
  try {
    for (auto it = body.begin(); it != body.end(); ++it) {
      const std::string& k = it.key();
      if (k == "model") {
        if (!it.value().is_string() || it.value().get<std::string>() != o_.served_model_name)
          return send_error(res, {404, "the model does not exist", "invalid_request_error", "model", "model_not_found"});
      } else if (k != (detokenize ? "tokens" : "prompt") && !(k == "add_special_tokens" && !detokenize)) {
        return send_error(res, bad_request("unknown field '" + k + "'", k));
      }
    }
    if (detokenize) {
      if (!body.contains("tokens") || !body["tokens"].is_array())
        return send_error(res, bad_request("'tokens' must be a list of token ids", "tokens"));
      std::vector<int32_t> ids;
      for (const json& t : body["tokens"]) {
        if (!t.is_number_integer()) return send_error(res, bad_request("'tokens' must be a list of token ids", "tokens"));
        ids.push_back(int32_t(t.get<int64_t>()));
      }
      return send_json(res, 200, {{"prompt", tok->decode(ids)}});
    }
    if (!body.contains("prompt") || !body["prompt"].is_string())
      return send_error(res, bad_request("'prompt' must be a string", "prompt"));
    bool special = true;
    if (body.contains("add_special_tokens")) {
      if (!body["add_special_tokens"].is_boolean())
        return send_error(res, bad_request("'add_special_tokens' must be true or false", "add_special_tokens"));
      special = body["add_special_tokens"].get<bool>();
    }
    const std::vector<int32_t> ids = tok->encode(body["prompt"].get<std::string>(), special);
    return send_json(res, 200, {{"tokens", ids}, {"count", ids.size()}, {"max_model_len", loop_.engine().max_model_len()}});
  } catch (const Error& e) {
    return send_error(res, bad_request(e.what(), detokenize ? "tokens" : "prompt"));
  }
}

void Server::metrics(httplib::Response& res) {
  const LoopStats s = loop_.stats();
  std::string t;
  auto metric = [&](const char* name, const char* type, const char* help, int64_t v) {
    t += std::string("# HELP ") + name + " " + help + "\n# TYPE " + name + " " + type + "\n" + name + " " +
         std::to_string(v) + "\n";
  };
  metric("gannet_requests_running", "gauge", "Requests in the engine.", s.running);
  metric("gannet_requests_total", "counter", "Requests accepted by the engine.", s.requests);
  metric("gannet_requests_aborted_total", "counter", "Requests aborted (client gone or asked).", s.aborted);
  metric("gannet_prompt_tokens_total", "counter", "Prompt tokens of finished requests.", s.prompt_tokens);
  metric("gannet_generation_tokens_total", "counter", "Tokens generated by finished requests.", s.generation_tokens);
  metric("gannet_http_requests_total", "counter", "HTTP requests received.", http_requests_.load());
  metric("gannet_http_errors_total", "counter", "HTTP requests answered with an error.", http_errors_.load());
  res.set_content(t, "text/plain; version=0.0.4");
}

int Server::run() {
  http_.new_task_queue = [n = o_.http_threads] { return new httplib::ThreadPool(size_t(n)); };
  http_.set_payload_max_length(o_.max_body_bytes);
  // Clients keep their connections for many requests (the library's default closes one
  // after 5). Idle ones still close after 5 s, which also bounds how long a stop waits.
  http_.set_keep_alive_max_count(1 << 20);
  http_.set_pre_routing_handler([this](const httplib::Request&, httplib::Response&) {
    ++http_requests_;
    return httplib::Server::HandlerResponse::Unhandled;
  });
  http_.set_post_routing_handler([this](const httplib::Request&, httplib::Response& res) {
    if (res.status >= 400) ++http_errors_;
  });
  http_.set_error_handler([](const httplib::Request& req, httplib::Response& res) {
    if (!res.body.empty()) return;
    if (res.status == 404) send_error(res, {404, "no route for " + req.method + " " + req.path, "invalid_request_error", "", ""});
    else if (res.status == 413) send_error(res, {413, "the request body is too large", "invalid_request_error", "", ""});
    else send_error(res, {res.status, "HTTP error " + std::to_string(res.status), "invalid_request_error", "", ""});
  });
  http_.set_exception_handler([](const httplib::Request&, httplib::Response& res, std::exception_ptr ep) {
    std::string what = "internal error";
    try {
      std::rethrow_exception(ep);
    } catch (const std::exception& e) {
      what = e.what();
    } catch (...) {
    }
    send_error(res, {500, what, "server_error", "", ""});
  });
  http_.Get("/health", [](const httplib::Request&, httplib::Response& res) { send_json(res, 200, {{"status", "ok"}}); });
  http_.Get("/v1/models", [this](const httplib::Request& req, httplib::Response& res) {
    if (!authorized(req, res)) return;
    send_json(res, 200,
              {{"object", "list"},
               {"data", json::array({{{"id", o_.served_model_name}, {"object", "model"}, {"created", unix_now()},
                                      {"owned_by", "gannet"}, {"max_model_len", loop_.engine().max_model_len()}}})}});
  });
  http_.Get("/metrics", [this](const httplib::Request& req, httplib::Response& res) {
    if (authorized(req, res)) metrics(res);
  });
  http_.Post("/v1/completions", [this](const httplib::Request& req, httplib::Response& res) {
    if (authorized(req, res)) completions(req, res);
  });
  http_.Post("/tokenize", [this](const httplib::Request& req, httplib::Response& res) {
    if (authorized(req, res)) tokenize(req, res, false);
  });
  http_.Post("/detokenize", [this](const httplib::Request& req, httplib::Response& res) {
    if (authorized(req, res)) tokenize(req, res, true);
  });
  // The library listens with a backlog of 5, which drops connections when hundreds of
  // clients connect at once: listening again on the same socket raises it.
  int listen_fd = -1;
  http_.set_socket_options([&listen_fd](socket_t sock) {
    httplib::default_socket_options(sock);
    listen_fd = int(sock);
  });
  int port = o_.port;
  if (port == 0) port = http_.bind_to_any_port(o_.host.c_str());
  else if (!http_.bind_to_port(o_.host.c_str(), port)) port = -1;
  if (port >= 0 && listen_fd >= 0) ::listen(listen_fd, 4096);
  if (port < 0) {
    std::fprintf(stderr, "gannet serve: cannot listen on %s:%d\n", o_.host.c_str(), o_.port);
    return 1;
  }
  std::printf("gannet serve: model '%s' listening on http://%s:%d\n", o_.served_model_name.c_str(), o_.host.c_str(), port);
  std::fflush(stdout);
  return http_.listen_after_bind() ? 0 : 1;
}

std::atomic<Server*> g_server{nullptr};

extern "C" void on_signal(int) {
  if (Server* s = g_server.load()) s->stop();
}

}  // namespace

int serve(const EngineArgs& engine_args, const ServerOptions& options) {
  ServerOptions o = options;
  if (o.served_model_name.empty()) {
    std::filesystem::path p = std::filesystem::path(engine_args.model).lexically_normal();
    if (p.filename().empty()) p = p.parent_path();
    o.served_model_name = p.filename().string();
  }
  if (o.served_model_name.empty()) o.served_model_name = engine_args.model;
  Server server(std::make_unique<engine::Engine>(engine_args), o);
  g_server = &server;
  std::signal(SIGINT, on_signal);
  std::signal(SIGTERM, on_signal);
  const int rc = server.run();
  g_server = nullptr;
  return rc;
}

}  // namespace gannet::server
