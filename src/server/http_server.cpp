#include "server/http_server.h"

#include <httplib.h>

#include <algorithm>
#include <atomic>
#include <cctype>
#include <chrono>
#include <csignal>
#include <cstdio>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <condition_variable>
#include <mutex>
#include <optional>
#include <sys/socket.h>
#include <thread>

#include "core/cpu_features.h"
#include "core/error.h"
#include "engine/engine.h"
#include "git_revision.h"
#include "chat/chat_format.h"
#include "chat/output_parser.h"
#include "structured/tool_grammar.h"
#include "server/anthropic_request.h"
#include "server/engine_loop.h"
#include "server/responses_request.h"
#include "server/openai_request.h"
#include "server/openai_response.h"

namespace gannet::server {

using chat::ChatFormat;
using chat::ChatDelta;
using chat::ChatOutputParser;

namespace {

using json = nlohmann::json;
using ojson = nlohmann::ordered_json;

void send_json(httplib::Response& res, int status, const json& body) {
  res.status = status;
  res.set_content(body.dump(-1, ' ', false, json::error_handler_t::replace), "application/json");
}

void send_error(httplib::Response& res, const ApiError& e) { send_json(res, e.status, error_body(e)); }

// A stream with nothing to say for this long gets an SSE comment (": keep-alive"), which
// clients ignore: a request queued behind hundreds of others keeps its connection through
// clients' and proxies' read timeouts.
constexpr std::chrono::seconds kKeepAlive{15};

// Writes an SSE keep-alive comment when `last` is older than kKeepAlive; false when the
// client is gone.
bool keep_alive(httplib::DataSink& sink, std::chrono::steady_clock::time_point& last) {
  const auto now = std::chrono::steady_clock::now();
  if (now - last < kKeepAlive) return true;
  last = now;
  static const std::string comment = ": keep-alive\n\n";
  return sink.write(comment.data(), comment.size());
}

// One server-sent event "data: JSON"; `last` records the write for keep_alive.
bool send_event(httplib::DataSink& sink, const json& j, std::chrono::steady_clock::time_point& last) {
  const std::string s = "data: " + j.dump(-1, ' ', false, json::error_handler_t::replace) + "\n\n";
  last = std::chrono::steady_clock::now();
  return sink.write(s.data(), s.size());
}

void send_done(httplib::DataSink& sink) {
  static const std::string end = "data: [DONE]\n\n";
  sink.write(end.data(), end.size());
  sink.done();
}

// A stream chunk: the response's head fields plus these choices.
json with_choices(const json& head, json choices) {
  json j = head;
  j["choices"] = std::move(choices);
  return j;
}

int64_t unix_now() {
  return std::chrono::duration_cast<std::chrono::seconds>(std::chrono::system_clock::now().time_since_epoch()).count();
}

// The body as JSON with key order kept, or a 400 naming the problem.
std::optional<ojson> parse_body(const httplib::Request& req, httplib::Response& res);

// A non-streamed request's final output, waiting for it; nullopt with `error` set when
// the request failed.
std::optional<RequestOutput> wait_final(OutputStream& stream, std::string& error) {
  std::optional<RequestOutput> fin;
  while (!stream.done()) {
    std::optional<RequestOutput> o = stream.next(1000);
    if (o && o->finished) fin = std::move(o);
  }
  error = stream.error();
  if (!error.empty()) return std::nullopt;
  return fin;
}

// A streamed sample's new text through its chat output parser: running outputs carry the
// new text, the final one the whole text (only what was not sent yet is fed, `sent`
// counts it) and flushes the parser. A malformed tool-call block counts in `failures`.
ChatDelta next_delta(const CompletionOutput& c, bool finished, size_t& sent, ChatOutputParser& parser,
                     std::atomic<int64_t>& failures) {
  std::string piece;
  if (finished) piece = c.text.size() > sent ? c.text.substr(sent) : std::string();
  else piece = c.text;
  sent += piece.size();
  ChatDelta d = parser.feed(piece);
  if (finished) {
    ChatDelta tail = parser.finish();
    d.reasoning += tail.reasoning;
    d.content += tail.content;
    d.tool_calls.insert(d.tool_calls.end(), tail.tool_calls.begin(), tail.tool_calls.end());
    if (parser.malformed()) ++failures;
  }
  return d;
}

// What prepare_chat makes of a chat request: shared by /v1/chat/completions and
// /v1/messages.
struct PreparedChat {
  std::string prompt;                    // as rendered by the chat format
  std::vector<int32_t> ids;              // its tokens (image markers as placeholder ids)
  std::vector<vision::RgbImage> images;  // decoded image parts, in order
  bool want_tools = false;               // tool calls are read back from the output
  bool reasoning = false;                // the prompt opened a reasoning block
};

class Server {
 public:
  Server(std::unique_ptr<engine::Engine> engine, ServerOptions o, ChatFormat chat, Collective* group)
      : o_(std::move(o)), loop_(std::move(engine), group), chat_(std::move(chat)),
        fingerprint_(std::string("gannet-") + GANNET_GIT_REVISION + "-" + kernel_path_name()) {}

  int run();
  void stop() { http_.stop(); }
  bool running() const { return http_.is_running(); }
  const engine::Engine& engine() const { return loop_.engine(); }

 private:
  // --api-key: "Authorization: Bearer KEY" or (Anthropic's clients) "x-api-key: KEY".
  bool authorized(const httplib::Request& req, httplib::Response& res, bool anthropic = false);
  void completions(const httplib::Request& req, httplib::Response& res);
  void chat_completions(const httplib::Request& req, httplib::Response& res);
  // A chat request made ready to run (images decoded, prompt rendered and encoded, tool
  // grammar set, max_tokens checked against the context), or the error to answer with.
  std::optional<ApiError> prepare_chat(ChatRequest& cr, PreparedChat& out);
  void tokenize(const httplib::Request& req, httplib::Response& res, bool detokenize);
  // POST /v1/messages and /v1/messages/count_tokens (Anthropic's Messages API).
  void messages(const httplib::Request& req, httplib::Response& res);
  void count_tokens(const httplib::Request& req, httplib::Response& res);
  // POST /v1/responses (OpenAI's Responses API, stateless).
  void responses(const httplib::Request& req, httplib::Response& res);
  void metrics(httplib::Response& res);
  std::string next_id() { return "cmpl-" + std::to_string(++ids_); }

  ServerOptions o_;
  EngineLoop loop_;
  ChatFormat chat_;
  std::string fingerprint_;
  httplib::Server http_;
  std::atomic<int64_t> ids_{0};
  std::atomic<int64_t> http_requests_{0}, http_errors_{0};
  std::atomic<int64_t> tool_parse_failures_{0};
};

// A message's tool calls as OpenAI writes them, from the parser's deltas joined by index.
struct ToolCalls {
  json list = json::array();
  void add(const chat::ToolCallDelta& d) {
    if (d.index >= list.size())
      list.push_back({{"id", d.id}, {"type", "function"}, {"function", {{"name", d.name}, {"arguments", ""}}}});
    list[d.index]["function"]["arguments"] = list[d.index]["function"]["arguments"].get<std::string>() + d.arguments;
  }
};

// A stream delta's tool calls: one entry per call index, id / type / name on its first.
json tool_call_deltas(const std::vector<chat::ToolCallDelta>& ds, bool parallel) {
  json out = json::array();
  for (const chat::ToolCallDelta& d : ds) {
    if (!parallel && d.index > 0) continue;  // parallel_tool_calls: false keeps the first call
    if (out.empty() || out.back()["index"] != d.index) {
      json e = {{"index", d.index}};
      if (!d.name.empty()) e["id"] = d.id, e["type"] = "function";
      e["function"] = d.name.empty() ? json{{"arguments", d.arguments}} : json{{"name", d.name}, {"arguments", d.arguments}};
      out.push_back(e);
    } else {
      json& f = out.back()["function"];
      f["arguments"] = f["arguments"].get<std::string>() + d.arguments;
    }
  }
  return out;
}

bool Server::authorized(const httplib::Request& req, httplib::Response& res, bool anthropic) {
  if (o_.api_key.empty()) return true;
  if (req.get_header_value("Authorization") == "Bearer " + o_.api_key) return true;
  if (req.has_header("x-api-key") && req.get_header_value("x-api-key") == o_.api_key) return true;
  const ApiError e{401, "invalid API key", "authentication_error", "", "invalid_api_key"};
  if (anthropic) send_json(res, 401, anthropic_error_body(e));
  else send_error(res, e);
  return false;
}

std::optional<ojson> parse_body(const httplib::Request& req, httplib::Response& res) {
  try {
    return ojson::parse(req.body);
  } catch (const ojson::exception& e) {
    send_error(res, bad_request(std::string("malformed JSON: ") + e.what()));
    return std::nullopt;
  }
}

void Server::completions(const httplib::Request& req, httplib::Response& res) {
  std::optional<ojson> body = parse_body(req, res);
  if (!body) return;
  CompletionRequest cr;
  try {
    cr = parse_completion(*body, o_.served_model_name);
    if (cr.echo && cr.params.logprobs) throw bad_request("'echo' together with 'logprobs' is not supported", "echo");
  } catch (const ApiError& e) {
    return send_error(res, e);
  }
  const tokenizer::Tokenizer* tok = loop_.engine().tokenizer();
  const bool want_lp = cr.params.logprobs.has_value();
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
      usage.cached += o.metrics.cached_tokens;
      for (const CompletionOutput& c : o.outputs) {
        usage.completion += int64_t(c.token_ids.size());
        choices.push_back({{"index", int64_t(i) * n + c.index},
                           {"text", choice_text(i, c.text)},
                           {"logprobs", want_lp ? completion_logprobs(c.logprobs, tok, 0) : json(nullptr)},
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
    std::vector<std::vector<size_t>> sent_lp;  // per prompt, per sample: logprob positions sent
    std::vector<std::vector<size_t>> lp_offset;  // per prompt, per sample: text_offset of the next token
    std::vector<bool> done;
    Usage usage;
    bool echoed = false, finished = false;
    std::chrono::steady_clock::time_point last_write = std::chrono::steady_clock::now();
  };
  auto st = std::make_shared<State>();
  st->sent.assign(streams.size(), std::vector<size_t>(size_t(n), 0));
  st->sent_lp = st->sent;
  st->lp_offset = st->sent;
  st->done.assign(streams.size(), false);
  res.set_header("Cache-Control", "no-cache");
  res.set_chunked_content_provider(
      "text/event-stream",
      [st, streams, head, cr, n, abort_all, tok, want_lp](size_t, httplib::DataSink& sink) {
        auto send = [&](const json& j) { return send_event(sink, j, st->last_write); };
        auto chunk = [&](json choices) { return with_choices(head, std::move(choices)); };
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
            size_t& sent_lp = st->sent_lp[i][size_t(c.index)];
            std::string delta;
            if (o->finished) delta = c.text.size() > sent ? c.text.substr(sent) : std::string();
            else delta = c.text;
            const size_t lp_from = o->finished ? std::min(sent_lp, c.logprobs.size()) : 0;
            std::span<const PositionLogprobs> lps(c.logprobs.data() + lp_from, c.logprobs.size() - lp_from);
            size_t& lp_offset = st->lp_offset[i][size_t(c.index)];
            sent += delta.size();
            sent_lp += lps.size();
            if (delta.empty() && lps.empty() && !o->finished) continue;
            json ch = {{"index", int64_t(i) * n + c.index},
                       {"text", delta},
                       {"logprobs", want_lp ? completion_logprobs(lps, tok, lp_offset, &lp_offset) : json(nullptr)},
                       {"finish_reason", o->finished ? json(c.finish_reason) : json(nullptr)}};
            choices.push_back(ch);
            if (o->finished) st->usage.completion += int64_t(c.token_ids.size());
          }
          if (o->finished) {
            st->usage.prompt += int64_t(o->prompt_token_ids.size());
            st->usage.cached += o->metrics.cached_tokens;
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
          send_done(sink);
          return true;
        }
        if (!keep_alive(sink, st->last_write)) return abort_all(), false;
        return true;
      },
      [abort_all](bool success) {
        if (!success) abort_all();  // the client went away: free its requests
      });
}

std::optional<ApiError> Server::prepare_chat(ChatRequest& cr, PreparedChat& out) {
  if (!loop_.engine().tokenizer()) return bad_request("this model has no tokenizer, so it cannot chat");
  if (!chat_.available())
    return bad_request("this model has no chat template (start the server with --chat-template FILE)", "messages");
  // Images (image_url parts): decoded here, before anything is queued; a vision model's
  // encoder places one image marker per part, expanded by the engine to the image's span.
  if (!cr.images.empty()) {
    const engine::Engine& eng = loop_.engine();
    if (eng.image_token_id() < 0 || chat_.deepseek() != chat::DeepseekVersion::kV41)
      return bad_request(cr.images[0].first + ": this model takes no images (no vision tower)", "messages");
    if (loop_.ranks() > 1)
      return bad_request(cr.images[0].first + ": images are not served by a data-parallel (mpirun) server yet",
                                         "messages");
    if (int64_t(cr.images.size()) > eng.args().limit_images_per_prompt)
      return bad_request(std::to_string(cr.images.size()) + " images, more than --limit-images-per-prompt " +
                                             std::to_string(eng.args().limit_images_per_prompt),
                                         "messages");
    vision::DecodeLimits limits;
    limits.max_pixels = eng.args().max_image_pixels;
    try {
      for (const auto& [field, url] : cr.images) out.images.push_back(vision::decode_data_url(url, field, limits));
    } catch (const Error& e) {
      return bad_request(e.what(), "messages");
    }
  }
  out.want_tools = !cr.chat.tools.is_null() && cr.tool_choice != "none";  // calls read back
  if (out.want_tools && !chat_.reads_tool_calls())
    return bad_request("'tools': gannet reads no tool calls back from this chat format (" + chat_.origin() +
                                       "; it reads DeepSeek-V4 / V4.1 DSML, Qwen's <tool_call> and Llama 3's JSON calls)",
                                       "tools");
  const bool forced = out.want_tools && cr.tool_choice != "auto";  // "required" or a named function
  if (forced && cr.params.structured.active())
    return bad_request("'tool_choice' " + (cr.tool_choice == "function" ? "naming a function" : std::string("\"required\"")) +
                                       " constrains the output to a call, so it cannot be combined with response_format / structured",
                                       "tool_choice");
  if (cr.reasoning_effort_given) {
    if (!chat_.deepseek())
      return bad_request("'reasoning_effort': this model's chat template has no reasoning-effort setting",
                                         "reasoning_effort");
    // Effort applies to thinking: it turns thinking on unless the request turned it off.
    const ojson& kw = cr.chat.kwargs;
    for (const char* k : {"thinking", "enable_thinking"})
      if (kw.contains(k) && kw[k] == false)
        return bad_request(std::string("'reasoning_effort' needs thinking, and chat_template_kwargs.") + k +
                                           " is false", "reasoning_effort");
    if (kw.contains("thinking_mode") && kw["thinking_mode"] == "chat")
      return bad_request("'reasoning_effort' needs thinking, and chat_template_kwargs.thinking_mode is "
                                         "\"chat\"", "reasoning_effort");
    if (!kw.contains("thinking") && !kw.contains("enable_thinking") && !kw.contains("thinking_mode"))
      cr.chat.kwargs["thinking"] = true;
  }
  try {
    // DeepSeek-V4.1's encoder takes content parts itself (joined by blank lines).
    const bool raw = chat_.deepseek() == chat::DeepseekVersion::kV41;
    out.prompt = chat_.render(raw ? cr.raw_messages : cr.messages, cr.chat, &out.reasoning);
    // The template writes BOS itself; a vision model's image markers become placeholder ids.
    out.ids = loop_.engine().encode_with_image_markers(out.prompt, /*add_special_tokens=*/false);
    const int64_t markers = std::count(out.ids.begin(), out.ids.end(), int32_t(loop_.engine().image_token_id()));
    if (!out.images.empty() && markers != int64_t(out.images.size()))
      return bad_request("the chat encoder placed " + std::to_string(markers) + " image(s) for " +
                                             std::to_string(out.images.size()) + " image part(s)",
                                         "messages");
  } catch (const Error& e) {
    const std::string m = e.what();
    return bad_request(m, m.find("reasoning_effort") != std::string::npos ? "reasoning_effort" : "messages");
  }
  if (out.ids.empty()) return bad_request("the chat template rendered an empty prompt", "messages");
  // With thinking on, a request's grammar holds for the answer, after the reasoning ends.
  if (out.reasoning && cr.params.structured.active() && cr.params.structured.trigger.empty())
    cr.params.structured.trigger = "</think>";
  // Constrained calls: "required" / a named function make the answer (after the reasoning,
  // when thinking) exactly a call block; under "auto" a block the model opens is held to
  // the tools' schemas from its first tag on. A request's own grammar wins under "auto".
  if (out.want_tools && (forced || !cr.params.structured.active())) {
    ojson tools = ojson::array();
    for (const ojson& tool : cr.chat.tools)
      if (!forced || cr.tool_choice == "required" || tool["function"]["name"] == cr.tool_name) tools.push_back(tool);
    // A named function is called once (as OpenAI and vLLM do), whatever parallel_tool_calls says.
    const bool several = cr.parallel_tool_calls && cr.tool_name.empty();
    const std::optional<ChatFormat::ToolGrammar> tg = chat_.tool_grammar(tools, several, forced, out.prompt);
    StructuredOutput& so = cr.params.structured;
    if (tg) {  // none for "auto" with a family whose calls no marker opens (Llama)
      so.kind = StructuredOutput::Kind::kToolCalls;
      so.spec = tg->spec;
      so.trigger = tg->trigger;
      try {  // a schema the grammar cannot take is the request's fault: say so now
        (void)structured::compile_tool_calls(so.spec);
      } catch (const Error& e) {
        return bad_request(std::string("'tools': ") + e.what(), "tools");
      }
    }
  }
  const int64_t ctx = loop_.engine().max_model_len();
  if (!cr.max_tokens_given)  // OpenAI's default: as much as the context leaves
    cr.params.max_tokens = std::max<int64_t>(1, ctx - int64_t(out.ids.size()));
  // Refused here, before a stream starts (the engine would refuse it too, mid-stream).
  if (int64_t(out.ids.size()) + cr.params.max_tokens > ctx)
    return bad_request("the conversation is " + std::to_string(out.ids.size()) + " tokens and max_tokens " +
                                           std::to_string(cr.params.max_tokens) + ": more than the context of " +
                                           std::to_string(ctx) + " tokens (max_model_len)",
                                       cr.max_tokens_given ? "max_tokens" : "messages");
  return std::nullopt;
}

void Server::chat_completions(const httplib::Request& req, httplib::Response& res) {
  std::optional<ojson> body = parse_body(req, res);
  if (!body) return;
  ChatRequest cr;
  try {
    cr = parse_chat(*body, o_.served_model_name);
  } catch (const ApiError& e) {
    return send_error(res, e);
  }
  const tokenizer::Tokenizer* tok = loop_.engine().tokenizer();
  PreparedChat pc;
  if (std::optional<ApiError> e = prepare_chat(cr, pc)) return send_error(res, *e);
  const std::string& prompt = pc.prompt;
  const std::vector<int32_t>& ids = pc.ids;
  const bool want_tools = pc.want_tools, reasoning = pc.reasoning;
  const std::string id = "chatcmpl-" + std::to_string(++ids_);
  const int64_t created = unix_now();
  std::shared_ptr<OutputStream> stream = loop_.submit(id, "", ids, cr.params, std::move(pc.images));
  const bool want_lp = cr.logprobs;
  // Tool calls are read back when the request has tools; call ids are unique per response.
  auto parser_options = [&](int64_t choice) {
    ChatOutputParser::Options po = chat_.output_options(prompt, want_tools);
    po.id_prefix = "call_" + id.substr(id.find('-') + 1) + "_" + std::to_string(choice) + "_";
    return po;
  };
  json head = {{"id", id}, {"object", "chat.completion"}, {"created", created}, {"model", o_.served_model_name},
               {"system_fingerprint", fingerprint_}};

  if (!cr.stream) {
    std::string err;
    std::optional<RequestOutput> fin = wait_final(*stream, err);
    if (!err.empty()) return send_error(res, bad_request(err, field_of(err)));
    if (!fin) return send_error(res, {500, "the request ended without an output", "server_error", "", ""});
    if (!fin->error.empty()) return send_error(res, bad_request(fin->error, "response_format"));
    json choices = json::array();
    Usage usage;
    usage.prompt = int64_t(fin->prompt_token_ids.size());
    usage.cached = fin->metrics.cached_tokens;
    for (const CompletionOutput& c : fin->outputs) {
      usage.completion += int64_t(c.token_ids.size());
      json msg = {{"role", "assistant"}};
      ChatOutputParser parser(parser_options(c.index));
      std::string r, content;
      ToolCalls calls;
      for (const ChatDelta& d : {parser.feed(c.text), parser.finish()}) {
        r += d.reasoning;
        content += d.content;
        for (const chat::ToolCallDelta& t : d.tool_calls)
          if (cr.parallel_tool_calls || t.index == 0) calls.add(t);
      }
      if (parser.malformed()) ++tool_parse_failures_;
      msg["content"] = parser.in_reasoning() || (content.empty() && !calls.list.empty()) ? json(nullptr) : json(content);
      if (reasoning || !r.empty()) msg["reasoning_content"] = r;
      if (!calls.list.empty()) msg["tool_calls"] = calls.list;
      const std::string finish = !calls.list.empty() && c.finish_reason == "stop" ? "tool_calls" : c.finish_reason;
      choices.push_back({{"index", c.index},
                         {"message", msg},
                         {"logprobs", want_lp ? chat_logprobs(c.logprobs, tok) : json(nullptr)},
                         {"finish_reason", finish}});
    }
    json out = head;
    out["choices"] = choices;
    out["usage"] = usage.to_json();
    return send_json(res, 200, out);
  }

  // Streaming: a first chunk per choice with the role, then content (or reasoning) deltas,
  // the last with finish_reason, then usage when asked, then [DONE].
  struct State {
    std::vector<size_t> sent, sent_lp;  // per sample: text bytes, logprob positions sent
    std::vector<ChatOutputParser> split;
    bool started = false;
    Usage usage;
    std::chrono::steady_clock::time_point last_write = std::chrono::steady_clock::now();
  };
  const int n = int(cr.params.n);
  auto st = std::make_shared<State>();
  st->sent.assign(size_t(n), 0);
  st->sent_lp.assign(size_t(n), 0);
  for (int k = 0; k < n; ++k) st->split.emplace_back(parser_options(k));
  head["object"] = "chat.completion.chunk";
  res.set_header("Cache-Control", "no-cache");
  res.set_chunked_content_provider(
      "text/event-stream",
      [st, stream, head, id, n, tok, want_lp, include_usage = cr.include_usage, parallel = cr.parallel_tool_calls,
       this](size_t, httplib::DataSink& sink) {
        auto send = [&](const json& j) { return send_event(sink, j, st->last_write); };
        auto chunk = [&](json choices) { return with_choices(head, std::move(choices)); };
        if (!st->started) {
          st->started = true;
          json choices = json::array();
          for (int k = 0; k < n; ++k)
            choices.push_back({{"index", k}, {"delta", {{"role", "assistant"}, {"content", ""}}}, {"logprobs", nullptr},
                               {"finish_reason", nullptr}});
          if (!send(chunk(choices))) return loop_.abort(id), false;
        }
        std::optional<RequestOutput> o = stream->next(200);
        if (!o) {
          if (stream->done()) {
            const std::string err = stream->error();
            if (!err.empty()) send(error_body(bad_request(err, field_of(err))));
            sink.done();
            return true;
          }
          if (!keep_alive(sink, st->last_write)) return loop_.abort(id), false;
          return true;
        }
        if (!o->error.empty()) {
          send(error_body(bad_request(o->error, "response_format")));
          sink.done();
          return true;
        }
        json choices = json::array();
        for (const CompletionOutput& c : o->outputs) {
          const size_t k = size_t(c.index);
          const size_t lp_from = o->finished ? std::min(st->sent_lp[k], c.logprobs.size()) : 0;
          std::span<const PositionLogprobs> lps(c.logprobs.data() + lp_from, c.logprobs.size() - lp_from);
          st->sent_lp[k] += lps.size();
          const ChatDelta d = next_delta(c, o->finished, st->sent[k], st->split[k], tool_parse_failures_);
          json delta = json::object();
          if (!d.reasoning.empty()) delta["reasoning_content"] = d.reasoning;
          if (!d.content.empty()) delta["content"] = d.content;
          const json calls = tool_call_deltas(d.tool_calls, parallel);
          if (!calls.empty()) delta["tool_calls"] = calls;
          if (delta.empty() && lps.empty() && !o->finished) continue;
          std::string finish = c.finish_reason;
          if (o->finished && st->split[k].tool_calls() > 0 && finish == "stop") finish = "tool_calls";
          choices.push_back({{"index", c.index},
                             {"delta", delta},
                             {"logprobs", want_lp ? chat_logprobs(lps, tok) : json(nullptr)},
                             {"finish_reason", o->finished ? json(finish) : json(nullptr)}});
          if (o->finished) st->usage.completion += int64_t(c.token_ids.size());
        }
        if (!choices.empty() && !send(chunk(choices))) return loop_.abort(id), false;
        if (o->finished) {
          st->usage.prompt = int64_t(o->prompt_token_ids.size());
          st->usage.cached = o->metrics.cached_tokens;
          if (include_usage) {
            json j = chunk(json::array());
            j["usage"] = st->usage.to_json();
            if (!send(j)) return false;
          }
          send_done(sink);
        }
        return true;
      },
      [this, id](bool success) {
        if (!success) loop_.abort(id);  // the client went away: free its request
      });
}

// Anthropic's Messages API. The request is rewritten as a chat request
// (anthropic_request.h) and prepared as /v1/chat/completions prepares one; the output
// parser's reasoning, text and tool calls become thinking, text and tool_use blocks, in
// the order the model wrote them.
namespace {

void send_anthropic_error(httplib::Response& res, const ApiError& e) { send_json(res, e.status, anthropic_error_body(e)); }

// One server-sent event as Anthropic writes them: "event: TYPE" then "data: JSON".
bool send_named_event(httplib::DataSink& sink, const json& j, std::chrono::steady_clock::time_point& last) {
  const std::string s = "event: " + j["type"].get<std::string>() + "\ndata: " +
                        j.dump(-1, ' ', false, json::error_handler_t::replace) + "\n\n";
  last = std::chrono::steady_clock::now();
  return sink.write(s.data(), s.size());
}

// stop_reason and stop_sequence of a finished sample.
std::pair<std::string, json> anthropic_stop(const CompletionOutput& c, bool called) {
  if (called && c.finish_reason == "stop") return {"tool_use", nullptr};
  if (c.finish_reason == "length") return {"max_tokens", nullptr};
  if (const std::string* s = std::get_if<std::string>(&c.stop_reason)) return {"stop_sequence", *s};
  return {"end_turn", nullptr};
}

json anthropic_usage(int64_t prompt, int64_t cached, int64_t output) {
  return {{"input_tokens", prompt - cached},
          {"cache_creation_input_tokens", 0},
          {"cache_read_input_tokens", cached},
          {"output_tokens", output}};
}

// A tool call's arguments (JSON text) as tool_use input; text that is not a JSON object
// (a malformed call) becomes {}.
json tool_input(const std::string& arguments) {
  json j = json::parse(arguments, nullptr, false);
  return j.is_object() ? j : json::object();
}

}  // namespace

void Server::count_tokens(const httplib::Request& req, httplib::Response& res) {
  std::optional<ojson> body;
  try {
    body = ojson::parse(req.body);
  } catch (const ojson::exception& e) {
    return send_anthropic_error(res, bad_request(std::string("malformed JSON: ") + e.what()));
  }
  try {
    MessagesRequest mr = parse_messages(*body, o_.served_model_name, /*count_tokens=*/true);
    PreparedChat pc;
    if (std::optional<ApiError> e = prepare_chat(mr.chat, pc)) return send_anthropic_error(res, *e);
    return send_json(res, 200, {{"input_tokens", pc.ids.size()}});
  } catch (const ApiError& e) {
    return send_anthropic_error(res, e);
  }
}

void Server::messages(const httplib::Request& req, httplib::Response& res) {
  std::optional<ojson> body;
  try {
    body = ojson::parse(req.body);
  } catch (const ojson::exception& e) {
    return send_anthropic_error(res, bad_request(std::string("malformed JSON: ") + e.what()));
  }
  MessagesRequest mr;
  try {
    mr = parse_messages(*body, o_.served_model_name, /*count_tokens=*/false);
  } catch (const ApiError& e) {
    return send_anthropic_error(res, e);
  }
  ChatRequest& cr = mr.chat;
  PreparedChat pc;
  if (std::optional<ApiError> e = prepare_chat(cr, pc)) return send_anthropic_error(res, *e);
  const std::string id = "msg_" + std::to_string(++ids_);
  const int64_t prompt_tokens = int64_t(pc.ids.size());
  std::shared_ptr<OutputStream> stream = loop_.submit(id, "", pc.ids, cr.params, std::move(pc.images));
  ChatOutputParser::Options po = chat_.output_options(pc.prompt, pc.want_tools);
  po.id_prefix = "toolu_" + id.substr(4) + "_";
  const bool parallel = cr.parallel_tool_calls;
  const json message = {{"id", id},           {"type", "message"},         {"role", "assistant"},
                        {"model", o_.served_model_name}, {"content", json::array()}, {"stop_reason", nullptr},
                        {"stop_sequence", nullptr}};

  if (!cr.stream) {
    std::string err;
    std::optional<RequestOutput> fin = wait_final(*stream, err);
    if (!err.empty()) return send_anthropic_error(res, bad_request(err, field_of(err)));
    if (!fin || fin->outputs.empty()) return send_anthropic_error(res, {500, "the request ended without an output", "", "", ""});
    if (!fin->error.empty()) return send_anthropic_error(res, bad_request(fin->error, "structured"));
    const CompletionOutput& c = fin->outputs[0];
    ChatOutputParser parser(po);
    json content = json::array();
    // Blocks in the order written: consecutive text of one kind joins one block.
    auto append = [&](const std::string& kind, const std::string& text) {
      if (text.empty()) return;
      const char* field = kind == "thinking" ? "thinking" : "text";
      if (!content.empty() && content.back()["type"] == kind) {
        content.back()[field] = content.back()[field].get<std::string>() + text;
        return;
      }
      json b = {{"type", kind}, {field, text}};
      if (kind == "thinking") b["signature"] = "";
      content.push_back(b);
    };
    ToolCalls calls;
    size_t calls_placed = 0;
    for (const ChatDelta& d : {parser.feed(c.text), parser.finish()}) {
      append("thinking", d.reasoning);
      append("text", d.content);
      for (const chat::ToolCallDelta& t : d.tool_calls)
        if (parallel || t.index == 0) calls.add(t);
    }
    if (parser.malformed()) ++tool_parse_failures_;
    for (; calls_placed < calls.list.size(); ++calls_placed) {
      const json& f = calls.list[calls_placed];
      content.push_back({{"type", "tool_use"},
                         {"id", f["id"]},
                         {"name", f["function"]["name"]},
                         {"input", tool_input(f["function"]["arguments"].get<std::string>())}});
    }
    if (pc.reasoning && (content.empty() || content[0]["type"] != "thinking"))
      content.insert(content.begin(), json{{"type", "thinking"}, {"thinking", ""}, {"signature", ""}});
    const auto [stop, stop_seq] = anthropic_stop(c, !calls.list.empty());
    json out = message;
    out["content"] = content;
    out["stop_reason"] = stop;
    out["stop_sequence"] = stop_seq;
    out["usage"] = anthropic_usage(prompt_tokens, fin->metrics.cached_tokens, int64_t(c.token_ids.size()));
    return send_json(res, 200, out);
  }

  // Streaming: message_start (sent with the first output, when the cached prompt tokens
  // are known), then per block content_block_start / _delta / _stop, then message_delta
  // with stop_reason and usage, then message_stop.
  struct State {
    bool started = false;
    int block = -1;    // index of the open block, -1 before the first
    std::string kind;  // "thinking", "text", "tool_use" or "" (none open)
    size_t tool = 0;   // the open tool_use block's call index
    size_t sent = 0;   // text bytes taken from the outputs
    int64_t calls = 0;
    int64_t cached = 0;
    std::chrono::steady_clock::time_point last_write = std::chrono::steady_clock::now();
  };
  auto st = std::make_shared<State>();
  auto parser = std::make_shared<ChatOutputParser>(po);
  res.set_header("Cache-Control", "no-cache");
  res.set_chunked_content_provider(
      "text/event-stream",
      [st, parser, stream, message, id, prompt_tokens, parallel, reasoning = pc.reasoning, this](size_t,
                                                                                                 httplib::DataSink& sink) {
        auto send = [&](const json& j) { return send_named_event(sink, j, st->last_write); };
        auto close_block = [&]() {
          if (st->kind.empty()) return true;
          st->kind.clear();
          return send({{"type", "content_block_stop"}, {"index", st->block}});
        };
        auto open_block = [&](const json& block) {
          if (!close_block()) return false;
          st->kind = block["type"].get<std::string>();
          return send({{"type", "content_block_start"}, {"index", ++st->block}, {"content_block", block}});
        };
        auto text = [&](const std::string& kind, const std::string& piece) {
          if (piece.empty()) return true;
          if (st->kind != kind) {
            json b = kind == "thinking" ? json{{"type", "thinking"}, {"thinking", ""}, {"signature", ""}}
                                        : json{{"type", "text"}, {"text", ""}};
            if (!open_block(b)) return false;
          }
          const json delta = kind == "thinking" ? json{{"type", "thinking_delta"}, {"thinking", piece}}
                                                : json{{"type", "text_delta"}, {"text", piece}};
          return send({{"type", "content_block_delta"}, {"index", st->block}, {"delta", delta}});
        };
        std::optional<RequestOutput> o = stream->next(200);
        if (!o) {
          if (stream->done()) {
            const std::string err = stream->error();
            if (!err.empty()) send(anthropic_error_body(bad_request(err, field_of(err))));
            sink.done();
            return true;
          }
          if (!keep_alive(sink, st->last_write)) return loop_.abort(id), false;
          return true;
        }
        if (!o->error.empty()) {
          send(anthropic_error_body(bad_request(o->error, "structured")));
          sink.done();
          return true;
        }
        if (!st->started) {
          st->started = true;
          st->cached = o->metrics.cached_tokens;
          json m = message;
          m["usage"] = anthropic_usage(prompt_tokens, st->cached, 0);
          if (!send({{"type", "message_start"}, {"message", m}})) return loop_.abort(id), false;
          // A prompt that opened the reasoning block: the answer starts with a thinking block.
          if (reasoning && !open_block({{"type", "thinking"}, {"thinking", ""}, {"signature", ""}}))
            return loop_.abort(id), false;
        }
        if (o->outputs.empty()) return true;
        const CompletionOutput& c = o->outputs[0];
        const ChatDelta d = next_delta(c, o->finished, st->sent, *parser, tool_parse_failures_);
        bool ok = text("thinking", d.reasoning) && text("text", d.content);
        for (const chat::ToolCallDelta& t : d.tool_calls) {
          if (!ok) break;
          if (!parallel && t.index > 0) continue;
          if (st->kind != "tool_use" || st->tool != t.index) {
            st->tool = t.index;
            ++st->calls;
            ok = open_block({{"type", "tool_use"}, {"id", t.id}, {"name", t.name}, {"input", json::object()}});
          }
          if (ok && !t.arguments.empty())
            ok = send({{"type", "content_block_delta"},
                       {"index", st->block},
                       {"delta", {{"type", "input_json_delta"}, {"partial_json", t.arguments}}}});
        }
        if (!ok) return loop_.abort(id), false;
        if (o->finished) {
          const auto [stop, stop_seq] = anthropic_stop(c, st->calls > 0);
          json usage = anthropic_usage(prompt_tokens, st->cached, int64_t(c.token_ids.size()));
          if (!close_block() ||
              !send({{"type", "message_delta"}, {"delta", {{"stop_reason", stop}, {"stop_sequence", stop_seq}}}, {"usage", usage}}) ||
              !send({{"type", "message_stop"}}))
            return false;
          sink.done();
        }
        return true;
      },
      [this, id](bool success) {
        if (!success) loop_.abort(id);  // the client went away: free its request
      });
}

// OpenAI's Responses API, stateless: the request is rewritten as a chat request
// (responses_request.h) and prepared as /v1/chat/completions prepares one; reasoning,
// text and tool calls come back as reasoning, message and function_call output items.
namespace {

// Generated tokens that are reasoning: all of them while the reasoning never closed, else
// the fewest leading tokens whose text holds "</think>" (found by bisection: decoding a
// longer prefix never loses it).
int64_t reasoning_tokens(const CompletionOutput& c, const tokenizer::Tokenizer* tok, bool reasoned, bool closed) {
  if (!reasoned) return 0;
  const int64_t n = int64_t(c.token_ids.size());
  if (!closed || !tok) return n;
  auto holds = [&](int64_t k) {
    return tok->decode(std::span<const int32_t>(c.token_ids.data(), size_t(k))).find("</think>") != std::string::npos;
  };
  if (!holds(n)) return n;
  int64_t lo = 0, hi = n;  // holds(hi), !holds(lo)
  while (hi - lo > 1) {
    const int64_t mid = (lo + hi) / 2;
    (holds(mid) ? hi : lo) = mid;
  }
  return hi;
}

}  // namespace

void Server::responses(const httplib::Request& req, httplib::Response& res) {
  std::optional<ojson> body = parse_body(req, res);
  if (!body) return;
  ResponsesRequest rr;
  try {
    rr = parse_responses(*body, o_.served_model_name);
  } catch (const ApiError& e) {
    return send_error(res, e);
  }
  ChatRequest& cr = rr.chat;
  PreparedChat pc;
  if (std::optional<ApiError> e = prepare_chat(cr, pc)) {
    ApiError named = *e;
    if (named.param == "messages") named.param = "input";
    else if (named.param == "reasoning_effort") named.param = "reasoning";
    else if (named.param == "max_tokens") named.param = "max_output_tokens";
    return send_error(res, named);
  }
  const int64_t n = ++ids_;
  const std::string id = "resp_" + std::to_string(n);
  const int64_t prompt_tokens = int64_t(pc.ids.size());
  std::shared_ptr<OutputStream> stream = loop_.submit(id, "", pc.ids, cr.params, std::move(pc.images));
  ChatOutputParser::Options po = chat_.output_options(pc.prompt, pc.want_tools);
  po.id_prefix = "call_" + std::to_string(n) + "_";
  // The response object's fixed fields: what the request asked for, as OpenAI repeats it.
  json head = {{"id", id},
               {"object", "response"},
               {"created_at", unix_now()},
               {"status", "in_progress"},
               {"error", nullptr},
               {"incomplete_details", nullptr},
               {"instructions", rr.echo.value("instructions", ojson(nullptr))},
               {"max_output_tokens", rr.echo.value("max_output_tokens", ojson(nullptr))},
               {"model", o_.served_model_name},
               {"output", json::array()},
               {"parallel_tool_calls", cr.parallel_tool_calls},
               {"previous_response_id", nullptr},
               {"reasoning", rr.echo.value("reasoning", ojson(json{{"effort", nullptr}, {"summary", nullptr}}))},
               {"store", false},
               {"temperature", rr.echo.value("temperature", ojson(1.0))},
               {"text", rr.echo.value("text", ojson(json{{"format", {{"type", "text"}}}}))},
               {"tool_choice", rr.echo.value("tool_choice", ojson("auto"))},
               {"tools", rr.echo.value("tools", ojson::array())},
               {"top_p", rr.echo.value("top_p", ojson(1.0))},
               {"truncation", "disabled"},
               {"metadata", rr.echo.value("metadata", ojson::object())},
               {"usage", nullptr}};
  const tokenizer::Tokenizer* tok = loop_.engine().tokenizer();
  const bool parallel = cr.parallel_tool_calls;
  const std::string sn = std::to_string(n);
  // The finished response: status, incomplete_details and usage from the output.
  auto finish = [head, prompt_tokens, tok](json output, const RequestOutput& o, bool reasoned, bool closed) {
    const CompletionOutput& c = o.outputs[0];
    json r = head;
    const bool cut = c.finish_reason == "length";
    r["status"] = cut ? "incomplete" : "completed";
    if (cut) r["incomplete_details"] = {{"reason", "max_output_tokens"}};
    r["output"] = std::move(output);
    const int64_t out_tokens = int64_t(c.token_ids.size());
    r["usage"] = {{"input_tokens", prompt_tokens},
                  {"input_tokens_details", {{"cached_tokens", o.metrics.cached_tokens}}},
                  {"output_tokens", out_tokens},
                  {"output_tokens_details", {{"reasoning_tokens", reasoning_tokens(c, tok, reasoned, closed)}}},
                  {"total_tokens", prompt_tokens + out_tokens}};
    return r;
  };
  auto reasoning_item = [sn](const std::string& text) {
    return json{{"type", "reasoning"},
                {"id", "rs_" + sn},
                {"summary", json::array()},
                {"content", json::array({{{"type", "reasoning_text"}, {"text", text}}})}};
  };
  auto message_item = [sn](const std::string& text, const char* status) {
    return json{{"type", "message"},
                {"id", "msg_" + sn},
                {"status", status},
                {"role", "assistant"},
                {"content", json::array({{{"type", "output_text"}, {"text", text}, {"annotations", json::array()}}})}};
  };
  auto call_item = [sn](size_t k, const std::string& call_id, const std::string& name, const std::string& args,
                        const char* status) {
    return json{{"type", "function_call"}, {"id", "fc_" + sn + "_" + std::to_string(k)}, {"call_id", call_id},
                {"name", name},            {"arguments", args},                            {"status", status}};
  };

  if (!cr.stream) {
    std::string err;
    std::optional<RequestOutput> fin = wait_final(*stream, err);
    if (!err.empty()) return send_error(res, bad_request(err, field_of(err)));
    if (!fin || fin->outputs.empty()) return send_error(res, {500, "the request ended without an output", "server_error", "", ""});
    if (!fin->error.empty()) return send_error(res, bad_request(fin->error, "text"));
    ChatOutputParser parser(po);
    std::string r, content;
    ToolCalls calls;
    for (const ChatDelta& d : {parser.feed(fin->outputs[0].text), parser.finish()}) {
      r += d.reasoning;
      content += d.content;
      for (const chat::ToolCallDelta& t : d.tool_calls)
        if (parallel || t.index == 0) calls.add(t);
    }
    if (parser.malformed()) ++tool_parse_failures_;
    json output = json::array();
    const bool reasoned = pc.reasoning || !r.empty();
    if (reasoned) output.push_back(reasoning_item(r));
    if (!content.empty() || (calls.list.empty() && !parser.in_reasoning())) output.push_back(message_item(content, "completed"));
    for (size_t k = 0; k < calls.list.size(); ++k) {
      const json& f = calls.list[k];
      output.push_back(call_item(k, f["id"], f["function"]["name"], f["function"]["arguments"], "completed"));
    }
    return send_json(res, 200, finish(output, *fin, reasoned, !parser.in_reasoning()));
  }

  // Streaming: response.created / in_progress, then per output item output_item.added,
  // its deltas (reasoning_text, output_text, function_call_arguments) and .done events,
  // then response.completed (or .incomplete) with the whole response.
  struct State {
    int64_t seq = 0;
    bool started = false;
    int index = -1;    // output index of the open item
    std::string kind;  // "reasoning", "message", "function_call" or ""
    std::string text;  // the open item's text or arguments so far
    size_t tool = 0;
    std::string call_id, call_name;
    size_t sent = 0;
    json output = json::array();  // finished items
    bool reasoned = false;
    std::chrono::steady_clock::time_point last_write = std::chrono::steady_clock::now();
  };
  auto st = std::make_shared<State>();
  st->reasoned = pc.reasoning;
  auto parser = std::make_shared<ChatOutputParser>(po);
  res.set_header("Cache-Control", "no-cache");
  res.set_chunked_content_provider(
      "text/event-stream",
      [st, parser, stream, head, id, parallel, finish, reasoning_item, message_item, call_item, this](
          size_t, httplib::DataSink& sink) {
        auto send = [&](json j) {
          j["sequence_number"] = st->seq++;
          return send_named_event(sink, j, st->last_write);
        };
        auto item_now = [&](const char* status) {
          if (st->kind == "reasoning") return reasoning_item(st->text);
          if (st->kind == "message") return message_item(st->text, status);
          return call_item(st->tool, st->call_id, st->call_name, st->text, status);
        };
        auto close_item = [&]() {
          if (st->kind.empty()) return true;
          const json item = item_now("completed");
          bool ok = true;
          if (st->kind == "reasoning") {
            ok = send({{"type", "response.reasoning_text.done"}, {"item_id", item["id"]}, {"output_index", st->index},
                       {"content_index", 0}, {"text", st->text}});
          } else if (st->kind == "message") {
            ok = send({{"type", "response.output_text.done"}, {"item_id", item["id"]}, {"output_index", st->index},
                       {"content_index", 0}, {"text", st->text}, {"logprobs", json::array()}}) &&
                 send({{"type", "response.content_part.done"}, {"item_id", item["id"]}, {"output_index", st->index},
                       {"content_index", 0}, {"part", item["content"][0]}});
          } else {
            ok = send({{"type", "response.function_call_arguments.done"}, {"item_id", item["id"]},
                       {"output_index", st->index}, {"name", st->call_name}, {"arguments", st->text}});
          }
          ok = ok && send({{"type", "response.output_item.done"}, {"output_index", st->index}, {"item", item}});
          st->output.push_back(item);
          st->kind.clear();
          st->text.clear();
          return ok;
        };
        auto open_item = [&](const std::string& kind) {
          if (!close_item()) return false;
          st->kind = kind;
          ++st->index;
          const json item = item_now("in_progress");
          json added = item;
          if (kind == "message") added["content"] = json::array();
          if (kind == "reasoning") added["content"] = json::array();
          bool ok = send({{"type", "response.output_item.added"}, {"output_index", st->index}, {"item", added}});
          if (ok && kind == "message")
            ok = send({{"type", "response.content_part.added"}, {"item_id", item["id"]}, {"output_index", st->index},
                       {"content_index", 0}, {"part", {{"type", "output_text"}, {"text", ""}, {"annotations", json::array()}}}});
          return ok;
        };
        auto text = [&](const std::string& kind, const std::string& piece) {
          if (piece.empty()) return true;
          if (st->kind != kind && !open_item(kind)) return false;
          st->text += piece;
          const json item = item_now("in_progress");
          const char* type = kind == "reasoning" ? "response.reasoning_text.delta" : "response.output_text.delta";
          json ev = {{"type", type}, {"item_id", item["id"]}, {"output_index", st->index}, {"content_index", 0}, {"delta", piece}};
          if (kind == "message") ev["logprobs"] = json::array();
          return send(ev);
        };
        if (!st->started) {
          st->started = true;
          if (!send({{"type", "response.created"}, {"response", head}}) ||
              !send({{"type", "response.in_progress"}, {"response", head}}))
            return loop_.abort(id), false;
          if (st->reasoned && !open_item("reasoning")) return loop_.abort(id), false;
        }
        std::optional<RequestOutput> o = stream->next(200);
        if (!o) {
          if (stream->done()) {
            const std::string err = stream->error();
            if (!err.empty()) send({{"type", "error"}, {"code", nullptr}, {"message", err}, {"param", field_of(err)}});
            sink.done();
            return true;
          }
          if (!keep_alive(sink, st->last_write)) return loop_.abort(id), false;
          return true;
        }
        if (!o->error.empty()) {
          send({{"type", "error"}, {"code", nullptr}, {"message", o->error}, {"param", "text"}});
          sink.done();
          return true;
        }
        if (o->outputs.empty()) return true;
        const CompletionOutput& c = o->outputs[0];
        const ChatDelta d = next_delta(c, o->finished, st->sent, *parser, tool_parse_failures_);
        if (!d.reasoning.empty()) st->reasoned = true;
        bool ok = text("reasoning", d.reasoning) && text("message", d.content);
        for (const chat::ToolCallDelta& t : d.tool_calls) {
          if (!ok) break;
          if (!parallel && t.index > 0) continue;
          if (st->kind != "function_call" || st->tool != t.index) {
            if (!close_item()) return loop_.abort(id), false;
            st->tool = t.index;
            st->call_id = t.id;
            st->call_name = t.name;
            ok = open_item("function_call");
          }
          if (ok && !t.arguments.empty()) {
            st->text += t.arguments;
            ok = send({{"type", "response.function_call_arguments.delta"},
                       {"item_id", "fc_" + id.substr(5) + "_" + std::to_string(st->tool)},
                       {"output_index", st->index},
                       {"delta", t.arguments}});
          }
        }
        if (!ok) return loop_.abort(id), false;
        if (o->finished) {
          // An answer with no text and no call still has its (empty) message.
          bool has_message = false, has_call = false;
          for (const json& it : st->output) has_message |= it["type"] == "message", has_call |= it["type"] == "function_call";
          if (st->kind == "message") has_message = true;
          if (st->kind == "function_call") has_call = true;
          if (!has_message && !has_call && !parser->in_reasoning() && !open_item("message")) return false;
          if (!close_item()) return false;
          const json r = finish(st->output, *o, st->reasoned, !parser->in_reasoning());
          const char* type = r["status"] == "incomplete" ? "response.incomplete" : "response.completed";
          if (!send({{"type", type}, {"response", r}})) return false;
          sink.done();
        }
        return true;
      },
      [this, id](bool success) {
        if (!success) loop_.abort(id);  // the client went away: free its request
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
  metric("gannet_requests_waiting", "gauge", "Requests queued, not yet scheduled.", s.waiting);
  metric("gannet_kv_blocks_total", "gauge", "KV cache blocks.", s.kv_blocks_total);
  metric("gannet_kv_blocks_free", "gauge", "KV cache blocks free.", s.kv_blocks_free);
  metric("gannet_kv_blocks_used", "gauge", "KV cache blocks in use.", s.kv_blocks_total - s.kv_blocks_free);
  metric("gannet_preemptions_total", "counter", "Sequences preempted (recomputed later).", s.preemptions);
  metric("gannet_prefix_cache_queries_total", "counter",
         "Prompt positions admissions looked up in the prefix cache.", s.prefix_queried_tokens);
  metric("gannet_prefix_cache_hits_total", "counter", "Of those, positions taken from cached blocks.",
         s.prefix_hit_tokens);
  metric("gannet_prefix_cache_evictions_total", "counter", "Cached KV blocks evicted for reuse.", s.prefix_evictions);
  metric("gannet_prefix_cache_blocks", "gauge", "KV blocks held by the prefix cache (in use or evictable).",
         s.prefix_cached_blocks);
  metric("gannet_prefix_cache_disk_hits_total", "counter", "Cached blocks read back from the disk tier.",
         s.prefix_disk_hits);
  metric("gannet_prefix_cache_disk_writes_total", "counter", "Evicted blocks written to the disk tier.",
         s.prefix_disk_writes);
  metric("gannet_prefix_cache_disk_files", "gauge", "Blocks of this model in the disk tier.", s.prefix_disk_files);
  metric("gannet_prefix_cache_replayed_total", "counter",
         "Cached positions computed again to rebuild per-sequence state.", s.prefix_replayed_tokens);
  metric("gannet_prefix_cache_snapshot_restores_total", "counter",
         "Cache hits that copied a saved per-sequence state instead of replaying.", s.prefix_snapshot_restores);
  auto histogram = [&](const char* name, const char* help, const Histogram& h) {
    t += std::string("# HELP ") + name + " " + help + "\n# TYPE " + name + " histogram\n";
    int64_t cum = 0;
    char buf[64];
    for (size_t k = 0; k < h.bounds.size(); ++k) {
      cum += h.counts[k];
      std::snprintf(buf, sizeof buf, "%g", h.bounds[k]);
      t += std::string(name) + "_bucket{le=\"" + buf + "\"} " + std::to_string(cum) + "\n";
    }
    t += std::string(name) + "_bucket{le=\"+Inf\"} " + std::to_string(h.count) + "\n";
    std::snprintf(buf, sizeof buf, "%.9g", h.sum);
    t += std::string(name) + "_sum " + buf + "\n" + name + "_count " + std::to_string(h.count) + "\n";
  };
  histogram("gannet_time_to_first_token_seconds", "Seconds from a request's arrival to its first token.", s.ttft);
  histogram("gannet_inter_token_latency_seconds", "Seconds between a request's generated tokens.", s.itl);
  metric("gannet_http_requests_total", "counter", "HTTP requests received.", http_requests_.load());
  metric("gannet_http_errors_total", "counter", "HTTP requests answered with an error.", http_errors_.load());
  metric("gannet_tool_call_parse_failures_total", "counter",
         "Chat outputs whose tool-call block broke the format (returned as content).", tool_parse_failures_.load());
  res.set_content(t, "text/plain; version=0.0.4");
}

int Server::run() {
  http_.new_task_queue = [n = o_.http_threads] { return new httplib::ThreadPool(size_t(n)); };
  http_.set_payload_max_length(o_.max_body_bytes);
  // Clients keep their connections for many requests (the library's default closes one
  // after 5). Idle ones still close after 5 s, which also bounds how long a stop waits.
  http_.set_keep_alive_max_count(1 << 20);
  // Responses go out in several small writes (headers, body, one per streamed chunk): with
  // Nagle's algorithm each waits for the client's delayed ACK, ~40 ms a request.
  http_.set_tcp_nodelay(true);
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
  http_.Post("/v1/chat/completions", [this](const httplib::Request& req, httplib::Response& res) {
    if (authorized(req, res)) chat_completions(req, res);
  });
  http_.Post("/v1/messages", [this](const httplib::Request& req, httplib::Response& res) {
    if (authorized(req, res, true)) messages(req, res);
  });
  http_.Post("/v1/messages/count_tokens", [this](const httplib::Request& req, httplib::Response& res) {
    if (authorized(req, res, true)) count_tokens(req, res);
  });
  http_.Post("/v1/responses", [this](const httplib::Request& req, httplib::Response& res) {
    if (authorized(req, res)) responses(req, res);
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
  if (o_.on_listening) {
    o_.on_listening(port);
  } else {
    std::fprintf(stderr, "gannet serve: chat format: %s\n", chat_.origin().c_str());
    std::printf("gannet serve: model '%s' listening on http://%s:%d\n", o_.served_model_name.c_str(), o_.host.c_str(), port);
    std::fflush(stdout);
  }
  return http_.listen_after_bind() ? 0 : 1;
}

std::atomic<Server*> g_server{nullptr};

extern "C" void on_signal(int) {
  if (Server* s = g_server.load()) s->stop();
}

}  // namespace

int serve(const EngineArgs& engine_args, const ServerOptions& options, Collective* group) {
  if (group && group->rank() > 0) {
    // A worker rank: no HTTP; it runs what rank 0 hands it until rank 0 stops. mpirun
    // passes Ctrl-C / SIGTERM to every rank; rank 0 alone decides when the job ends.
    engine::Engine eng(engine_args, group);
    std::signal(SIGINT, SIG_IGN);
    std::signal(SIGTERM, SIG_IGN);
    EngineLoop::run_worker(eng, *group);
    return 0;
  }
  ServerOptions o = options;
  if (o.served_model_name.empty()) {
    std::filesystem::path p = std::filesystem::path(engine_args.model).lexically_normal();
    if (p.filename().empty()) p = p.parent_path();
    o.served_model_name = p.filename().string();
  }
  if (o.served_model_name.empty()) o.served_model_name = engine_args.model;
  ChatFormat chat = ChatFormat::load(engine_args.model, o.chat_template);
  Server server(std::make_unique<engine::Engine>(engine_args, group), o, std::move(chat), group);
  g_server = &server;
  std::signal(SIGINT, on_signal);
  std::signal(SIGTERM, on_signal);
  const int rc = server.run();
  g_server = nullptr;
  return rc;
}

struct LocalServer::Impl {
  // The server, type-erased (its class is local to this file).
  std::shared_ptr<void> server;
  std::function<int()> run;
  std::function<void()> stop;
  std::function<bool()> running;
  std::string name;
  std::thread thread;
  std::mutex m;
  std::condition_variable cv;
  int port = -1;
  bool started = false, ended = false, caching = false;
};

LocalServer::LocalServer(const EngineArgs& engine_args, ServerOptions options) : impl_(std::make_unique<Impl>()) {
  Impl* im = impl_.get();
  options.host = "127.0.0.1";
  options.port = 0;
  if (options.served_model_name.empty()) options.served_model_name = "local";
  im->name = options.served_model_name;
  options.on_listening = [im](int port) {
    std::lock_guard<std::mutex> lock(im->m);
    im->port = port;
    im->started = true;
    im->cv.notify_all();
  };
  ChatFormat chat = ChatFormat::load(engine_args.model, options.chat_template);
  auto server = std::make_shared<Server>(std::make_unique<engine::Engine>(engine_args, nullptr), options,
                                         std::move(chat), nullptr);
  Server* raw = server.get();
  im->caching = raw->engine().scheduler().config().prefix_caching;
  im->server = server;
  im->run = [raw] { return raw->run(); };
  im->stop = [raw] { raw->stop(); };
  im->running = [raw] { return raw->running(); };
  im->thread = std::thread([im] {
    im->run();
    std::lock_guard<std::mutex> lock(im->m);
    im->ended = true;
    im->cv.notify_all();
  });
  std::unique_lock<std::mutex> lock(im->m);
  im->cv.wait(lock, [im] { return im->started || im->ended; });
  if (!im->started) {
    lock.unlock();
    im->thread.join();
    throw Error("the local server could not listen on a loopback port");
  }
}

LocalServer::~LocalServer() {
  Impl* im = impl_.get();
  // The port is announced just before the accept loop starts: stop once it runs.
  for (;;) {
    {
      std::lock_guard<std::mutex> lock(im->m);
      if (im->ended) break;
    }
    if (im->running()) {
      im->stop();
      break;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  im->thread.join();
}

int LocalServer::port() const { return impl_->port; }
const std::string& LocalServer::model_name() const { return impl_->name; }
bool LocalServer::prefix_caching() const { return impl_->caching; }

}  // namespace gannet::server
