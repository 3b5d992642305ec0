// `gannet chat-format`: a model's chat format on JSON lines, so scripts and tests can
// compare prompts and parsed completions with other implementations.
//   render: {"messages": [...], "kwargs": {...}} -> {"rendered": TEXT, "token_ids": [...]}
//   parse:  {"text": TEXT, "thinking_mode": "chat"|"thinking"}
//           -> {"content", "reasoning_content", "tool_calls": [{"name", "arguments"}]}
// A line that cannot be handled gets {"error": ...} and the rest go on.
#include <filesystem>
#include <fstream>
#include <iostream>
#include <memory>
#include <string>

#include <nlohmann/json.hpp>

#include "chat/chat_format.h"
#include "chat/deepseek_v4_encoding.h"
#include "chat/output_parser.h"
#include "cli/commands.h"
#include "cli/flags.h"
#include "tokenizer/tokenizer.h"

namespace gannet::cli {

namespace {

const char* kChatFormatUsage =
    "usage: gannet chat-format --model DIR render|parse [--input FILE.jsonl] [--chat-template FILE]\n"
    "\n"
    "Reads JSON lines (from FILE, or stdin) and writes one JSON line per input line.\n"
    "  render: {\"messages\": [...], \"kwargs\": {...}}  ->  {\"rendered\": TEXT, \"token_ids\": [...]}\n"
    "          DeepSeek-V4/V4.1 models take encode_messages' keywords verbatim (thinking_mode,\n"
    "          drop_thinking, add_default_bos_token, reasoning_effort, context); Jinja templates\n"
    "          get the kwargs as template variables (add_generation_prompt and tools included).\n"
    "          token_ids is null for a checkpoint without tokenizer.json.\n"
    "  parse:  {\"text\": TEXT, \"thinking_mode\": \"chat\"|\"thinking\"}  ->\n"
    "          {\"content\", \"reasoning_content\", \"tool_calls\": [{\"name\", \"arguments\"}]}\n"
    "          (arguments as the JSON text the server returns)\n"
    "A line that cannot be handled gets {\"error\": \"...\"}; blank lines are skipped.\n"
    "\n"
    "flags:\n"
    "  --model DIR           the checkpoint (config.json; tokenizer.json and a chat template if it has them)\n"
    "  --input FILE          JSON lines to read instead of stdin\n"
    "  --chat-template FILE  a Jinja chat template instead of the model's own format\n"
    "  --help                print this help\n";

using ojson = nlohmann::ordered_json;

ojson render_line(const chat::ChatFormat& format, const tokenizer::Tokenizer* tok, const ojson& in) {
  if (!in.is_object()) return {{"error", "expected an object with \"messages\""}};
  for (auto it = in.begin(); it != in.end(); ++it)
    if (it.key() != "messages" && it.key() != "kwargs" && it.key() != "id")
      return {{"error", "unknown field '" + it.key() + "' (a render line has messages and kwargs)"}};
  if (!in.contains("messages")) return {{"error", "missing \"messages\""}};
  const ojson kwargs = in.contains("kwargs") && !in["kwargs"].is_null() ? in["kwargs"] : ojson::object();
  if (!kwargs.is_object()) return {{"error", "\"kwargs\" must be an object"}};
  std::string text;
  if (format.deepseek()) {
    text = chat::encode_deepseek_messages(*format.deepseek(), in["messages"], chat::deepseek_options_from_kwargs(kwargs));
  } else {
    chat::ChatOptions o;
    o.kwargs = ojson::object();
    for (auto it = kwargs.begin(); it != kwargs.end(); ++it) {
      if (it.key() == "add_generation_prompt") {
        if (!it.value().is_boolean()) return {{"error", "kwargs.add_generation_prompt must be true or false"}};
        o.add_generation_prompt = it.value().get<bool>();
      } else if (it.key() == "tools") {
        o.tools = it.value();
      } else {
        o.kwargs[it.key()] = it.value();
      }
    }
    text = format.render(in["messages"], o, nullptr);
  }
  ojson out = {{"rendered", text}};
  out["token_ids"] = tok ? ojson(tok->encode(text, /*add_special_tokens=*/false)) : ojson(nullptr);
  return out;
}

ojson parse_line(const chat::ChatFormat& format, const ojson& in) {
  if (!in.is_object() || !in.contains("text") || !in["text"].is_string())
    return {{"error", "expected an object with a string \"text\""}};
  std::string mode = "chat";
  for (auto it = in.begin(); it != in.end(); ++it) {
    if (it.key() == "thinking_mode") {
      if (it.value() != "chat" && it.value() != "thinking")
        return {{"error", "\"thinking_mode\" must be \"chat\" or \"thinking\""}};
      mode = it.value().get<std::string>();
    } else if (it.key() != "text" && it.key() != "id") {
      return {{"error", "unknown field '" + it.key() + "' (a parse line has text and thinking_mode)"}};
    }
  }
  if (!format.deepseek()) {
    // Dense families: the server's reader, in the template's tool-call syntax.
    if (!format.reads_tool_calls())
      return {{"error", "gannet reads no tool calls back from this chat format (" + format.origin() + ")"}};
    chat::ChatOutputParser parser(format.output_options("", /*tools=*/true));
    std::string reasoning, content;
    ojson calls = ojson::array();
    for (const chat::ChatDelta& d : {parser.feed(in["text"].get<std::string>()), parser.finish()}) {
      reasoning += d.reasoning;
      content += d.content;
      for (const chat::ToolCallDelta& t : d.tool_calls) {
        if (t.index >= calls.size()) calls.push_back({{"name", t.name}, {"arguments", ""}});
        calls[t.index]["arguments"] = calls[t.index]["arguments"].get<std::string>() + t.arguments;
      }
    }
    if (parser.malformed()) return {{"error", "the tool-call block does not parse"}};
    return {{"content", content}, {"reasoning_content", reasoning}, {"tool_calls", calls}};
  }
  const chat::ParsedCompletion p = chat::parse_deepseek_completion(*format.deepseek(), in["text"], mode == "thinking");
  ojson calls = ojson::array();
  for (const chat::ParsedToolCall& c : p.tool_calls) calls.push_back({{"name", c.name}, {"arguments", c.arguments}});
  return {{"content", p.content}, {"reasoning_content", p.reasoning_content}, {"tool_calls", calls}};
}

}  // namespace

int cmd_chat_format(const Args& all) {
  // The one positional word: render or parse (anywhere, but not as a flag's value).
  Args args;
  std::string mode;
  for (size_t i = 0; i < all.size(); ++i) {
    const bool is_value = i > 0 && (all[i - 1] == "--model" || all[i - 1] == "--input" || all[i - 1] == "--chat-template");
    if (!is_value && (all[i] == "render" || all[i] == "parse")) {
      if (!mode.empty()) throw UsageError("give one of render or parse");
      mode = all[i];
    } else {
      args.push_back(all[i]);
    }
  }
  Flags flags(args, {"model", "input", "chat-template"}, {"help"});
  if (flags.has("help")) {
    std::cout << kChatFormatUsage;
    return 0;
  }
  if (mode.empty()) throw UsageError("say render or parse");
  const std::string model = flags.require("model");
  if (!std::filesystem::is_directory(model)) throw UsageError("--model " + model + ": not a directory");
  const chat::ChatFormat format = chat::ChatFormat::load(model, flags.get_or("chat-template", ""));
  if (!format.available())
    throw UsageError("--model " + model + ": the checkpoint has no chat template and is not DeepSeek-V4 / V4.1 "
                     "(give one with --chat-template FILE)");
  std::unique_ptr<tokenizer::Tokenizer> tok;
  if (mode == "render" && std::filesystem::exists(std::filesystem::path(model) / "tokenizer.json"))
    tok = std::make_unique<tokenizer::Tokenizer>(tokenizer::Tokenizer::from_dir(model));

  std::ifstream file;
  if (flags.has("input")) {
    file.open(flags.require("input"), std::ios::binary);
    if (!file) throw UsageError("--input " + flags.require("input") + ": cannot read the file");
  }
  std::istream& in = flags.has("input") ? static_cast<std::istream&>(file) : std::cin;
  std::ios::sync_with_stdio(false);
  int rc = 0;
  std::string line;
  for (size_t n = 1; std::getline(in, line); ++n) {
    if (line.find_first_not_of(" \t\r") == std::string::npos) continue;
    ojson out;
    try {
      const ojson row = ojson::parse(line);
      out = mode == "render" ? render_line(format, tok.get(), row) : parse_line(format, row);
    } catch (const ojson::exception& e) {
      out = {{"error", std::string("invalid JSON: ") + e.what()}};
    } catch (const std::exception& e) {
      out = {{"error", e.what()}};
    }
    if (out.contains("error")) {
      out["error"] = "line " + std::to_string(n) + ": " + out["error"].get<std::string>();
      rc = 1;
    }
    std::cout << out.dump(-1, ' ', false, ojson::error_handler_t::replace) << '\n' << std::flush;
  }
  return rc;
}

}  // namespace gannet::cli
