// Minimal --flag parsing for subcommands. Unknown flags, missing values and values that
// do not parse are usage errors (UsageError), reported with the subcommand's usage text.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "core/error.h"
#include "gannet/engine_args.h"

namespace gannet::cli {

class UsageError : public Error {
 public:
  using Error::Error;
};

class Flags {
 public:
  // value_flags take a value ("--model DIR" or "--model=DIR"); bool_flags do not.
  Flags(const std::vector<std::string>& args, std::set<std::string> value_flags,
        std::set<std::string> bool_flags);

  bool has(const std::string& name) const { return values_.count(name) > 0; }
  std::optional<std::string> get(const std::string& name) const;
  std::string require(const std::string& name) const;
  std::string get_or(const std::string& name, const std::string& def) const;
  int64_t get_int(const std::string& name, int64_t def) const;
  // get_int, and a UsageError unless lo <= value <= hi.
  int64_t get_int_in(const std::string& name, int64_t def, int64_t lo, int64_t hi) const;
  double get_double(const std::string& name, double def) const;

 private:
  std::map<std::string, std::string> values_;
};

// The speculative-decoding flags every engine command takes (engine_args.h): speculative,
// num-speculative-tokens, speculative-verify, speculative-sampling, ngram-min, ngram-max.
inline const std::set<std::string> kSpeculativeFlags = {"speculative", "num-speculative-tokens", "speculative-verify",
                                                        "speculative-sampling", "ngram-min", "ngram-max",
    "prefix-cache-dir", "prefix-cache-disk-size"};
void apply_speculative_flags(const Flags& f, EngineArgs& ea);

// The engine flags every engine command takes (model loading, cache, scheduling,
// speculative decoding; see `gannet generate --help`), applied over the environment's
// defaults, then validated. Throws UsageError naming the flag.
inline const std::set<std::string> kEngineValueFlags = {
    "threads", "kv-cache-memory", "max-num-seqs", "max-num-batched-tokens", "block-size", "max-model-len",
    "limit-images-per-prompt", "max-image-pixels",
    "async-scheduling", "quantize", "weight-memory", "exact-activations", "act-quant", "yoco-keep-tokens", "kv-cache-dtype",
    "speculative", "num-speculative-tokens", "speculative-verify", "speculative-sampling", "ngram-min", "ngram-max",
    "prefix-cache-dir", "prefix-cache-disk-size", "prefix-wait-steps", "prefix-state-snapshots", "expert-parallel", "ep-redundant-experts", "eplb-interval",
    "eplb-window", "dp", "mpi-timeout"};
inline const std::set<std::string> kEngineBoolFlags = {"no-yoco-replay", "no-kv-fake-quant", "enable-prefix-caching",
                                                        "no-prefix-caching"};
void apply_engine_flags(const Flags& f, EngineArgs& ea);

// Strict number parsing; throws UsageError naming the flag.
int64_t parse_int(const std::string& flag, const std::string& text);
double parse_double(const std::string& flag, const std::string& text);

}  // namespace gannet::cli
