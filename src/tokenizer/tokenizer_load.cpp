// Building a Tokenizer from tokenizer.json and the special-token files beside it.
#include <algorithm>
#include <filesystem>
#include <memory>
#include <mutex>
#include <optional>
#include <nlohmann/json.hpp>
#include <unordered_map>

#include "core/error.h"
#include "tokenizer/byte_level.h"
#include "tokenizer/json_file.h"
#include "tokenizer/tokenizer_state.h"

namespace gannet::tokenizer {

namespace {

using json = nlohmann::json;

const json& field(const json& j, const char* key) {
  static const json kNull;
  return j.is_object() && j.contains(key) ? j[key] : kNull;
}

bool get_bool(const json& j, const char* key, bool def) {
  const json& v = field(j, key);
  if (v.is_null()) return def;
  if (!v.is_boolean()) fail("\"", key, "\" must be true or false");
  return v.get<bool>();
}

// Only the ByteLevel decoder is supported: it is what byte-level BPE files use, and any
// other decoder would change the decoded text.
void check_decoder(const json& d) {
  if (d.is_null()) fail("decoder: missing; only the ByteLevel decoder is supported");
  const std::string type = field(d, "type").is_string() ? field(d, "type").get<std::string>() : "";
  if (type == "ByteLevel") return;
  if (type == "Sequence" && field(d, "decoders").is_array()) {
    for (const json& sub : d["decoders"]) check_decoder(sub);
    return;
  }
  fail("decoder: type \"", type, "\" is unsupported (only ByteLevel)");
}

// Reasoning and tool-call markup is text the model writes for a reader (the chat layer's
// output parser, a grammar that spells out a call), not control: a tokenizer that marks one
// of these tokens special would otherwise have skip_special_tokens delete it from the text
// (a DSML call or a </think> vanishes, and its parameters leak into content) and keep it
// out of every grammar (a constrained call could only be spelt with other tokens than the
// model was trained on). So these stay non-special whatever tokenizer.json says.
bool is_markup(const std::string& content) {
  static const char* const kMarkup[] = {
      "<think>", "</think>",              // DeepSeek R1 / V3.1 / V4, Qwen 3
      "｜DSML｜",                          // DeepSeek V3.2 / V4 / V4.1 tool calls
      "<tool_call>", "</tool_call>",      // Qwen 2.5 / 3
      "<｜tool▁calls▁begin｜>", "<｜tool▁calls▁end｜>", "<｜tool▁call▁begin｜>",  // DeepSeek V3 / V3.1
      "<｜tool▁call▁end｜>", "<｜tool▁sep｜>"};
  for (const char* m : kMarkup)
    if (content == m) return true;
  return false;
}

std::vector<AddedToken> parse_added_tokens(const json& list) {
  std::vector<AddedToken> tokens;
  if (list.is_null()) return tokens;
  if (!list.is_array()) fail("\"added_tokens\" must be an array");
  for (size_t i = 0; i < list.size(); ++i) {
    const json& t = list[i];
    try {
      if (!field(t, "content").is_string()) fail("needs a string \"content\"");
      const json& id = field(t, "id");
      if (!id.is_number_integer() || id.get<int64_t>() < 0 || id.get<int64_t>() > INT32_MAX)
        fail("needs a non-negative integer \"id\"");
      AddedToken tok;
      tok.content = t["content"].get<std::string>();
      tok.id = TokenId(id.get<int64_t>());
      tok.special = get_bool(t, "special", false);
      tok.lstrip = get_bool(t, "lstrip", false);
      tok.rstrip = get_bool(t, "rstrip", false);
      tok.single_word = get_bool(t, "single_word", false);
      tok.normalized = get_bool(t, "normalized", !tok.special);
      tokens.push_back(std::move(tok));
    } catch (const Error& e) {
      fail("added_tokens[", i, "]: ", e.what());
    }
  }
  return tokens;
}

// Hugging Face does not use the ids written in "added_tokens": a content already known
// (added before, or in the vocabulary) takes that id, and a new one the next free id after
// the vocabulary. Files it wrote agree; for any other file this keeps gannet's ids equal
// to what the library produces. A repeated content keeps one id and its last flags.
std::vector<AddedToken> assign_added_ids(std::vector<AddedToken> tokens, const Bpe& bpe) {
  std::unordered_map<std::string, size_t> index;  // content -> position in `out`
  std::vector<AddedToken> out;
  int64_t max_id = -1;
  const int64_t model_size = int64_t(bpe.num_entries());
  for (AddedToken& t : tokens) {
    if (t.content.empty()) continue;
    auto it = index.find(t.content);
    if (it != index.end()) {
      t.id = out[it->second].id;
      out[it->second] = std::move(t);
      continue;
    }
    if (auto id = bpe.token_to_id(t.content))
      t.id = *id;
    else
      t.id = TokenId(max_id >= model_size || model_size == 0 ? max_id + 1 : model_size);
    max_id = std::max<int64_t>(max_id, t.id);
    index[t.content] = out.size();
    out.push_back(std::move(t));
  }
  return out;
}

// Whether a post-processor template (Llama-3 style) starts with the BOS token; used when
// tokenizer_config.json does not state add_bos_token.
bool template_starts_with(const json& pp, std::optional<TokenId> bos, const Tokenizer& tok) {
  if (!bos || !pp.is_object()) return false;
  const json& type = field(pp, "type");
  if (type == "Sequence" && field(pp, "processors").is_array()) {
    for (const json& p : pp["processors"])
      if (template_starts_with(p, bos, tok)) return true;
    return false;
  }
  if (type != "TemplateProcessing") return false;
  const json& single = field(pp, "single");
  if (!single.is_array() || single.empty()) return false;
  const json& name = field(field(single[0], "SpecialToken"), "id");
  return name.is_string() && tok.token_to_id(name.get<std::string>()) == bos;
}

}  // namespace

Tokenizer Tokenizer::from_dir(const std::string& dir) {
  std::error_code ec;
  if (!std::filesystem::is_directory(dir, ec)) fail(dir, ": not a directory");
  return from_json_file(join_path(dir, "tokenizer.json"));
}

namespace {

// The state most recently built from a tokenizer.json, keyed by the file's bytes: engines,
// tests and the Python API often load one tokenizer many times in a process, and parsing
// a 129k vocabulary with its merges takes a third of a second. A hit compares every byte,
// so it is exactly the state a fresh parse would build; the files beside tokenizer.json
// (special tokens) are read again each time and a state whose special tokens differ is a
// copy with them replaced.
struct ParsedTokenizer {
  std::string text;
  std::optional<Tokenizer> tok;  // its special tokens: those of the first directory read
  json post_processor;
};
std::mutex g_parsed_mu;
std::shared_ptr<const ParsedTokenizer> g_parsed;

}  // namespace

Tokenizer Tokenizer::from_json_file(const std::string& path) {
  std::string text = read_file_bytes(path);
  std::shared_ptr<const ParsedTokenizer> parsed;
  {
    std::lock_guard lock(g_parsed_mu);
    if (g_parsed && g_parsed->text == text) parsed = g_parsed;
  }
  // Special tokens from the files beside it, looked up in the parsed vocabulary.
  const std::string dir = std::filesystem::path(path).parent_path().string();
  auto special_of = [&dir](const Tokenizer& tok, const State& s, const json& post_processor, bool* add_bos) {
    SpecialTokens special = read_special_tokens(
        dir, [&tok](std::string_view t) { return tok.token_to_id(t); }, s.token_bytes.size());
    *add_bos = special.add_bos.value_or(template_starts_with(post_processor, special.bos, tok));
    return special;
  };
  if (!parsed) {
    const json j = parse_json_text(text, path);
    std::shared_ptr<State> state = parse_state(j, path);
    const Tokenizer tok(state);
    auto fresh = std::make_shared<ParsedTokenizer>();
    fresh->post_processor = field(j, "post_processor");
    state->special_tokens = special_of(tok, *state, fresh->post_processor, &state->add_bos);
    fresh->tok = tok;
    fresh->text = std::move(text);
    std::lock_guard lock(g_parsed_mu);
    g_parsed = std::move(fresh);
    return tok;
  }
  const Tokenizer& parsed_tok = *parsed->tok;
  const State& ps = *parsed_tok.state_;
  bool add_bos = false;
  SpecialTokens special = special_of(parsed_tok, ps, parsed->post_processor, &add_bos);
  if (ps.special_tokens == special && ps.add_bos == add_bos) return parsed_tok;
  auto state = std::make_shared<State>(ps);
  state->special_tokens = std::move(special);
  state->add_bos = add_bos;
  return Tokenizer(std::move(state));
}

std::shared_ptr<Tokenizer::State> Tokenizer::parse_state(const nlohmann::json& j, const std::string& path) {
  auto state = std::make_shared<State>();
  State& s = *state;
  try {
    if (!j.is_object()) fail("expected a JSON object");
    if (field(j, "model").is_null()) fail("missing \"model\"");
    s.normalizer = Normalizer::from_json(field(j, "normalizer"));
    s.pre_tokenizer = PreTokenizer::from_json(field(j, "pre_tokenizer"));
    check_decoder(field(j, "decoder"));
    s.bpe = Bpe::from_json(j["model"], s.pre_tokenizer.byte_level());

    std::vector<AddedToken> added = assign_added_ids(parse_added_tokens(field(j, "added_tokens")), s.bpe);
    size_t vocab_size = s.bpe.tokens().size();
    for (const AddedToken& t : added) vocab_size = std::max(vocab_size, size_t(t.id) + 1);
    s.token_bytes.assign(s.bpe.tokens().begin(), s.bpe.tokens().end());
    s.token_bytes.resize(vocab_size);
    s.special.assign(vocab_size, 0);
    std::vector<AddedToken> raw, normalized;
    for (AddedToken& t : added) {
      s.added_ids[t.content] = t.id;
      s.token_bytes[t.id] = t.content;
      s.special[t.id] = t.special && !is_markup(t.content);
      // A normalized token is looked for in normalized text, so normalize it the same way.
      if (t.normalized) {
        t.content = s.normalizer.apply(t.content);
        normalized.push_back(t);
      } else {
        raw.push_back(t);
      }
    }
    // Hugging Face's ByteLevel decoder maps a token's characters back to bytes when all of
    // them are byte characters, and keeps the token's own UTF-8 otherwise.
    for (std::string& t : s.token_bytes)
      if (auto bytes = from_byte_level(t)) t = std::move(*bytes);
    s.raw_added = AddedTokenMatcher(std::move(raw));
    s.normalized_added = AddedTokenMatcher(std::move(normalized));
  } catch (const nlohmann::json::exception& e) {
    fail(path, ": ", e.what());
  } catch (const Error& e) {
    fail(path, ": ", e.what());
  }

  return state;  // special_tokens and add_bos: from_json_file sets them
}

}  // namespace gannet::tokenizer
