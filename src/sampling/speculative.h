// Speculative decoding's drafting for models without a drafter, and the rule that
// verifies drafts.
//
// N-gram (prompt lookup) drafting: the last n tokens of a sequence's history (prompt and
// outputs) are looked up earlier in that history, longest n first (ngram_max down to
// ngram_min), the latest occurrence winning; the tokens that followed it are the drafts,
// continued periodically where the copy runs into the suffix itself (so a repeating
// pattern drafts k tokens). Deterministic and per sequence, so batching cannot change it.
//
// Verification of deterministic drafts (a point-mass draft distribution q = 1 on draft d):
// each verified row samples its token exactly as plain decoding would at that output
// position (same logits bits, same penalties history, same counter-based draw), and the
// draft is accepted while the sample equals it; the first sample that differs (or the
// one after the last draft) ends the run. This is rejection sampling with the target's
// own draw as the coupling: accept d with probability p(d) = min(1, p(d) / q(d)), and on
// rejection the sample, conditioned on differing from d, has the residual distribution
// (p - q)+ normalised. Hence the output distribution is the target's, and the tokens are
// bit-identical to plain decoding for every sampling setting, greedy or not.
//
// Verification of sampled drafts (a drafter with distributions: DSpark with
// --speculative-sampling rejection). Draft i is drawn from q, the drafter's logits processed
// exactly as the request's sampling processes the target's (penalties over the history
// with the drafts before it, temperature, top-k, top-p, min-p: the same fixed-point
// weights). Row j of the target gives p likewise. Draft d is accepted iff
// u < p(d) / q(d) for a uniform u; on rejection the token is drawn from the residual
// (p - q)+ in exact integer arithmetic, and the run ends; after the last draft the next
// token is drawn from p as plain sampling draws it. The output distribution is the
// target's (the standard speculative sampling argument); the tokens differ from plain
// decoding's, but stay a function of (seed, stream, position) and the logits bits, so they
// are reproducible and batch-invariant. Each draw has its own random stream:
//   draft:    counter_random(seed ^ kDraftNamespace, stream, position)
//   accept:   counter_random(seed ^ kAcceptNamespace, stream, position)
//   residual: counter_random(seed ^ kResidualNamespace, stream, position)
// with position the output position of the token drawn or checked; the plain draw
// (counter_random(seed, stream, position)) serves the token after the last draft.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "sampling/sampler.h"

namespace gannet::sampling {

struct NgramConfig {
  int ngram_min = 1;  // shortest suffix looked up
  int ngram_max = 4;  // longest
};

// k drafts for `history` into *out (cleared first); none when no suffix of length
// ngram_min..ngram_max occurs earlier in it.
void ngram_draft(std::span<const int32_t> history, int k, const NgramConfig& cfg, std::vector<int32_t>* out);

// Row j of a verify step as plain decoding samples it: the logits of position start + j,
// for the token at start + j + 1 (its output position, and the history before it).
inline void verify_row_input(SampleInput& in, const float* logits, int64_t vocab, std::span<const int32_t> history,
                             int64_t prompt_len, int64_t start, int64_t j) {
  const std::span<const int32_t> before = history.subspan(0, size_t(start + j + 1));
  in.logits = logits + j * vocab;
  in.position = uint64_t(start + j + 1 - prompt_len);
  in.prompt_ids = before.subspan(0, size_t(prompt_len));
  in.output_ids = before.subspan(size_t(prompt_len));
}

// The default of the verifiers' `before` hook: no grammar constraint.
struct NoConstraint {
  void operator()(int64_t, SampleInput&) const {}
};

// Verifies deterministic drafts. `history` holds the sequence's tokens up to and including
// the last one (at index `start`, not yet computed) followed by count - 1 drafts; row j of
// `logits` ([count, vocab]) is the model's output at position start + j. Row by row, samples
// as plain decoding would for the token at start + j + 1 (output position start + j + 1 -
// prompt_len, penalties over the history before it), calls emit(j, out), and stops after
// the first sample that differs from the draft it checks, or after the last row. `in`
// carries params, seed, stream and eos ids. Returns the samples taken: 1 + accepted drafts.
// before(j, in) runs before row j is sampled (the engine sets in.allowed: the grammar mask
// after the history up to start + j).
template <typename Emit, typename Before = NoConstraint>
int verify_point_drafts(Sampler& sampler, SampleInput in, const float* logits, int64_t vocab,
                        std::span<const int32_t> history, int64_t prompt_len, int64_t start, int64_t count,
                        SampleOutput* out, Emit&& emit, Before&& before = Before{}) {
  int taken = 0;
  for (int64_t j = 0; j < count; ++j) {
    verify_row_input(in, logits, vocab, history, prompt_len, start, j);
    before(j, in);
    sampler.sample(in, out);
    emit(j, *out);
    ++taken;
    if (j + 1 == count || out->token != history[size_t(start + j + 1)]) break;
  }
  return taken;
}

inline constexpr uint64_t kDraftNamespace = 0x6472616674000000ull;     // "draft"
inline constexpr uint64_t kAcceptNamespace = 0x6163636570740000ull;    // "accept"
inline constexpr uint64_t kResidualNamespace = 0x7265736964000000ull;  // "resid"

// Draws a draft from q: in.logits are the drafter's logits for the token at output position
// in.position, in.prompt_ids / output_ids its history (drafts before it included).
int32_t draw_draft(Sampler& sampler, SampleInput in);

// Scratch of verify_sampled_drafts: two weight rows.
struct RejectionScratch {
  std::vector<uint64_t> wp, wq;
};

// One checked draft: true if d is accepted; else *token gets the residual draw.
bool check_sampled_draft(Sampler& sampler, RejectionScratch& scratch, const SampleInput& target,
                         const float* draft_logits, int32_t d, int32_t* token);

// As verify_point_drafts, for drafts drawn by draw_draft: draft_logits [count - 1, vocab]
// are the drafter's logits for the drafts in the history. With a grammar, before(j, in)
// sets the mask, which then applies to p and q alike (draw_draft drew under the same one).
template <typename Emit, typename Before = NoConstraint>
int verify_sampled_drafts(Sampler& sampler, RejectionScratch& scratch, SampleInput in, const float* logits,
                          const float* draft_logits, int64_t vocab, std::span<const int32_t> history,
                          int64_t prompt_len, int64_t start, int64_t count, SampleOutput* out, Emit&& emit,
                          Before&& before = Before{}) {
  int taken = 0;
  for (int64_t j = 0; j < count; ++j) {
    verify_row_input(in, logits, vocab, history, prompt_len, start, j);
    before(j, in);
    ++taken;
    if (j + 1 == count) {
      sampler.sample(in, out);
      emit(j, *out);
      break;
    }
    const int32_t d = history[size_t(start + j + 1)];
    int32_t token = d;
    const bool ok = check_sampled_draft(sampler, scratch, in, draft_logits + j * vocab, d, &token);
    sampler.fill(in, token, out);
    emit(j, *out);
    if (!ok) break;
  }
  return taken;
}

}  // namespace gannet::sampling
