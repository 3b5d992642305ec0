#include "sampling/fixed_point_draw.h"

#include <algorithm>
#include <limits>

#if defined(__SSE2__)
#include <emmintrin.h>
#endif

#include "core/error.h"

namespace gannet::sampling {

namespace {

using u128 = unsigned __int128;
using Candidate = FixedPointDraw::Candidate;

bool canonical_before(const Candidate& a, const Candidate& b) {
  if (a.weight != b.weight) return a.weight > b.weight;
  if (a.logit != b.logit) return a.logit > b.logit;
  return a.id < b.id;
}

int bucket_of(uint64_t w) { return int(std::bit_width(w)); }

// P in the top-p rule: p in fixed point with kTopPBits fraction bits.
uint64_t top_p_fixed(double p) { return uint64_t(p * 0x1p32 + 0.5); }

// The min-p rule's smallest kept weight: ceil(min_p * 2^40), exact (scaling by 2^40 is).
uint64_t min_p_fixed(double min_p) { return uint64_t(std::ceil(min_p * 0x1p40)); }

// How many leading candidates of c[0, n) top-p keeps. `before`: weight of the (kept)
// candidates ahead of c[0]; target = P * W. The overall first candidate is always kept.
int64_t top_p_keep(const Candidate* c, int64_t n, uint64_t before, u128 target) {
  uint64_t cum = before;
  for (int64_t j = 0; j < n; ++j) {
    const bool first = before == 0 && j == 0;
    if (!first && !((u128(cum) << kTopPBits) < target)) return j;
    cum += c[j].weight;
  }
  return n;
}

// Candidates are sorted by weight descending, so min-p keeps a prefix.
int64_t min_p_keep(const Candidate* c, int64_t n, uint64_t min_weight) {
  int64_t j = 0;
  while (j < n && c[j].weight >= min_weight) ++j;
  return j;
}

// The first of c[0, n) whose cumulative weight (from `before`) exceeds t.
int32_t pick(const Candidate* c, int64_t n, uint64_t before, uint64_t t) {
  uint64_t acc = before;
  for (int64_t j = 0; j < n; ++j) {
    acc += c[j].weight;
    if (t < acc) return c[j].id;
  }
  GANNET_CHECK(false, "draw threshold ", t, " beyond the kept weight ", acc);
  return -1;
}

// Selection without sorting. The canonical order is strict (ids differ), so after a
// partition around a pivot everything left of it comes before it and everything right
// after; a search that recurses into one side only (quickselect) finds the j-th element
// or a weight threshold in expected linear time, and leaves the elements before the
// answer in front of it (as a set), which is all top-p, min-p and the draw need. Ranges
// of kSmallRange or fewer, and ranges that keep partitioning badly, are sorted instead.
constexpr int64_t kSmallRange = 24;

// Partitions c[lo, hi) around a median-of-three pivot; returns the pivot's final index p
// (c[lo, p) before it, c(p, hi) after it) and the weight of c[lo, p) in *left_weight.
int64_t partition_canonical(Candidate* c, int64_t lo, int64_t hi, uint64_t* left_weight) {
  const int64_t mid = lo + (hi - lo) / 2, last = hi - 1;
  if (canonical_before(c[mid], c[lo])) std::swap(c[mid], c[lo]);
  if (canonical_before(c[last], c[lo])) std::swap(c[last], c[lo]);
  if (canonical_before(c[mid], c[last])) std::swap(c[mid], c[last]);  // median now at last
  const Candidate pivot = c[last];
  int64_t p = lo;
  uint64_t w = 0;
  for (int64_t j = lo; j < last; ++j)
    if (canonical_before(c[j], pivot)) {
      w += c[j].weight;
      std::swap(c[p++], c[j]);
    }
  std::swap(c[p], c[last]);
  *left_weight = w;
  return p;
}

// Partitions to depth 2 log2(n) + 8 before a range is given up on and sorted.
int partition_budget(int64_t n) { return 2 * int(std::bit_width(uint64_t(n))) + 8; }

// A large range of one bit-length bucket is first narrowed by the six weight bits after
// the leading one (a key that falls with the weight, so its 64 classes are contiguous runs
// of the canonical order): one pass sums each class, the search finds the class where it
// ends, and one pass moves that class between those before it and those after it. What is
// left for quickselect is about 1/64 of the bucket.
constexpr int64_t kNarrowFrom = 512;

int sub_key(uint64_t w, int shift) { return int((w >> shift) & 63); }

// Rearranges c[0, n) (weights of one bit length) as [classes above s | class s | below s]
// for the first class s, from the top, whose end satisfies ends_in(weight before it +
// its weight); returns s's range [*a, *b) and the weight before it in *before_s. When no
// class does, the range is empty at n.
template <typename EndsIn>
void narrow_to_class(Candidate* c, int64_t n, EndsIn ends_in, int64_t* a, int64_t* b, uint64_t* before_s) {
  const int bits = int(std::bit_width(c[0].weight));
  const int shift = bits > 7 ? bits - 7 : 0;
  uint64_t sums[64] = {};
  for (int64_t j = 0; j < n; ++j) sums[sub_key(c[j].weight, shift)] += c[j].weight;
  uint64_t cum = 0;
  int s = -1;
  for (int k = 63; k >= 0; --k) {
    if (ends_in(cum + sums[k])) {
      s = k;
      break;
    }
    cum += sums[k];
  }
  *before_s = cum;
  if (s < 0) {
    *a = *b = n;
    return;
  }
  // Three-way partition by class: above s first, then s, then below.
  int64_t lo = 0, mid = 0, hi = n;
  while (mid < hi) {
    const int k = sub_key(c[mid].weight, shift);
    if (k > s) std::swap(c[lo++], c[mid++]);
    else if (k == s) ++mid;
    else std::swap(c[mid], c[--hi]);
  }
  *a = lo;
  *b = hi;
}

// The draw: the candidate of c[0, n) (canonical order) whose inclusive cumulative weight,
// counted from `before`, first exceeds t; as pick() on the sorted range.
int32_t select_weighted(Candidate* c, int64_t n, uint64_t before, uint64_t t) {
  if (n >= kNarrowFrom) {
    int64_t a = 0, b = 0;
    uint64_t above = 0;
    narrow_to_class(c, n, [&](uint64_t cum) { return t < before + cum; }, &a, &b, &above);
    if (a < b) {
      c += a;
      n = b - a;
      before += above;
    }
  }
  int64_t lo = 0, hi = n;
  for (int budget = partition_budget(n); hi - lo > kSmallRange && budget > 0; --budget) {
    uint64_t left = 0;
    const int64_t p = partition_canonical(c, lo, hi, &left);
    if (t < before + left) {
      hi = p;
    } else if (t < before + left + c[p].weight) {
      return c[p].id;
    } else {
      before += left + c[p].weight;
      lo = p + 1;
    }
  }
  std::sort(c + lo, c + hi, canonical_before);
  return pick(c + lo, hi - lo, before, t);
}

// Top-p over one bucket: the number of leading candidates of c[0, n) (canonical order)
// that top_p_keep() would keep, with exactly those moved to c[0, keep).
int64_t select_top_p(Candidate* c, int64_t n, uint64_t before, u128 target) {
  // Weights here are >= 1, so the weight before a candidate rises strictly along the
  // order and is 0 only for the very first one, which top_p_keep() always keeps.
  auto kept = [target](uint64_t cum) { return cum == 0 || (u128(cum) << kTopPBits) < target; };
  int64_t lo = 0, hi = n;
  if (n >= kNarrowFrom) {
    // The cut lies in the first class after which the weight so far reaches the target:
    // every candidate above it is kept, every one below it is not.
    int64_t a = 0, b = 0;
    uint64_t above = 0;
    narrow_to_class(c, n, [&](uint64_t cum) { return !((u128(before + cum) << kTopPBits) < target); }, &a, &b, &above);
    lo = a;
    hi = b;
    before += above;
  }
  for (int budget = partition_budget(n); hi - lo > kSmallRange && budget > 0; --budget) {
    uint64_t left = 0;
    const int64_t p = partition_canonical(c, lo, hi, &left);
    if (kept(before + left)) {  // the pivot is kept, so is all before it
      before += left + c[p].weight;
      lo = p + 1;
    } else {
      hi = p;
    }
  }
  std::sort(c + lo, c + hi, canonical_before);
  return lo + top_p_keep(c + lo, hi - lo, before, target);  // its first-candidate rule: before is 0 only at c[0]
}

// Min-p over c[0, n): those with weight >= min_weight, moved to the front; their count.
// (Canonical order puts higher weights first, so they are a leading run of it.)
int64_t select_min_p(Candidate* c, int64_t n, uint64_t min_weight) {
  return std::partition(c, c + n, [min_weight](const Candidate& x) { return x.weight >= min_weight; }) - c;
}

// floor(r * total / 2^64): uniform over [0, total) up to a bias below total / 2^64.
uint64_t scale_random(uint64_t r, uint64_t total) { return uint64_t((u128(r) * total) >> 64); }

}  // namespace

// Max value first (vectorised where SSE2 is there: maxps keeps the second operand on
// NaN, which the unordered-compare mask reports), then its lowest index.
int32_t checked_argmax(const float* logits, int64_t n) {
  GANNET_CHECK(n > 0);
  float best = -std::numeric_limits<float>::infinity();
  bool nan = false;
  int64_t i = 0;
#if defined(__SSE2__)
  __m128 m0 = _mm_set1_ps(best), m1 = m0, bad = _mm_setzero_ps();
  for (; i + 8 <= n; i += 8) {
    const __m128 a = _mm_loadu_ps(logits + i), b = _mm_loadu_ps(logits + i + 4);
    bad = _mm_or_ps(bad, _mm_cmpunord_ps(a, b));
    m0 = _mm_max_ps(m0, a);
    m1 = _mm_max_ps(m1, b);
  }
  alignas(16) float lanes[4];
  _mm_store_ps(lanes, _mm_max_ps(m0, m1));
  for (float x : lanes) best = x > best ? x : best;
  nan = _mm_movemask_ps(bad) != 0;
#endif
  for (; i < n; ++i) {
    nan |= std::isnan(logits[i]);
    best = logits[i] > best ? logits[i] : best;
  }
  GANNET_CHECK(!nan, "NaN in a logits row of ", n);
  GANNET_CHECK(std::isfinite(best), "logits row max is ", best, " (all masked or overflow)");
  int64_t at = 0;
  while (logits[at] != best) ++at;
  return int32_t(at);
}

FixedPointDraw::FixedPointDraw(int64_t vocab_size)
    : vocab_(vocab_size), weights_(size_t(vocab_size)), bucket_of_(size_t(vocab_size)), cand_(size_t(vocab_size)) {
  GANNET_CHECK(vocab_size > 0 && vocab_size < (int64_t(1) << 23), "vocab ", vocab_size);
  ids_.reserve(size_t(vocab_size));
}

int32_t FixedPointDraw::draw(const float* logits, const DrawFilters& f, uint64_t random) {
  GANNET_CHECK(f.temperature > 0, "temperature ", f.temperature);
  if (f.top_k > 0 && f.top_k < vocab_) return draw_top_k(logits, f, random);
  return draw_bucketed(logits, f, random);
}

uint64_t FixedPointDraw::kept_weights(const float* logits, const DrawFilters& f, uint64_t* w) {
  GANNET_CHECK(f.temperature > 0, "temperature ", f.temperature);
  const float m = logits[checked_argmax(logits, vocab_)];
  const double inv_t = 1.0 / f.temperature;
  const bool top_k = f.top_k > 0 && f.top_k < vocab_;
  uint64_t total = 0;
  kernels::fixed_point_weights(logits, vocab_, m, inv_t, -std::numeric_limits<double>::infinity(), w);
  for (int64_t i = 0; i < vocab_; ++i) total += w[i];
  if (!top_k && f.top_p >= 1.0 && f.min_p <= 0.0) return total;
  // K: the first top_k ids by (logit desc, id asc); then the canonical order over K.
  int64_t n = 0;
  for (int64_t i = 0; i < vocab_; ++i) cand_[size_t(n++)] = {w[i], logits[i], int32_t(i)};
  if (top_k) {
    std::partial_sort(cand_.begin(), cand_.begin() + f.top_k, cand_.begin() + n, [](const Candidate& a, const Candidate& b) {
      return a.logit != b.logit ? a.logit > b.logit : a.id < b.id;
    });
    n = f.top_k;
  }
  std::sort(cand_.begin(), cand_.begin() + n, canonical_before);
  uint64_t in_k = 0;
  for (int64_t j = 0; j < n; ++j) in_k += cand_[size_t(j)].weight;
  int64_t keep = n;
  if (f.top_p < 1.0) keep = top_p_keep(cand_.data(), keep, 0, u128(top_p_fixed(f.top_p)) * in_k);
  if (f.min_p > 0.0) keep = min_p_keep(cand_.data(), keep, min_p_fixed(f.min_p));
  std::fill(w, w + vocab_, uint64_t(0));
  total = 0;
  for (int64_t j = 0; j < keep; ++j) total += (w[cand_[size_t(j)].id] = cand_[size_t(j)].weight);
  return total;
}

int32_t FixedPointDraw::draw_top_k(const float* logits, const DrawFilters& f, uint64_t random) {
  const float m = logits[checked_argmax(logits, vocab_)];  // also rules out NaN for the sorts
  const int64_t k = f.top_k;
  auto better = [logits](int32_t a, int32_t b) { return logits[a] != logits[b] ? logits[a] > logits[b] : a < b; };
  // Streaming selection: keep a buffer of candidates; when full, cut it to the best k and
  // from then on admit only logits above the k-th (ids rise, so an equal logit loses).
  const int64_t cap = std::min(vocab_, std::max(2 * k, k + 1024));
  ids_.clear();
  bool have_cut = false;
  float cut = 0;
  for (int64_t i = 0; i < vocab_; ++i) {
    if (have_cut && !(logits[i] > cut)) continue;
    ids_.push_back(int32_t(i));
    if (int64_t(ids_.size()) == cap) {
      std::nth_element(ids_.begin(), ids_.begin() + (k - 1), ids_.end(), better);
      ids_.resize(size_t(k));
      cut = logits[ids_[size_t(k - 1)]];
      have_cut = true;
    }
  }
  if (int64_t(ids_.size()) > k) {
    std::nth_element(ids_.begin(), ids_.begin() + (k - 1), ids_.end(), better);
    ids_.resize(size_t(k));
  }
  const double inv_t = 1.0 / f.temperature;
  uint64_t total = 0;
  for (int64_t j = 0; j < k; ++j) {
    const int32_t id = ids_[size_t(j)];
    cand_[size_t(j)] = {fixed_point_weight(logits[id], m, inv_t), logits[id], id};
    total += cand_[size_t(j)].weight;
  }
  std::sort(cand_.begin(), cand_.begin() + k, canonical_before);
  int64_t n = k;
  if (f.top_p < 1.0) n = top_p_keep(cand_.data(), n, 0, u128(top_p_fixed(f.top_p)) * total);
  if (f.min_p > 0.0) n = min_p_keep(cand_.data(), n, min_p_fixed(f.min_p));
  uint64_t kept = 0;
  for (int64_t j = 0; j < n; ++j) kept += cand_[size_t(j)].weight;
  return pick(cand_.data(), n, 0, scale_random(random, kept));
}

int64_t FixedPointDraw::gather_bucket(const float* logits, int bucket) {
  const uint8_t* bk = bucket_of_.data();
  Candidate* out = cand_.data();
  int64_t n = 0, i = 0;
#if defined(__SSE2__)
  // Sixteen bucket bytes per compare; each match's id from the mask.
  const __m128i want = _mm_set1_epi8(char(bucket));
  for (; i + 16 <= vocab_; i += 16) {
    unsigned mask = unsigned(_mm_movemask_epi8(_mm_cmpeq_epi8(_mm_loadu_si128(reinterpret_cast<const __m128i*>(bk + i)), want)));
    for (; mask; mask &= mask - 1) {
      const int64_t id = i + std::countr_zero(mask);
      out[n++] = {weights_[size_t(id)], logits[id], int32_t(id)};
    }
  }
#endif
  for (; i < vocab_; ++i)
    if (bk[i] == bucket) out[n++] = {weights_[size_t(i)], logits[i], int32_t(i)};
  return n;
}

// Weights grouped by bit length: a higher bucket's weights all exceed a lower one's, so
// buckets are contiguous runs of the canonical order and only the bucket where a cut or
// the draw lands needs ordering, and there only as far as quickselect takes it (the
// chosen token is defined by the order; any search that respects it finds the same one).
// Bucket sums are integers, hence exact in any order.
int32_t FixedPointDraw::draw_bucketed(const float* logits, const DrawFilters& f, uint64_t random) {
  const float m = logits[checked_argmax(logits, vocab_)];
  const double inv_t = 1.0 / f.temperature;
  // With min-p alone, a token whose logit is clearly below the min-p cut can never be
  // kept and no total over all tokens is needed: it is given weight 0 without an exp.
  // The margin (1e-6 in log space, against exp's ~1e-16 error) keeps this exact for
  // min_p >= 2^-20, where min_p * 2^40 * 1e-6 exceeds the 0.5 of the rounding.
  double skip_below = -std::numeric_limits<double>::infinity();
  if (f.top_p >= 1.0 && f.min_p >= 0x1p-20) skip_below = std::log(f.min_p) - 1e-6;
  const int64_t v = vocab_;
  uint64_t* const weights = weights_.data();
  uint8_t* const buckets = bucket_of_.data();
  kernels::fixed_point_weights(logits, v, m, inv_t, skip_below, weights);
  // Four interleaved histograms shorten the store-to-load chains on a popular bucket.
  uint64_t sums[4][kBuckets] = {};
  for (int64_t i = 0; i < v; ++i) {
    const uint64_t w = weights[i];
    const int b = bucket_of(w);
    buckets[i] = uint8_t(b);
    sums[i & 3][b] += w;
  }
  uint64_t total = 0;
  for (int b = 0; b < kBuckets; ++b) {
    bucket_weight_[size_t(b)] = sums[0][b] + sums[1][b] + sums[2][b] + sums[3][b];
    total += bucket_weight_[size_t(b)];
  }

  // Kept so far: every bucket above `cut`, plus cand_[0, cut_keep) of bucket `cut`
  // (sorted in cand_ whenever cut > 0). Bucket 0 holds the zero weights, never kept.
  int cut = 0;
  int64_t cut_keep = 0;
  if (f.top_p < 1.0) {
    const u128 target = u128(top_p_fixed(f.top_p)) * total;
    uint64_t before = 0;
    for (int b = kBuckets - 1; b >= 1; --b) {
      const uint64_t after = before + bucket_weight_[size_t(b)];
      if ((u128(after) << kTopPBits) >= target) {  // the next bucket's first is cut
        const int64_t n = gather_bucket(logits, b);
        cut = b;
        cut_keep = select_top_p(cand_.data(), n, before, target);
        break;
      }
      before = after;
    }
  }
  if (f.min_p > 0.0) {
    const uint64_t q = min_p_fixed(f.min_p);
    const int bq = bucket_of(q);
    if (bq > cut) {
      const int64_t n = gather_bucket(logits, bq);
      cut = bq;
      cut_keep = select_min_p(cand_.data(), n, q);
    } else if (bq == cut) {
      cut_keep = select_min_p(cand_.data(), cut_keep, q);
    }
  }

  uint64_t kept = 0;
  for (int b = kBuckets - 1; b > cut; --b) kept += bucket_weight_[size_t(b)];
  if (cut > 0)
    for (int64_t j = 0; j < cut_keep; ++j) kept += cand_[size_t(j)].weight;
  const uint64_t t = scale_random(random, kept);
  uint64_t before = 0;
  for (int b = kBuckets - 1; b > cut; --b) {
    if (t < before + bucket_weight_[size_t(b)])
      return select_weighted(cand_.data(), gather_bucket(logits, b), before, t);
    before += bucket_weight_[size_t(b)];
  }
  return select_weighted(cand_.data(), cut_keep, before, t);
}

}  // namespace gannet::sampling
