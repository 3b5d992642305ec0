// Request counts for the heavy engine tests. Under ASan + UBSan (make test-sanitize, which
// defines GANNET_TEST_SANITIZED) code runs 2-3x slower, and what those builds look for
// (use after free, overflows, leaks, undefined behaviour on every path) shows with fewer
// requests through the same paths; bit-exactness at full size is checked by the g++ and
// clang++ stages, which run the full counts.
#pragma once

namespace gannet::test_support {

#ifdef GANNET_TEST_SANITIZED
inline constexpr bool kSanitized = true;
#else
inline constexpr bool kSanitized = false;
#endif

// `full` in ordinary builds, `sanitized` under the sanitizers.
constexpr int scaled(int full, int sanitized) { return kSanitized ? sanitized : full; }

}  // namespace gannet::test_support
