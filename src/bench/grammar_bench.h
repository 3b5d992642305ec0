// gannet bench grammar: JSON Schema compile time and per-token mask time on a schema suite
// (one schema per line with valid documents), with a model's vocabulary. The protocol
// matches tools/bench_grammar_xgrammar.py, so the two can be compared on the same schemas
// and token sequences: per schema, compile (compact JSON) timed; per valid document, a new
// matcher, then per token one timed mask fill, a check that the token is allowed, and its
// acceptance; after the last token one more timed fill, which must allow EOS. Compile time
// includes what the engine does at compile (Automaton::precompute, unless turned off).
// Diagnostics: GANNET_BENCH_SLOW_US=N prints each mask slower than N us to stderr.
#pragma once

#include <cstdint>
#include <string>

#include <nlohmann/json_fwd.hpp>

namespace gannet::bench {

struct GrammarBenchOptions {
  std::string suite;          // JSON lines {"name", "schema", "valid": [docs], ...}
  std::string tokenizer;      // tokenizer.json
  int64_t vocab_size = 0;     // the model's (>= the tokenizer's); 0: the tokenizer's
  std::string write_tokens;   // if set: {"schema", "doc", "ids"} lines, for the XGrammar script
  bool precompute = true;     // compile as the engine does: Automaton::precompute() after the grammar
};

// {"engine": "gannet", "schemas", "compile_failures", "compile_ms": {p50, p99, max, mean},
//  "mask_us": {p50, p99, max, mean, n, over_100us (the share of masks slower than 100 us)}, "token_failures", "per_schema": [...]}
nlohmann::json run_grammar_bench(const GrammarBenchOptions& o);

}  // namespace gannet::bench
