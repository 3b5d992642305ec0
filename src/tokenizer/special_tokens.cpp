#include "tokenizer/special_tokens.h"

#include <algorithm>
#include <nlohmann/json.hpp>

#include "core/error.h"
#include "tokenizer/json_file.h"

namespace gannet::tokenizer {

namespace {

// bos_token / eos_token: a string, an {"content": ...} object, or null.
std::optional<TokenId> config_token(const nlohmann::json& cfg, const char* key,
                                    const std::string& file, const TokenLookup& lookup) {
  if (!cfg.contains(key) || cfg[key].is_null()) return std::nullopt;
  const nlohmann::json& v = cfg[key];
  std::string text;
  if (v.is_string())
    text = v.get<std::string>();
  else if (v.is_object() && v.contains("content") && v["content"].is_string())
    text = v["content"].get<std::string>();
  else
    fail(file, ": \"", key, "\" must be a string or an object with \"content\"");
  auto id = lookup(text);
  if (!id) fail(file, ": ", key, " \"", text, "\" is not a token of tokenizer.json");
  return id;
}

// bos_token_id / eos_token_id: an int, a list of ints, or null.
std::vector<TokenId> config_ids(const nlohmann::json& cfg, const char* key,
                                const std::string& file, size_t vocab_size) {
  std::vector<TokenId> ids;
  if (!cfg.contains(key) || cfg[key].is_null()) return ids;
  const nlohmann::json& v = cfg[key];
  auto add = [&](const nlohmann::json& x) {
    if (!x.is_number_integer() || x.get<int64_t>() < 0 || x.get<uint64_t>() >= vocab_size)
      fail(file, ": \"", key, "\" has ", x.dump(), ", expected an id in [0, ", vocab_size, ")");
    ids.push_back(TokenId(x.get<int64_t>()));
  };
  if (v.is_array()) {
    for (const auto& x : v) add(x);
  } else {
    add(v);
  }
  return ids;
}

void add_unique(std::vector<TokenId>& to, const std::vector<TokenId>& ids) {
  for (TokenId id : ids)
    if (std::find(to.begin(), to.end(), id) == to.end()) to.push_back(id);
}

}  // namespace

SpecialTokens read_special_tokens(const std::string& dir, const TokenLookup& lookup,
                                  size_t vocab_size) {
  SpecialTokens st;
  const std::string tok_path = join_path(dir, "tokenizer_config.json");
  if (file_exists(tok_path)) {
    nlohmann::json cfg = read_json_file(tok_path);
    if (!cfg.is_object()) fail(tok_path, ": expected a JSON object");
    st.bos = config_token(cfg, "bos_token", tok_path, lookup);
    if (auto eos = config_token(cfg, "eos_token", tok_path, lookup)) st.eos.push_back(*eos);
    if (cfg.contains("add_bos_token") && !cfg["add_bos_token"].is_null()) {
      if (!cfg["add_bos_token"].is_boolean()) fail(tok_path, ": \"add_bos_token\" must be true or false");
      st.add_bos = cfg["add_bos_token"].get<bool>();
    }
  }
  bool have_generation_eos = false;
  for (const char* name : {"generation_config.json", "config.json"}) {
    const std::string path = join_path(dir, name);
    if (!file_exists(path)) continue;
    nlohmann::json cfg = read_json_file(path);
    if (!cfg.is_object()) fail(path, ": expected a JSON object");
    auto bos = config_ids(cfg, "bos_token_id", path, vocab_size);
    if (!st.bos && !bos.empty()) st.bos = bos[0];
    // generation_config.json states what generation stops on; config.json is the fallback.
    auto eos = config_ids(cfg, "eos_token_id", path, vocab_size);
    if (!have_generation_eos) add_unique(st.eos, eos);
    if (!eos.empty()) have_generation_eos = true;
  }
  return st;
}

}  // namespace gannet::tokenizer
