#include "bench/grammar_bench.h"

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <memory>
#include <nlohmann/json.hpp>

#include "core/error.h"
#include "structured/constraint.h"
#include "structured/matcher.h"
#include "tokenizer/tokenizer.h"

namespace gannet::bench {

namespace {

using Clock = std::chrono::steady_clock;

double since_us(Clock::time_point t0) { return std::chrono::duration<double, std::micro>(Clock::now() - t0).count(); }

// Nearest rank: sorted[ceil(q n) - 1], in integer arithmetic (q in percent).
nlohmann::json summary(std::vector<double> v) {
  nlohmann::json j;
  if (v.empty()) return j;
  std::sort(v.begin(), v.end());
  auto rank = [&](int64_t pct) { return v[size_t((pct * int64_t(v.size()) + 99) / 100 - 1)]; };
  double sum = 0;
  for (double x : v) sum += x;
  j["p50"] = rank(50);
  j["p99"] = rank(99);
  j["max"] = v.back();
  j["mean"] = sum / double(v.size());
  j["n"] = v.size();
  return j;
}

}  // namespace

nlohmann::json run_grammar_bench(const GrammarBenchOptions& o) {
  const tokenizer::Tokenizer tok = tokenizer::Tokenizer::from_json_file(o.tokenizer);
  const int64_t V = o.vocab_size > 0 ? o.vocab_size : int64_t(tok.vocab_size());
  if (V < int64_t(tok.vocab_size()))
    fail("--vocab-size ", V, " is smaller than the tokenizer's vocabulary (", tok.vocab_size(), ")");
  std::vector<std::string> bytes(static_cast<size_t>(V));
  for (int32_t t = 0; t < int32_t(tok.vocab_size()); ++t)
    if (!tok.is_special(t)) bytes[size_t(t)] = tok.id_to_token(t);
  if (tok.eos_ids().empty()) fail(o.tokenizer, " names no EOS token");
  const int32_t eos = tok.eos_ids().front();
  auto vocab = std::make_shared<const structured::TokenVocab>(std::move(bytes), tok.eos_ids());

  std::ifstream in(o.suite);
  if (!in) fail("cannot open the schema suite ", o.suite);
  std::ofstream tokens_out;
  if (!o.write_tokens.empty()) {
    tokens_out.open(o.write_tokens);
    if (!tokens_out) fail("cannot write ", o.write_tokens);
  }
  std::vector<double> compile_ms, mask_us;
  const char* slow_env = std::getenv("GANNET_BENCH_SLOW_US");  // diagnostics: print masks slower than this
  const double slow_us = slow_env ? std::atof(slow_env) : 0;
  nlohmann::json failures = nlohmann::json::array(), token_failures = nlohmann::json::array(),
                 per_schema = nlohmann::json::array();
  std::vector<uint32_t> mask(size_t((V + 31) / 32));
  std::string line;
  int64_t index = -1;
  while (std::getline(in, line)) {
    if (line.find_first_not_of(" \t\r") == std::string::npos) continue;
    ++index;
    const nlohmann::ordered_json entry = nlohmann::ordered_json::parse(line);
    const std::string name = entry.value("name", "schema " + std::to_string(index));
    StructuredOutput so;
    so.kind = StructuredOutput::Kind::kJsonSchema;
    so.spec = entry.at("schema").dump();
    std::shared_ptr<structured::Automaton> g;
    const auto c0 = Clock::now();
    try {  // as the engine compiles: the grammar, then its automaton over the vocabulary
      g = std::make_shared<structured::Automaton>(structured::compile_structured(so), vocab);
      if (o.precompute) g->precompute();
    } catch (const Error& e) {
      failures.push_back({{"name", name}, {"error", e.what()}});
      continue;
    }
    const double ms = since_us(c0) / 1000;
    compile_ms.push_back(ms);
    double worst = 0;
    int64_t n_masks = 0;
    const auto& docs = entry.at("valid");
    for (size_t d = 0; d < docs.size(); ++d) {
      const std::vector<int32_t> ids = tok.encode(docs[d].get<std::string>());
      if (tokens_out) tokens_out << nlohmann::json{{"schema", index}, {"doc", d}, {"ids", ids}}.dump() << "\n";
      structured::Matcher m(g);  // a new matcher per document; the automaton is the grammar's
      auto timed_fill = [&] {
        const auto t0 = Clock::now();
        m.fill_next_token_bitmask(mask);
        const double us = since_us(t0);
        mask_us.push_back(us);
        if (slow_us > 0 && us > slow_us) std::fprintf(stderr, "slow mask: %s doc %zu after %lld tokens: %.0f us\n", name.c_str(), d, (long long)m.tokens_accepted(), us);
        worst = std::max(worst, us);
        ++n_masks;
      };
      bool ok = true;
      for (size_t k = 0; k < ids.size() && ok; ++k) {
        timed_fill();
        const int32_t t = ids[k];
        if (!((mask[size_t(t) / 32] >> (t % 32)) & 1u))
          token_failures.push_back({{"name", name}, {"doc", d}, {"pos", k}, {"kind", "mask_miss"}});
        if (!m.accept_token(t)) {
          token_failures.push_back({{"name", name}, {"doc", d}, {"pos", k}, {"kind", "rejected"}});
          ok = false;
        }
      }
      if (!ok) continue;
      timed_fill();
      if (!((mask[size_t(eos) / 32] >> (eos % 32)) & 1u))
        token_failures.push_back({{"name", name}, {"doc", d}, {"kind", "eos_not_allowed"}});
    }
    per_schema.push_back({{"name", name}, {"compile_ms", ms}, {"mask_us_max", worst}, {"n_masks", n_masks}});
  }
  nlohmann::json r;
  r["engine"] = "gannet";
  r["schemas"] = index + 1;
  r["compile_failures"] = failures;
  r["compile_ms"] = summary(compile_ms);
  r["mask_us"] = summary(mask_us);
  if (!mask_us.empty())
    r["mask_us"]["over_100us"] =
        double(std::count_if(mask_us.begin(), mask_us.end(), [](double us) { return us > 100; })) / double(mask_us.size());
  r["token_failures"] = token_failures;
  r["per_schema"] = per_schema;
  return r;
}

}  // namespace gannet::bench
