// Confidence-scheduled variable verification (DSpark's `mtp_varlen`): how many of each
// request's drafts one step verifies.
//
// Request r's draft j (1-based) survives verification with probability a(r, j), the
// product of its drafter confidences c(r, 1..j). A step that verifies B tokens in all
// takes t(B) seconds (a measured profile), and yields in expectation
// tau = sum over requests of (1 + sum of a(r, j) over the depths it verifies) tokens. The
// choice greedily adds (request, depth) pairs in decreasing survival probability (ties:
// lower request, then lower depth, so each request's choice stays a prefix) while the
// rate tau / t(B) keeps rising, and stops at the first pair that does not raise it.
#pragma once

#include <cstdint>
#include <vector>

namespace gannet::engine {

// conf[r][i]: confidence (a probability in [0, 1]) of request r's draft i + 1.
// step_seconds[b - 1]: seconds a step verifying b tokens takes, for b = 1 .. size (a step
// needs at least one token per request: its last token). Returns the depth (drafts to
// verify, 0 .. conf[r].size()) per request. Throws gannet::Error on confidences outside
// [0, 1], or a profile shorter than the number of requests or not positive.
std::vector<int> choose_verify_depths(const std::vector<std::vector<double>>& conf,
                                      const std::vector<double>& step_seconds);

}  // namespace gannet::engine
