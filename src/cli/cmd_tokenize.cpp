// `gannet tokenize`: JSON lines in, JSON lines out, one output line per input line, so
// scripts and tests can compare ids with other tokenizers. A bad line gets an
// {"error": ...} line and the rest go on.
#include <iostream>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "cli/commands.h"
#include "cli/flags.h"
#include "tokenizer/tokenizer.h"

namespace gannet::cli {

namespace {

const char* kTokenizeUsage =
    "usage: gannet tokenize --model DIR [--decode] [--add-special-tokens]\n"
    "\n"
    "Reads JSON lines from stdin and writes one JSON line per input line to stdout.\n"
    "  encode (default): {\"text\": \"...\"}  ->  {\"ids\": [...]}\n"
    "  --decode:         {\"ids\": [...]}    ->  {\"text\": \"...\"}\n"
    "A line that cannot be handled gets {\"error\": \"...\"}; blank lines are skipped.\n"
    "\n"
    "flags:\n"
    "  --model DIR             folder with tokenizer.json (and tokenizer_config.json)\n"
    "  --decode                turn ids into text instead of text into ids\n"
    "  --add-special-tokens    prepend the BOS token when the tokenizer config asks for it\n"
    "  --help                  print this help\n";

using nlohmann::json;

json handle_line(const tokenizer::Tokenizer& tok, const std::string& line, bool decode,
                 bool add_special) {
  json in;
  try {
    in = json::parse(line);
  } catch (const json::exception& e) {
    return {{"error", std::string("invalid JSON: ") + e.what()}};
  }
  if (decode) {
    if (!in.is_object() || !in.contains("ids") || !in["ids"].is_array())
      return {{"error", "expected an object with an \"ids\" array"}};
    std::vector<tokenizer::TokenId> ids;
    for (const json& v : in["ids"]) {
      if (!v.is_number_integer() || v.get<int64_t>() < 0 ||
          uint64_t(v.get<int64_t>()) >= tok.vocab_size())
        return {{"error", "\"ids\" holds " + v.dump() + ", expected integers in [0, " +
                              std::to_string(tok.vocab_size()) + ")"}};
      ids.push_back(tokenizer::TokenId(v.get<int64_t>()));
    }
    return {{"text", tok.decode(ids)}};
  }
  if (!in.is_object() || !in.contains("text") || !in["text"].is_string())
    return {{"error", "expected an object with a string \"text\""}};
  return {{"ids", tok.encode(in["text"].get_ref<const std::string&>(), add_special)}};
}

}  // namespace

int cmd_tokenize(const Args& args) {
  Flags flags(args, {"model"}, {"decode", "add-special-tokens", "help"});
  if (flags.has("help")) {
    std::cout << kTokenizeUsage;
    return 0;
  }
  const bool decode = flags.has("decode");
  const bool add_special = flags.has("add-special-tokens");
  if (decode && add_special) throw UsageError("--add-special-tokens applies to encoding only");
  const tokenizer::Tokenizer tok = tokenizer::Tokenizer::from_dir(flags.require("model"));

  std::ios::sync_with_stdio(false);
  std::string line;
  for (size_t n = 1; std::getline(std::cin, line); ++n) {
    if (line.find_first_not_of(" \t\r") == std::string::npos) continue;
    json out;
    try {
      out = handle_line(tok, line, decode, add_special);
    } catch (const std::exception& e) {
      out = {{"error", e.what()}};
    }
    if (out.contains("error")) out["error"] = "line " + std::to_string(n) + ": " + out["error"].get<std::string>();
    // Decoded text is valid UTF-8, but an error message may quote broken input: replace
    // rather than throw.
    std::cout << out.dump(-1, ' ', false, json::error_handler_t::replace) << '\n' << std::flush;
  }
  return 0;
}

}  // namespace gannet::cli
