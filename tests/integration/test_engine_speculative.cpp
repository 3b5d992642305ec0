// Speculative decoding with n-gram drafts changes nothing a request returns: token ids,
// logprobs (bit for bit), texts, finish and stop reasons equal decoding without it, for
// greedy and seeded sampling with penalties, n > 1, max_tokens, stop token ids and stop
// strings that cut inside an accepted run; alone or batched, with small chunk budgets,
// under preemption, on 1 or 2 threads, async scheduling on or off, k = 1, 4 or 8. The
// drafts really are accepted (counted), and nothing leaks.
// labels: exact sanitize
#include <gtest/gtest.h>

#include <map>
#include <random>

#include "core/error.h"
#include "engine/engine.h"
#include "tiny_checkpoint.h"

using namespace gannet;

namespace {

const std::string& tiny_model() { return gannet::test_support::tiny_checkpoint("llama", 3); }

struct Case {
  std::vector<int32_t> prompt;
  SamplingParams params;
};

// Repetitive prompts (a random pattern of 1-5 tokens repeated, after a random lead-in) so
// that drafts exist; the tiny random model also repeats itself, so drafts are accepted.
std::vector<Case> make_cases(int count) {
  std::mt19937 rng(4321);
  std::vector<Case> cases;
  for (int i = 0; i < count; ++i) {
    Case c;
    const int lead = int(rng() % 12), period = 1 + int(rng() % 5), reps = 2 + int(rng() % 10);
    for (int j = 0; j < lead; ++j) c.prompt.push_back(int32_t(2 + rng() % 120000));
    std::vector<int32_t> pattern;
    for (int j = 0; j < period; ++j) pattern.push_back(int32_t(2 + rng() % 120000));
    for (int r = 0; r < reps; ++r) c.prompt.insert(c.prompt.end(), pattern.begin(), pattern.end());
    SamplingParams& p = c.params;
    p.max_tokens = 1 + int(rng() % 40);
    p.ignore_eos = true;
    switch (i % 4) {
      case 0:
        p.temperature = 0;
        p.logprobs = 3;
        break;
      case 1:
        p.temperature = 1.0;
        p.seed = 500 + uint64_t(i);
        p.top_k = 20;
        p.logprobs = 2;
        break;
      case 2:
        p.temperature = 0.7;
        p.seed = 900 + uint64_t(i);
        p.repetition_penalty = 1.3;
        p.presence_penalty = 0.5;
        p.frequency_penalty = 0.2;
        break;
      default:
        p.temperature = 0;
        p.min_tokens = std::min<int64_t>(2, p.max_tokens);
        p.stop_token_ids = {pattern[0]};
        break;
    }
    if (i == 5) p.n = 3;
    if (i % 6 == 4) p.num_speculative_tokens = i % 12 == 4 ? 0 : 2;  // per request: none, or fewer
    cases.push_back(c);
  }
  return cases;
}

EngineArgs args(bool async, const std::string& speculative = "off", int64_t k = 0) {
  EngineArgs a;
  a.async_scheduling = async;
  a.model = tiny_model();
  a.quiet = true;
  a.threads = 2;
  a.kv_cache_memory = 64ull << 20;
  a.block_size = 16;
  a.speculative = speculative;
  a.num_speculative_tokens = k;
  return a;
}

void expect_no_leaks(const engine::Engine& e) {
  EXPECT_EQ(e.block_manager().num_free_blocks(), e.block_manager().num_blocks());
  EXPECT_EQ(e.block_manager().num_free_slots(), e.block_manager().num_state_slots());
  EXPECT_EQ(e.scheduler().num_running(), 0u);
  EXPECT_EQ(e.scheduler().num_deferred_releases(), 0u);
  EXPECT_EQ(e.num_executor_rows(), 0u);
}

struct SpecRun {
  std::map<std::string, RequestOutput> out;
  int64_t drafted = 0, accepted = 0, steps = 0;
};

SpecRun run(const EngineArgs& a, const std::vector<Case>& cases, const std::vector<int>& which) {
  engine::Engine e(a);
  for (int i : which) e.add_request("r" + std::to_string(i), cases[size_t(i)].prompt, cases[size_t(i)].params);
  SpecRun r;
  while (e.has_unfinished())
    for (RequestOutput& o : e.step())
      if (o.finished) {
        r.drafted += o.metrics.spec_drafted;
        r.accepted += o.metrics.spec_accepted;
        r.steps += o.metrics.spec_steps;
        r.out[o.request_id] = o;
      }
  expect_no_leaks(e);
  return r;
}

void expect_same(const std::map<std::string, RequestOutput>& ref, const std::map<std::string, RequestOutput>& got,
                 const std::string& what) {
  ASSERT_EQ(ref.size(), got.size()) << what;
  for (auto& [id, a] : ref) {
    const RequestOutput& b = got.at(id);
    ASSERT_EQ(a.outputs.size(), b.outputs.size()) << what << " " << id;
    for (size_t k = 0; k < a.outputs.size(); ++k) {
      const CompletionOutput &x = a.outputs[k], &y = b.outputs[k];
      ASSERT_EQ(x.token_ids, y.token_ids) << what << " " << id << " sample " << k;
      EXPECT_EQ(x.text, y.text) << what << " " << id;
      EXPECT_EQ(x.finish_reason, y.finish_reason) << what << " " << id;
      EXPECT_EQ(x.stop_reason, y.stop_reason) << what << " " << id;
      EXPECT_EQ(x.cumulative_logprob, y.cumulative_logprob) << what << " " << id;
      ASSERT_EQ(x.logprobs.size(), y.logprobs.size()) << what << " " << id;
      for (size_t p = 0; p < x.logprobs.size(); ++p) {
        ASSERT_EQ(x.logprobs[p].logprob, y.logprobs[p].logprob) << what << " " << id << " pos " << p;
        ASSERT_EQ(x.logprobs[p].top.size(), y.logprobs[p].top.size());
        for (size_t t = 0; t < x.logprobs[p].top.size(); ++t) {
          EXPECT_EQ(x.logprobs[p].top[t].id, y.logprobs[p].top[t].id);
          EXPECT_EQ(x.logprobs[p].top[t].logprob, y.logprobs[p].top[t].logprob);
        }
      }
    }
  }
}

// Each request alone, one after the other, in one engine.
std::map<std::string, RequestOutput> run_each_alone(const EngineArgs& a, const std::vector<Case>& cases,
                                                    const std::vector<int>& which) {
  engine::Engine e(a);
  std::map<std::string, RequestOutput> out;
  for (int i : which) {
    e.add_request("r" + std::to_string(i), cases[size_t(i)].prompt, cases[size_t(i)].params);
    while (e.has_unfinished())
      for (RequestOutput& o : e.step())
        if (o.finished) out[o.request_id] = o;
  }
  expect_no_leaks(e);
  return out;
}

constexpr int kCases = 24;

std::vector<int> all_cases() {
  std::vector<int> v;
  for (int i = 0; i < kCases; ++i) v.push_back(i);
  return v;
}

// Plain decoding, every request alone, synchronous.
const std::map<std::string, RequestOutput>& reference() {
  static const std::map<std::string, RequestOutput> ref = [] {
    auto cases = make_cases(kCases);
    return run_each_alone(args(false), cases, all_cases());
  }();
  return ref;
}

}  // namespace

TEST(EngineSpeculative, NgramEqualsPlainBatchedAsyncOnAndOff) {
  auto cases = make_cases(kCases);
  for (bool async : {false, true}) {
    SpecRun r = run(args(async, "ngram", 4), cases, all_cases());
    expect_same(reference(), r.out, async ? "async on" : "async off");
    // The machinery was exercised: many drafts, most of them accepted on this model.
    EXPECT_GT(r.drafted, 100);
    EXPECT_GT(r.accepted, r.drafted / 3);
    EXPECT_LT(r.accepted, r.drafted);  // and some rejected
  }
}

// num_speculative_tokens per request: 0 drafts nothing for that request, 2 at most two.
TEST(EngineSpeculative, PerRequestDraftLimit) {
  auto cases = make_cases(kCases);
  SpecRun r = run(args(true, "ngram", 8), cases, all_cases());
  for (int i = 0; i < kCases; ++i) {
    const RequestOutput& o = r.out.at("r" + std::to_string(i));
    const auto& want = cases[size_t(i)].params.num_speculative_tokens;
    if (!want) continue;
    if (*want == 0) {
      EXPECT_EQ(o.metrics.spec_drafted, 0) << i;
    }
    EXPECT_LE(int64_t(o.metrics.spec_drafted_at.size()), int64_t(*want)) << i;
  }
}

TEST(EngineSpeculative, NgramEqualsPlainAloneForEveryK) {
  auto cases = make_cases(kCases);
  for (int64_t k : {1, 8})
  {
    const std::vector<int> some = {0, 1, 2, 3, 5, 7};
    std::map<std::string, RequestOutput> ref;
    for (int i : some) ref["r" + std::to_string(i)] = reference().at("r" + std::to_string(i));
    expect_same(ref, run_each_alone(args(true, "ngram", k), cases, some), "k " + std::to_string(k) + " alone");
  }
}

TEST(EngineSpeculative, NgramEqualsPlainUnderSmallBudgetsAndPreemption) {
  auto cases = make_cases(kCases);
  for (bool async : {false, true}) {
    EngineArgs a = args(async, "ngram", 4);
    a.max_num_batched_tokens = 7;  // chunked prompts, and drafts cut to the step's budget
    expect_same(reference(), run(a, cases, all_cases()).out, "budget 7");
    EngineArgs b = args(async, "ngram", 4);
    b.kv_cache_memory = uint64_t(20) * 16 * 512;  // 20 blocks of 16 tokens: preemptions
    b.max_num_seqs = 8;
    SpecRun r = run(b, cases, all_cases());
    expect_same(reference(), r.out, "small KV budget");
    EngineArgs c = args(async, "ngram", 4);
    c.threads = 1;
    expect_same(reference(), run(c, cases, all_cases()).out, "1 thread");
  }
}

TEST(EngineSpeculative, PreemptionHappensUnderTheSmallBudget) {
  auto cases = make_cases(kCases);
  EngineArgs b = args(true, "ngram", 4);
  b.kv_cache_memory = uint64_t(20) * 16 * 512;
  b.max_num_seqs = 8;
  engine::Engine e(b);
  for (int i = 0; i < kCases; ++i) e.add_request("r" + std::to_string(i), cases[size_t(i)].prompt, cases[size_t(i)].params);
  std::map<std::string, RequestOutput> out;
  while (e.has_unfinished())
    for (RequestOutput& o : e.step())
      if (o.finished) out[o.request_id] = o;
  EXPECT_GT(e.scheduler().num_preemptions(), 0) << "the budget was meant to force preemptions";
  expect_same(reference(), out, "preempted");
  expect_no_leaks(e);
}

// Stops that land inside an accepted run: a step returns more tokens than the request
// keeps. Stop token ids (after min_tokens), stop strings and max_tokens each cut there,
// and the result equals plain decoding's.
TEST(EngineSpeculative, StopsInsideAnAcceptedRun) {
  std::vector<int32_t> prompt;
  for (int r = 0; r < 6; ++r)
    for (int32_t t : {1234, 5678, 91011}) prompt.push_back(t);
  SamplingParams greedy;
  greedy.temperature = 0;
  greedy.max_tokens = 40;
  greedy.ignore_eos = true;
  std::vector<Case> free = {{prompt, greedy}};
  const RequestOutput free_run = run(args(false), free, {0}).out.at("r0");
  const auto& ids = free_run.outputs[0].token_ids;
  ASSERT_GE(ids.size(), 30u);
  // The most frequent output token: stopping at it after min_tokens lands inside runs.
  std::map<int32_t, int> freq;
  for (int32_t t : ids) ++freq[t];
  int32_t common = ids[0];
  for (auto& [t, c] : freq)
    if (c > freq[common]) common = t;
  std::vector<Case> cases;
  for (int m : {2, 4, 6, 9, 13, 17}) {
    SamplingParams p = greedy;
    p.stop_token_ids = {common};
    p.min_tokens = m;
    cases.push_back({prompt, p});
  }
  for (int m : {3, 7, 11, 19, 26}) {
    SamplingParams p = greedy;
    p.max_tokens = m;
    cases.push_back({prompt, p});
  }
  const std::string& text = free_run.outputs[0].text;
  ASSERT_GE(text.size(), 12u);
  // Stop strings of 2-4 copies of the token with the longest run: the run is drafted from
  // itself, so the stop fires on a token in the middle of a verified run.
  size_t best = 0, best_len = 0;
  for (size_t i = 0; i < ids.size();) {
    size_t j = i;
    while (j < ids.size() && ids[j] == ids[i]) ++j;
    if (j - i > best_len) best = i, best_len = j - i;
    i = j;
  }
  ASSERT_GE(best_len, 5u) << "the free run was expected to repeat a token";
  const std::vector<int32_t> one = {ids[best]};
  const std::string piece = engine::Engine(args(false)).tokenizer()->decode(one, false);
  ASSERT_FALSE(piece.empty());
  for (int copies : {2, 3, 4}) {
    SamplingParams p = greedy;
    std::string stop;
    for (int c = 0; c < copies; ++c) stop += piece;
    p.stop = {stop};
    cases.push_back({prompt, p});
  }
  for (size_t at : {text.size() / 3, text.size() / 2, 2 * text.size() / 3}) {
    SamplingParams p = greedy;
    p.stop = {text.substr(at, 2)};
    cases.push_back({prompt, p});
  }
  std::vector<int> which;
  for (int i = 0; i < int(cases.size()); ++i) which.push_back(i);
  const std::map<std::string, RequestOutput> ref = run_each_alone(args(false), cases, which);
  int cut_inside = 0;
  for (bool async : {false, true}) {
    SpecRun r = run(args(async, "ngram", 8), cases, which);
    expect_same(ref, r.out, async ? "stops, async on" : "stops, async off");
    for (auto& [id, o] : r.out) {
      const int64_t kept = int64_t(o.outputs[0].token_ids.size()) - 1;  // after the prefill's token
      if (o.metrics.spec_steps + o.metrics.spec_accepted > kept) ++cut_inside;

    }
  }
  EXPECT_GT(cut_inside, 0) << "no stop landed inside an accepted run";
}

TEST(EngineSpeculative, RefusedWhereItCannotRun) {
  EngineArgs a = args(false, "dspark");
  EXPECT_THROW(engine::Engine e(a), Error);
  try {
    engine::Engine e(a);
  } catch (const Error& err) {
    EXPECT_NE(std::string(err.what()).find("DSpark"), std::string::npos) << err.what();
  }
  EngineArgs b = args(false, "ngram");
  b.speculative_verify = "varlen";
  EXPECT_THROW(b.validate(), Error);
  EngineArgs c = args(false, "off", 3);
  EXPECT_THROW(c.validate(), Error);
  EngineArgs d = args(false, "medusa");
  EXPECT_THROW(d.validate(), Error);
  SamplingParams p;
  p.num_speculative_tokens = 17;
  EXPECT_THROW(p.validate(), Error);
  p.num_speculative_tokens = -1;
  EXPECT_THROW(p.validate(), Error);
}

// Requests that end exactly at the context limit: with asynchronous scheduling the engine
// plans steps for a sequence whose executor row may already hold every token (accepted
// drafts the plan did not know of); those rows compute nothing and never reach past the
// context. Results equal plain decoding's.
TEST(EngineSpeculative, RequestsEndingAtTheContextLimit) {
  std::vector<Case> cases;
  for (int i = 0; i < 6; ++i) {
    Case c;
    for (int r = 0; r < 8; ++r)
      for (int32_t t : {300 + i, 301 + i}) c.prompt.push_back(t);
    c.params.temperature = 0;
    c.params.ignore_eos = true;
    c.params.max_tokens = 64 - int(c.prompt.size());  // prompt + outputs = the whole context
    cases.push_back(c);
  }
  std::vector<int> all = {0, 1, 2, 3, 4, 5};
  EngineArgs plain = args(false);
  plain.max_model_len = 64;
  const auto ref = run_each_alone(plain, cases, all);
  for (bool async : {false, true})
    for (int64_t k : {4, 8}) {
      EngineArgs a = args(async, "ngram", k);
      a.max_model_len = 64;
      SpecRun r = run(a, cases, all);
      expect_same(ref, r.out, "context limit, k " + std::to_string(k));
      EXPECT_GT(r.accepted, 0);
    }
}
