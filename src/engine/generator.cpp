#include "engine/generator.h"

#include <algorithm>
#include <chrono>
#include <random>

#include "core/error.h"

namespace gannet::engine {

namespace {
double seconds_since(std::chrono::steady_clock::time_point t) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t).count();
}
}  // namespace

Generator::Generator(model::Model& model, ThreadPool* pool, int64_t max_chunk, int block_size)
    : model_(model), pool_(pool), max_chunk_(max_chunk), block_size_(block_size),
      sampler_(model.config().vocab_size) {
  if (max_chunk < 1) fail("prefill chunk must be >= 1 token");
  model_.reserve(max_chunk_, max_chunk_);
  logits_.resize(size_t(max_chunk_ * model.config().vocab_size));
  pos_.resize(size_t(max_chunk_));
  seq_.assign(size_t(max_chunk_), 0);
  rows_.resize(size_t(max_chunk_));
}

void Generator::ensure_capacity(int64_t tokens) {
  const int64_t blocks = (tokens + block_size_ - 1) / block_size_;
  if (cache_ && cache_->num_blocks() >= blocks) return;
  cache_.reset();
  cache_ = std::make_unique<cache::CacheEngine>(model_.cache_spec(), blocks, block_size_);
  block_table_.resize(size_t(blocks));
  for (int64_t b = 0; b < blocks; ++b) block_table_[size_t(b)] = int32_t(b);
}

void Generator::run(const int32_t* ids, int64_t start, int64_t n, bool all_logits, float* logits) {
  kernels::AttentionSeq seq{block_table_.data()};
  for (int64_t i = 0; i < n; ++i) {
    pos_[size_t(i)] = int32_t(start + i);
    rows_[size_t(i)] = int32_t(i);
  }
  model::Batch b;
  b.n_tokens = n;
  b.token_ids = ids + start;
  b.positions = pos_.data();
  b.token_seq = seq_.data();
  b.n_seqs = 1;
  b.seqs = &seq;
  b.n_logits = all_logits ? n : 1;
  b.logit_rows = all_logits ? rows_.data() : rows_.data() + (n - 1);
  model_.forward(b, cache_->views(), logits, pool_);
}

static void check_prompt(const model::Model& m, const std::vector<int32_t>& prompt, int64_t extra) {
  const auto& c = m.config();
  if (prompt.empty()) fail("the prompt is empty");
  for (int32_t t : prompt)
    if (t < 0 || t >= c.vocab_size) fail("prompt token id ", t, " is outside the vocabulary (size ", c.vocab_size, ")");
  if (int64_t(prompt.size()) + extra > c.max_position_embeddings)
    fail("prompt of ", prompt.size(), " tokens plus max_tokens ", extra, " exceeds the model's context of ",
         c.max_position_embeddings, " tokens");
}

std::vector<float> Generator::prompt_logits(const std::vector<int32_t>& prompt) {
  check_prompt(model_, prompt, 0);
  const int64_t n = int64_t(prompt.size()), v = model_.config().vocab_size;
  ensure_capacity(n);
  std::vector<float> out(size_t(n * v));
  for (int64_t s = 0; s < n; s += max_chunk_) {
    int64_t c = std::min(max_chunk_, n - s);
    run(prompt.data(), s, c, true, out.data() + s * v);
  }
  return out;
}

GenerationResult Generator::generate(const std::vector<int32_t>& prompt, const SamplingParams& params,
                                     const std::function<void(int32_t)>& on_token) {
  params.validate();
  check_prompt(model_, prompt, params.max_tokens);
  GenerationResult r;
  r.seed = params.seed ? *params.seed : (uint64_t(std::random_device{}()) << 32 | std::random_device{}());
  const auto& cfg = model_.config();
  const int64_t n = int64_t(prompt.size());
  ensure_capacity(n + params.max_tokens);
  std::vector<int32_t> ids(prompt);
  ids.reserve(size_t(n + params.max_tokens));

  auto t0 = std::chrono::steady_clock::now();
  for (int64_t s = 0; s < n; s += max_chunk_) run(ids.data(), s, std::min(max_chunk_, n - s), false, logits_.data());
  r.prefill_seconds = seconds_since(t0);

  auto t1 = std::chrono::steady_clock::now();
  for (int64_t step = 0;; ++step) {
    int32_t tok = sampler_.sample(logits_.data(), params, r.seed, 0, uint64_t(step));
    ids.push_back(tok);
    r.token_ids.push_back(tok);
    if (on_token) on_token(tok);
    bool eos = std::find(cfg.eos_token_ids.begin(), cfg.eos_token_ids.end(), tok) != cfg.eos_token_ids.end();
    if (eos && !params.ignore_eos) {
      r.finish_reason = "stop";
      break;
    }
    if (int64_t(r.token_ids.size()) >= params.max_tokens) {
      r.finish_reason = "length";
      break;
    }
    run(ids.data(), int64_t(ids.size()) - 1, 1, false, logits_.data());
  }
  r.decode_seconds = seconds_since(t1);
  return r;
}

}  // namespace gannet::engine
