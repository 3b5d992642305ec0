// Scheduler and block manager without a model: random arrivals, lengths, n, aborts and
// budgets, with the invariants checked after every step:
//  - a step's tokens never exceed max_num_batched_tokens, its sequences max_num_seqs;
//  - every running sequence's blocks cover the positions it has computed;
//  - block reference counts equal the number of running tables holding each block, and
//    free + referenced blocks = all blocks; state slots likewise;
//  - decodes are planned before prompt chunks;
//  - when everything has finished, all blocks and slots are free again;
//  - the plans' row changes (added, removed, tables) describe a batch the fake executor
//    can run: every planned row is held, at the planned epoch, with its tokens known.
// Half of the worlds run pipelined like asynchronous scheduling: step N+1 is planned
// before step N's result is applied, with aborts and finishes landing in between.
#include <gtest/gtest.h>

#include <deque>
#include <map>
#include <memory>
#include <random>
#include <set>

#include "cache/block_manager.h"
#include "engine/request.h"
#include "engine/scheduler.h"

using namespace gannet;
using namespace gannet::engine;

namespace {

struct World {
  std::vector<std::unique_ptr<Request>> requests;
  std::vector<Sequence*> all_seqs() const {
    std::vector<Sequence*> v;
    for (auto& r : requests)
      for (auto& s : r->seqs) v.push_back(s.get());
    return v;
  }
};

// `waiting`: the sequences that were waiting when the plan was made (their rows are
// admissions, prefills even when a prefix-cache hit leaves one position to compute).
void check_invariants(const World& w, const cache::BlockManager& bm, const SchedulerConfig& cfg, const StepPlan& plan,
                      const Scheduler& sched, const std::set<int64_t>& waiting = {}) {
  ASSERT_LE(plan.num_tokens, cfg.max_num_batched_tokens);
  ASSERT_LE(int64_t(plan.rows.size()), cfg.max_num_seqs);
  bool seen_prefill = false;
  for (const PlanRow& r : plan.rows) {
    const Sequence* seq = sched.find_running(r.seq_id);
    ASSERT_NE(seq, nullptr) << "planned sequence " << r.seq_id << " is not running";
    // A decode computes a sequence's one uncomputed token and samples; a prompt chunk of
    // one position that samples can only be a whole one-token prompt (start 0).
    const bool decode = r.count == 1 && r.num_samples > 0 && r.start > 0 && !waiting.count(r.seq_id);
    ASSERT_FALSE(decode && seen_prefill) << "decode planned after a prompt chunk";
    if (!decode) seen_prefill = true;
    ASSERT_GE(seq->table.num_tokens, r.start + r.count);
    ASSERT_GE(int64_t(seq->table.blocks.size()) * bm.block_size(), r.start + r.count);
  }
  std::map<int32_t, int> refs;
  int64_t slots = 0, running = 0;
  for (Sequence* s : w.all_seqs()) {
    if (s->status == SeqStatus::kRunning) {
      ++running;
      ASSERT_GE(s->table.state_slot, 0);
      ++slots;
      ASSERT_GE(s->table.num_tokens, s->num_computed);
      for (int32_t b : s->table.blocks) refs[b]++;
    } else {
      ASSERT_TRUE(s->table.blocks.empty()) << "a non-running sequence holds blocks";
      ASSERT_LT(s->table.state_slot, 0);
    }
  }
  ASSERT_LE(running, cfg.max_num_seqs);
  // Blocks of ended sequences wait for their last step: they are neither free nor
  // referenced by a running table, so the books close only without deferred releases.
  if (sched.num_deferred_releases() == 0) {
    int64_t referenced = 0;
    for (auto [b, n] : refs) {
      ASSERT_EQ(bm.ref_count(b), n) << "block " << b;
      ++referenced;
    }
    ASSERT_EQ(referenced + bm.num_free_blocks(), bm.num_blocks());
    ASSERT_EQ(slots + bm.num_free_slots(), bm.num_state_slots());
  }
}

// The executor's side of the protocol without a model: rows come and go with the plans,
// a planned row must be held at its epoch with its tokens known, and a sampled token
// extends the row. It also stands in for the K/V: every position a row computes writes a
// fingerprint of the row's tokens up to it into the slot its block table names, and every
// position before a row's start must already hold its own prefix's fingerprint, whoever
// wrote it (an earlier chunk, a forked parent, a prefix-cache hit). So a cache hit on the
// wrong block, a write into a shared or cached block, or a copy-on-write gone wrong
// shows up as a wrong read.
//
// With check_state it also stands in for per-sequence state (a model's window rings): a
// state slot holds the fingerprints of the positions computed into it, addressed by
// position like a ring, and a row must find its own prefix's fingerprint at the position
// before its start, unless it starts afresh (position 0, or a prefix-cache replay's
// window_from). The first row of a sequence admitted on a hit without replay must find
// its slot exactly at its start (a restored state snapshot): a snapshot saved before or
// after the saving sequence reached that position, or restored after the forward pass,
// shows up as a wrong state.
struct FakeExecutor {
  FakeExecutor(int64_t num_blocks, int block_size) : bs(block_size), kv(size_t(num_blocks * block_size), 0) {}
  struct Row {
    uint64_t epoch;
    std::vector<int32_t> tokens;
    std::vector<uint64_t> fps;  // fps[p]: fingerprint of tokens[0 .. p]
    std::vector<int32_t> table;
    int32_t slot = -1;
    int64_t window_from = 0;
    bool first = true, restored = false;  // restored: its plan copied a snapshot into its slot
  };
  int bs;
  std::vector<uint64_t> kv;  // [num_blocks * block_size]
  std::map<int64_t, Row> rows;
  int64_t reads_checked = 0;
  bool check_state = false;
  int32_t snapshot_slot0 = 1 << 30;  // state slots from here on hold snapshots
  std::map<int32_t, std::vector<uint64_t>> state;  // slot -> fingerprint per position (0: none)
  int64_t restores_checked = 0;

  static uint64_t mix(uint64_t x) {
    x ^= x >> 31;
    x *= 0x7fb5d329728ea185ull;
    x ^= x >> 27;
    x *= 0x81dadef4bc2dd44dull;
    return x ^ (x >> 33);
  }
  static void extend(Row& r) {
    while (r.fps.size() < r.tokens.size()) {
      const size_t p = r.fps.size();
      r.fps.push_back(mix((p ? r.fps.back() : 0x1234u) + uint64_t(uint32_t(r.tokens[p])) * 0x9e3779b97f4a7c15ull) | 1);
    }
  }
  uint64_t& slot(const Row& r, int64_t p) { return kv[size_t(int64_t(r.table[size_t(p / bs)]) * bs + p % bs)]; }

  StepResult run(const StepPlan& plan) {
    for (int64_t id : plan.removed) rows.erase(id);
    for (const RowAdd& a : plan.added) {
      EXPECT_EQ(rows.count(a.seq_id), 0u) << "row " << a.seq_id << " added twice";
      Row& r = rows[a.seq_id];
      r = Row{a.epoch, a.tokens, {}, {}};
      r.slot = a.state_slot;
      r.window_from = a.window_from;
      for (auto [src, dst] : plan.state_copies) r.restored |= dst == a.state_slot && src >= snapshot_slot0;
      extend(r);
    }
    for (const cache::BlockCopy& c : plan.copies)
      std::copy(kv.begin() + int64_t(c.src) * bs, kv.begin() + int64_t(c.src + 1) * bs, kv.begin() + int64_t(c.dst) * bs);
    for (auto [src, dst] : plan.state_copies) state[dst] = state[src];
    StepResult res;
    res.step_id = plan.step_id;
    for (const PlanRow& p : plan.rows) {
      auto it = rows.find(p.seq_id);
      EXPECT_NE(it, rows.end()) << "planned row " << p.seq_id << " not held";
      if (it == rows.end()) continue;
      Row& row = it->second;
      if (p.table_offset >= 0) {
        row.table.resize(size_t(p.table_from));
        row.table.insert(row.table.end(), plan.tables.begin() + p.table_offset,
                         plan.tables.begin() + p.table_offset + p.table_len);
      }
      EXPECT_EQ(row.epoch, p.epoch);
      EXPECT_LE(p.start + p.count, int64_t(row.tokens.size())) << "sequence " << p.seq_id << " planned past its tokens";
      EXPECT_LE(p.start + p.count, int64_t(row.table.size()) * bs) << "sequence " << p.seq_id << " planned past its blocks";
      if (::testing::Test::HasFailure()) return res;
      for (int64_t q = 0; q < p.start; ++q, ++reads_checked)
        if (slot(row, q) != row.fps[size_t(q)]) {
          ADD_FAILURE() << "sequence " << p.seq_id << " reads position " << q << " (block " << row.table[size_t(q / bs)]
                        << ") holding another prefix's K/V";
          return res;
        }
      for (int64_t q = p.start; q < p.start + p.count; ++q) slot(row, q) = row.fps[size_t(q)];
      if (check_state) {
        std::vector<uint64_t>& st = state[row.slot];
        if (p.start == 0 || (row.window_from > 0 && p.start == row.window_from)) {
          st.clear();
        } else {
          const bool restored = row.first && row.restored;
          const bool ok = int64_t(st.size()) >= p.start && st[size_t(p.start - 1)] == row.fps[size_t(p.start - 1)] &&
                          (!restored || int64_t(st.size()) == p.start);
          restores_checked += restored;
          if (!ok) {
            ADD_FAILURE() << "sequence " << p.seq_id << " starts at " << p.start << " with slot " << row.slot
                          << " holding " << st.size() << " positions" << (restored ? " (a restored snapshot)" : "")
                          << " of another state";
            return res;
          }
        }
        if (int64_t(st.size()) < p.start + p.count) st.resize(size_t(p.start + p.count), 0);
        for (int64_t q = p.start; q < p.start + p.count; ++q) st[size_t(q)] = row.fps[size_t(q)];
      }
      row.first = false;
      RowResult r;
      r.seq_id = p.seq_id;
      r.epoch = p.epoch;
      r.count = p.count;
      r.sample_offset = int64_t(res.samples.size());
      r.num_samples = p.num_samples;
      for (int k = 0; k < p.num_samples; ++k)
        res.samples.push_back({int32_t((p.seq_id * 31 + k + p.start) % 1000), 0.f, 0, 0});
      if (p.num_samples) {
        row.tokens.resize(size_t(p.start + p.count));
        row.fps.resize(row.tokens.size());
        row.tokens.push_back(res.samples[size_t(r.sample_offset)].token);
        extend(row);
      }
      res.rows.push_back(r);
    }
    return res;
  }
};

struct Totals {
  int64_t requests = 0, preemptions = 0, forks = 0, aborted = 0, hit_tokens = 0, evictions = 0, reads_checked = 0;
  int64_t snapshot_restores = 0, restores_checked = 0, replayed = 0;
};

void run_random(uint64_t seed, Totals& totals) {
  std::mt19937_64 rng(seed);
  const bool pipelined = seed % 2 == 0;
  SchedulerConfig cfg;
  cfg.max_num_seqs = 1 + int64_t(rng() % 16);
  cfg.max_num_batched_tokens = 1 + int64_t(rng() % 96);
  cfg.max_logit_rows = cfg.max_num_seqs + 32;
  cfg.prompt_logprob_chunk = 32;
  const int block_size = 1 + int(rng() % 16);
  const int64_t num_blocks = 8 + int64_t(rng() % 64);
  // A quarter of the worlds run without chunked prefill; the engine then requires a token
  // budget of at least the context, here the whole cache.
  cfg.chunked_prefill = rng() % 4 != 0;
  if (!cfg.chunked_prefill) cfg.max_num_batched_tokens = std::max<int64_t>(cfg.max_num_batched_tokens, num_blocks * block_size);
  // Half of the worlds cache prefixes; their prompts often start with one of a few shared
  // prefixes, so hits, shared cached blocks and evictions are common.
  cfg.prefix_caching = (seed / 2) % 2 == 0;
  // Prefix-aware admission: off, or waits of 1 to 4 steps.
  cfg.prefix_wait_steps = (seed / 4) % 3 == 0 ? 0 : int64_t(1 + seed % 4);
  // Half of those model per-sequence state: a hit replays 1 to 5 positions (or is not
  // used when that reaches before 0), and two thirds of them keep state snapshots
  // (prompt and decode ones).
  const bool stateful = cfg.prefix_caching && (seed / 8) % 2 == 1;
  if (stateful) {
    const int64_t replay = 1 + int64_t(seed % 5);
    cfg.replay_start = [replay](int64_t hit, int64_t) { return hit - replay > 0 ? hit - replay : -1; };
    cfg.num_snapshots = int64_t(seed % 3) * 3;
    cfg.snapshot_usable = [](int64_t, int64_t) { return true; };
  }
  std::vector<std::vector<int32_t>> shared(3);
  for (auto& p : shared)
    for (int i = 0; i < 48; ++i) p.push_back(int32_t(rng() % 1000));
  cache::BlockManager bm(num_blocks, block_size, cfg.max_num_seqs, int64_t(rng() % 3));
  cfg.snapshot_slot0 = int32_t(cfg.max_num_seqs);
  if (cfg.num_snapshots > 0) cfg.rolling_slot0 = int32_t(cfg.max_num_seqs + cfg.num_snapshots);
  Scheduler sched(cfg, bm);
  World w;
  FakeExecutor exec(num_blocks, block_size);
  exec.check_state = stateful;
  exec.snapshot_slot0 = cfg.snapshot_slot0;
  StepPlan plans[2];
  std::deque<StepResult> in_flight;
  std::set<Request*> live;
  int arrivals = 0;
  for (int step = 0; step < 4000 && (arrivals < 60 || !live.empty()); ++step) {
    // Random arrivals (sizes that fit the whole budget, as the engine guarantees).
    if (arrivals < 60 && rng() % 3 == 0) {
      auto req = std::make_unique<Request>();
      req->id = "r" + std::to_string(arrivals++);
      req->params.n = 1 + int(rng() % 3);
      if (req->params.n > cfg.max_num_seqs) req->params.n = 1;
      req->params.max_tokens = 1 + int64_t(rng() % 20);
      if (rng() % 4 == 0) req->params.prompt_logprobs = 1;
      const int64_t cap = num_blocks * block_size;
      int64_t len = 1 + int64_t(rng() % 60);
      if (len + req->params.max_tokens > cap) len = std::max<int64_t>(1, cap - req->params.max_tokens);
      if (len + req->params.max_tokens > cap) continue;
      if (rng() % 3 != 0) {
        const auto& pre = shared[size_t(rng() % shared.size())];
        req->prompt_ids.assign(pre.begin(), pre.begin() + std::min<int64_t>(len, int64_t(pre.size())));
      }
      while (int64_t(req->prompt_ids.size()) < len) req->prompt_ids.push_back(int32_t(rng() % 1000));
      auto seq = std::make_unique<Sequence>();
      seq->id = sched.new_seq_id();
      seq->request = req.get();
      seq->tokens = req->prompt_ids;
      seq->prompt_len = len;
      sched.add(seq.get());
      req->seqs.push_back(std::move(seq));
      live.insert(req.get());
      w.requests.push_back(std::move(req));
    }
    StepPlan& plan = plans[step % 2];
    std::set<int64_t> waiting;
    for (Sequence* s : w.all_seqs())
      if (s->status == SeqStatus::kWaiting) waiting.insert(s->id);
    sched.schedule(plan);
    check_invariants(w, bm, cfg, plan, sched, waiting);
    if (!plan.empty()) in_flight.push_back(exec.run(plan));
    // Pipelined worlds apply a step's result only after the next step is planned.
    while (in_flight.size() > (pipelined ? 1u : 0u) || (!in_flight.empty() && plan.empty())) {
      // Random aborts between planning and results: their results must be dropped.
      if (!live.empty() && rng() % 25 == 0) {
        auto it = live.begin();
        std::advance(it, long(rng() % live.size()));
        for (auto& s : (*it)->seqs)
          if (!s->finished()) sched.abort(s.get());
        live.erase(it);
      }
      for (Sequence* s : sched.update(in_flight.front()))
        if (s->num_outputs() >= s->request->params.max_tokens) sched.finish(s);
      in_flight.pop_front();
      for (auto it = live.begin(); it != live.end();) {
        if ((*it)->finished()) it = live.erase(it);
        else ++it;
      }
    }
    check_invariants(w, bm, cfg, StepPlan{}, sched);
    if (::testing::Test::HasFatalFailure()) return;
  }
  while (!in_flight.empty()) {
    sched.update(in_flight.front());
    in_flight.pop_front();
  }
  EXPECT_TRUE(live.empty()) << "requests still unfinished after 4000 steps (livelock?)";
  totals.requests += int64_t(w.requests.size());
  totals.preemptions += sched.num_preemptions();
  totals.hit_tokens += sched.prefix_stats().hit_tokens;
  totals.evictions += bm.counters().evictions;
  totals.reads_checked += exec.reads_checked;
  totals.snapshot_restores += sched.prefix_stats().snapshot_restores;
  totals.restores_checked += exec.restores_checked;
  totals.replayed += sched.prefix_stats().replayed_tokens;
  if (!stateful) {
    EXPECT_EQ(sched.prefix_stats().replayed_tokens, 0);
    EXPECT_EQ(sched.prefix_stats().snapshot_saves, 0);
  }
  if (!cfg.prefix_caching) {
    EXPECT_EQ(sched.prefix_stats().hit_tokens, 0);
  }
  for (auto& r : w.requests) totals.forks += int64_t(r->seqs.size()) - 1;
  EXPECT_EQ(sched.num_deferred_releases(), 0u);
  EXPECT_EQ(bm.num_free_blocks(), bm.num_blocks());
  EXPECT_EQ(bm.num_free_slots(), bm.num_state_slots());
  std::set<int64_t> ids;  // sequence ids, forked samples included, never repeat
  for (auto& r : w.requests) {
    for (auto& s : r->seqs) {
      EXPECT_LE(s->num_outputs(), r->params.max_tokens);
      EXPECT_TRUE(ids.insert(s->id).second) << "sequence id " << s->id << " used twice";
    }
  }
}

}  // namespace

TEST(SchedulerRandom, InvariantsHoldEveryStep) {
  Totals t;
  for (uint64_t seed = 1; seed <= 40; ++seed) {
    SCOPED_TRACE("seed " + std::to_string(seed));
    run_random(seed, t);
    if (HasFatalFailure()) return;
  }
  // The random worlds must actually exercise the interesting paths.
  EXPECT_GT(t.requests, 1000);
  EXPECT_GT(t.preemptions, 50);
  EXPECT_GT(t.forks, 100);
  EXPECT_GT(t.hit_tokens, 2000);
  EXPECT_GT(t.evictions, 100);
  EXPECT_GT(t.reads_checked, 100000);
  EXPECT_GT(t.replayed, 100);
  EXPECT_GT(t.snapshot_restores, 20);
  EXPECT_EQ(t.restores_checked, t.snapshot_restores) << "every restore's first row checked";
  std::printf("%lld requests, %lld preemptions, %lld forked samples, %lld tokens from cached blocks, %lld evictions, "
              "%lld replayed positions, %lld snapshot restores\n",
              (long long)t.requests, (long long)t.preemptions, (long long)t.forks, (long long)t.hit_tokens,
              (long long)t.evictions, (long long)t.replayed, (long long)t.snapshot_restores);
}

TEST(BlockManager, CopyOnWriteAndForkRefcounts) {
  cache::BlockManager bm(10, 4, 4, 0);
  cache::BlockTable a, b;
  bm.admit(a, 6);  // 2 blocks, second half full
  ASSERT_EQ(a.blocks.size(), 2u);
  bm.fork(a, b);
  EXPECT_EQ(bm.ref_count(a.blocks[0]), 2);
  EXPECT_EQ(bm.ref_count(a.blocks[1]), 2);
  std::vector<cache::BlockCopy> copies;
  bm.grow(b, 7, copies);  // writes position 6 in the shared second block: copy it
  ASSERT_EQ(copies.size(), 1u);
  EXPECT_EQ(copies[0].src, a.blocks[1]);
  EXPECT_EQ(copies[0].dst, b.blocks[1]);
  EXPECT_NE(a.blocks[1], b.blocks[1]);
  EXPECT_EQ(bm.ref_count(a.blocks[0]), 2);
  EXPECT_EQ(bm.ref_count(a.blocks[1]), 1);
  copies.clear();
  bm.grow(a, 7, copies);  // a is now the only owner: no copy
  EXPECT_TRUE(copies.empty());
  bm.grow(a, 9, copies);  // position 8 starts a new block
  EXPECT_TRUE(copies.empty());
  EXPECT_EQ(a.blocks.size(), 3u);
  bm.release(a);
  bm.release(b);
  EXPECT_EQ(bm.num_free_blocks(), 10);
  EXPECT_EQ(bm.num_free_slots(), 4);
}

// Speculative decoding's rejected drafts: truncate drops whole blocks past the kept
// positions (freed only when no one else holds them), marks the table for the executor,
// and a shared last block is copied again before the next write.
TEST(BlockManager, TruncateKeepsRefcountsAndCopyOnWrite) {
  cache::BlockManager bm(10, 4, 4, 0);
  cache::BlockTable a, b;
  bm.admit(a, 6);  // blocks 0-1, positions 0-5
  bm.fork(a, b);   // b shares both
  std::vector<cache::BlockCopy> copies;
  bm.grow(b, 13, copies);  // b: private copy of block 1, plus two new blocks (positions to 12)
  ASSERT_EQ(copies.size(), 1u);
  ASSERT_EQ(b.blocks.size(), 4u);
  const int32_t b2 = b.blocks[2], b3 = b.blocks[3];
  EXPECT_EQ(bm.num_free_blocks(), 10 - 2 - 3);
  b.mark_synced();
  bm.truncate(b, 9);  // positions 0-8: blocks 0-2 stay, block 3 goes back
  EXPECT_EQ(b.num_tokens, 9);
  ASSERT_EQ(b.blocks.size(), 3u);
  EXPECT_EQ(b.blocks[2], b2);
  EXPECT_EQ(bm.ref_count(b3), 0);
  EXPECT_EQ(bm.num_free_blocks(), 10 - 2 - 2);
  bm.truncate(b, 20);  // never grows
  EXPECT_EQ(b.num_tokens, 9);
  bm.truncate(b, 3);  // into the block still shared with a: a keeps it
  ASSERT_EQ(b.blocks.size(), 1u);
  EXPECT_EQ(bm.ref_count(a.blocks[0]), 2);
  EXPECT_EQ(b.dirty_from, 1);
  EXPECT_FALSE(b.changed_since_sync());  // nothing to send: the executor never reads past its positions
  copies.clear();
  bm.grow(b, 5, copies);  // writes position 3 of the shared block 0: copied first
  ASSERT_EQ(copies.size(), 1u);
  EXPECT_EQ(copies[0].src, a.blocks[0]);
  EXPECT_NE(b.blocks[0], a.blocks[0]);
  EXPECT_TRUE(b.changed_since_sync());
  EXPECT_EQ(bm.ref_count(a.blocks[0]), 1);
  bm.release(a);
  bm.release(b);
  EXPECT_EQ(bm.num_free_blocks(), 10);
  EXPECT_EQ(bm.num_free_slots(), 4);
}

TEST(BlockManager, AdmissionKeepsTheWatermark) {
  cache::BlockManager bm(10, 4, 8, 2);
  EXPECT_TRUE(bm.can_admit(32));   // 8 blocks, leaves 2
  EXPECT_FALSE(bm.can_admit(33));  // 9 blocks would eat into the watermark
  cache::BlockTable t;
  bm.admit(t, 32);
  EXPECT_TRUE(bm.can_grow(t, 40));  // running sequences may use the watermark
  EXPECT_FALSE(bm.can_grow(t, 41));
  bm.release(t);
}

namespace {

// Drives a scheduler with a fake executor until every request finishes or `max_steps`.
// Returns the number of steps taken, or -1 on a stall.
int64_t drive(Scheduler& sched, cache::BlockManager& bm, std::vector<std::unique_ptr<Request>>& reqs,
              int64_t max_steps) {
  FakeExecutor exec(bm.num_blocks(), bm.block_size());
  StepPlan plan;
  for (int64_t step = 1; step <= max_steps; ++step) {
    bool all_done = true;
    for (auto& r : reqs) all_done = all_done && r->finished();
    if (all_done) return step - 1;
    sched.schedule(plan);
    if (plan.empty()) continue;
    for (Sequence* s : sched.update(exec.run(plan)))
      if (s->num_outputs() >= s->request->params.max_tokens) sched.finish(s);
  }
  return -1;
}

std::unique_ptr<Request> make_request(Scheduler& sched, int64_t id, int64_t prompt_len, int64_t max_tokens,
                                      bool prompt_logprobs) {
  auto r = std::make_unique<Request>();
  r->id = std::to_string(id);
  r->params.max_tokens = max_tokens;
  if (prompt_logprobs) r->params.prompt_logprobs = 1;
  r->prompt_ids.assign(size_t(prompt_len), 5);
  auto s = std::make_unique<Sequence>();
  s->id = sched.new_seq_id();
  s->request = r.get();
  s->tokens = r->prompt_ids;
  s->prompt_len = prompt_len;
  sched.add(s.get());
  r->seqs.push_back(std::move(s));
  return r;
}

}  // namespace

// Two long prompts whose logprobs are wanted advance in small chunks side by side until
// the cache is full with both mid-prompt: the newer one must be preempted, not stall.
TEST(SchedulerProgress, TwoPromptsFillingTheCacheDoNotStall) {
  SchedulerConfig cfg;
  cfg.prompt_logprob_chunk = 8;
  cfg.max_logit_rows = 64;
  cache::BlockManager bm(16, 4, 8, 1);
  Scheduler sched(cfg, bm);
  std::vector<std::unique_ptr<Request>> reqs;
  reqs.push_back(make_request(sched, 1, 40, 4, true));
  reqs.push_back(make_request(sched, 2, 40, 4, true));
  EXPECT_GE(drive(sched, bm, reqs, 1000), 0) << "scheduler stalled";
  EXPECT_GT(sched.num_preemptions(), 0);
  EXPECT_EQ(bm.num_free_blocks(), bm.num_blocks());
}

// A request that needs every block of the cache runs once nothing else does: the
// watermark only protects running sequences.
TEST(SchedulerProgress, RequestNeedingTheWholeCacheIsAdmitted) {
  SchedulerConfig cfg;
  cache::BlockManager bm(16, 4, 8, 1);
  Scheduler sched(cfg, bm);
  std::vector<std::unique_ptr<Request>> reqs;
  reqs.push_back(make_request(sched, 1, 63, 1, false));
  EXPECT_GE(drive(sched, bm, reqs, 100), 0) << "never admitted";
  reqs.clear();
  // Without chunked prefill a whole prompt must still fit in one step's budget.
  SchedulerConfig whole = cfg;
  whole.chunked_prefill = false;
  Scheduler s2(whole, bm);
  reqs.push_back(make_request(s2, 2, 60, 4, false));
  reqs.push_back(make_request(s2, 3, 30, 4, false));
  EXPECT_GE(drive(s2, bm, reqs, 200), 0) << "stalled without chunked prefill";
  EXPECT_EQ(bm.num_free_blocks(), bm.num_blocks());
}

namespace {

std::unique_ptr<Request> request_with(Scheduler& sched, const std::string& id, std::vector<int32_t> prompt,
                                      int64_t max_tokens) {
  auto r = std::make_unique<Request>();
  r->id = id;
  r->params.max_tokens = max_tokens;
  r->prompt_ids = std::move(prompt);
  auto s = std::make_unique<Sequence>();
  s->id = sched.new_seq_id();
  s->request = r.get();
  s->tokens = r->prompt_ids;
  s->prompt_len = int64_t(s->tokens.size());
  sched.add(s.get());
  r->seqs.push_back(std::move(s));
  return r;
}

// `shared` tokens, then `own` tokens unique to request k.
std::vector<int32_t> shared_then_own(int64_t shared, int64_t own, int64_t k) {
  std::vector<int32_t> p;
  for (int64_t i = 0; i < shared; ++i) p.push_back(int32_t(7 + i % 97));
  for (int64_t i = 0; i < own; ++i) p.push_back(int32_t(1000 + k * 131 + i));
  return p;
}

}  // namespace

// Eight requests sharing a 128-token prefix arrive together. Plain FCFS admits them all in
// the first step, and each computes the prefix; with prefix-aware admission the first one
// computes it and the other seven wait one step and take its blocks: (N-1)/N of the
// shared positions come from the cache.
TEST(SchedulerPrefixAdmission, SharedPrefixIsComputedOnce) {
  for (int64_t wait : {0, 4}) {
    SCOPED_TRACE("prefix_wait_steps " + std::to_string(wait));
    SchedulerConfig cfg;
    cfg.prefix_caching = true;
    cfg.prefix_wait_steps = wait;
    cache::BlockManager bm(256, 16, 16, 1);
    Scheduler sched(cfg, bm);
    std::vector<std::unique_ptr<Request>> reqs;
    for (int k = 0; k < 8; ++k) reqs.push_back(request_with(sched, std::to_string(k), shared_then_own(128, 16, k), 4));
    ASSERT_GE(drive(sched, bm, reqs, 100), 0) << "stalled";
    const PrefixCacheStats& st = sched.prefix_stats();
    EXPECT_EQ(st.admissions, 8);
    EXPECT_EQ(st.hit_tokens, wait ? 7 * 128 : 0);
    EXPECT_EQ(st.admission_waits, wait ? 7 : 0);
    EXPECT_EQ(bm.num_free_blocks(), bm.num_blocks());
  }
}

// Agent turns arriving together: B's prompt is A's plus 64 tokens, C's is B's plus 64
// more, and D shares nothing. A computes its prompt while B waits for it; B then takes
// A's blocks and computes its own while C, whose cached run grew, keeps waiting (even
// with a bound of one step without growth), and takes both. D is admitted at once,
// ahead of the waiting ones. FCFS admits all four at once and hits nothing.
TEST(SchedulerPrefixAdmission, WaitersFollowChainedPrefixes) {
  for (int64_t wait : {0, 1}) {
    SCOPED_TRACE("prefix_wait_steps " + std::to_string(wait));
    SchedulerConfig cfg;
    cfg.prefix_caching = true;
    cfg.prefix_wait_steps = wait;
    cache::BlockManager bm(128, 16, 8, 1);
    Scheduler sched(cfg, bm);
    std::vector<std::unique_ptr<Request>> reqs;
    const std::vector<int32_t> c_prompt = shared_then_own(192, 0, 0);
    for (int k = 0; k < 3; ++k)
      reqs.push_back(request_with(sched, std::string(1, char('A' + k)),
                                  std::vector<int32_t>(c_prompt.begin(), c_prompt.begin() + 64 * (k + 1)), 2));
    reqs.push_back(request_with(sched, "D", shared_then_own(0, 20, 9), 2));
    std::map<std::string, int64_t> admitted;  // the step in which each first runs
    FakeExecutor exec(bm.num_blocks(), bm.block_size());
    StepPlan plan;
    int64_t step = 0;
    for (; step < 100; ++step) {
      bool done = true;
      for (auto& r : reqs) done = done && r->finished();
      if (done) break;
      sched.schedule(plan);
      for (auto& r : reqs)
        if (!admitted.count(r->id) && r->seqs[0]->status != SeqStatus::kWaiting) admitted[r->id] = step;
      if (plan.empty()) continue;
      for (Sequence* s : sched.update(exec.run(plan)))
        if (s->num_outputs() >= s->request->params.max_tokens) sched.finish(s);
      ASSERT_FALSE(HasFailure());
    }
    ASSERT_LT(step, 100) << "stalled";
    const PrefixCacheStats& st = sched.prefix_stats();
    EXPECT_EQ(admitted["A"], 0);
    EXPECT_EQ(admitted["D"], 0);
    EXPECT_EQ(admitted["B"], wait ? 1 : 0);
    EXPECT_EQ(admitted["C"], wait ? 2 : 0);
    EXPECT_EQ(st.hit_tokens, wait ? 64 + 128 : 0);
    EXPECT_EQ(st.admission_waits, wait ? 3 : 0);
    EXPECT_EQ(bm.num_free_blocks(), bm.num_blocks());
  }
}

// Requests keep arriving, most of them starting with one of a few prefixes or one new to their burst, under a tight
// token budget. Nobody starves: each request is admitted within a bound of its arrival
// (the longest FCFS admission delay of the same stream, plus the steps one prefix takes to
// compute, plus the wait bound), every one finishes, and prefix-aware admission takes at
// more from the cache than FCFS.
TEST(SchedulerPrefixAdmission, NoRequestStarves) {
  auto run = [](int64_t wait, int64_t& max_delay, int64_t& hits, int64_t& waits) {
    SchedulerConfig cfg;
    cfg.prefix_caching = true;
    cfg.prefix_wait_steps = wait;
    cfg.max_num_batched_tokens = 64;
    cfg.max_num_seqs = 12;
    cache::BlockManager bm(64, 8, 12, 2);
    Scheduler sched(cfg, bm);
    std::vector<std::unique_ptr<Request>> reqs;
    std::map<std::string, int64_t> arrival;
    max_delay = 0;
    FakeExecutor exec(bm.num_blocks(), bm.block_size());
    StepPlan plan;
    std::mt19937_64 rng(11);
    std::set<std::string> admitted;
    for (int64_t step = 0; step < 3000; ++step) {
      // A burst's requests start with one of 4 prefixes seen before or with one new to it.
      const int32_t head = rng() % 2 ? int32_t(100 + step) : int32_t(rng() % 4);
      for (uint64_t burst = rng() % 2 ? rng() % 6 : 0; burst > 0 && reqs.size() < 150; --burst) {
        const int64_t k = int64_t(reqs.size());
        const uint64_t kind = rng() % 5;
        std::vector<int32_t> p = kind == 0 ? shared_then_own(0, 12, k) : shared_then_own(40, 4 + int64_t(rng() % 9), k);
        if (kind > 0) p[0] = head;
        reqs.push_back(request_with(sched, std::to_string(k), p, 1 + int64_t(rng() % 6)));
        arrival[reqs.back()->id] = step;
      }
      sched.schedule(plan);
      for (auto& r : reqs)
        if (!admitted.count(r->id) && r->seqs[0]->status != SeqStatus::kWaiting) {
          admitted.insert(r->id);
          max_delay = std::max(max_delay, step - arrival[r->id]);
        }
      if (!plan.empty())
        for (Sequence* s : sched.update(exec.run(plan)))
          if (s->num_outputs() >= s->request->params.max_tokens) sched.finish(s);
      if (::testing::Test::HasFailure()) return;
      bool done = reqs.size() == 150;
      for (auto& r : reqs) done = done && r->finished();
      if (done) break;
    }
    for (auto& r : reqs) EXPECT_TRUE(r->finished()) << "request " << r->id << " never finished";
    EXPECT_EQ(bm.num_free_blocks(), bm.num_blocks());
    hits = sched.prefix_stats().hit_tokens;
    waits = sched.prefix_stats().admission_waits;
  };
  int64_t fcfs_delay = 0, fcfs_hits = 0, fcfs_waits = 0, delay = 0, hits = 0, waits = 0;
  run(0, fcfs_delay, fcfs_hits, fcfs_waits);
  run(3, delay, hits, waits);
  EXPECT_EQ(fcfs_waits, 0);
  EXPECT_GT(waits, 10);  // the stream makes requests wait
  ASSERT_FALSE(HasFailure());
  const int64_t prefix_steps = 1;  // a prefix fits one step's budget
  EXPECT_LE(delay, fcfs_delay + prefix_steps + 3) << "FCFS's longest delay " << fcfs_delay;
  EXPECT_GT(hits, fcfs_hits);
  std::printf("longest admission delay: FCFS %lld steps, prefix-aware %lld; cached tokens %lld vs %lld; %lld waits\n",
              (long long)fcfs_delay, (long long)delay, (long long)fcfs_hits, (long long)hits, (long long)waits);
}

namespace {

// Agent turns with per-sequence state: turn t's prompt is turn t-1's prompt, its outputs
// and `extra` new tokens. Each turn runs to completion before the next arrives; with
// `pipelined`, a step's result is applied after the next step is planned (asynchronous
// scheduling). Between turns an unrelated request runs when `interloper`.
struct TurnsOutcome {
  PrefixCacheStats stats;
  std::vector<int64_t> cached;  // per turn: positions not computed
  int64_t restores_checked = 0;
};

TurnsOutcome run_turns(int64_t snapshots, int64_t budget, bool pipelined, bool interloper, int64_t outputs = 4) {
  SCOPED_TRACE("snapshots " + std::to_string(snapshots) + (interloper ? ", interloper" : "") + ", outputs " +
               std::to_string(outputs));
  SchedulerConfig cfg;
  cfg.prefix_caching = true;
  cfg.prefix_wait_steps = 0;
  cfg.max_num_batched_tokens = budget;
  cfg.replay_start = [](int64_t hit, int64_t) { return hit - 40 > 0 ? hit - 40 : -1; };
  cfg.num_snapshots = snapshots;
  cfg.snapshot_slot0 = 8;
  if (snapshots > 0) cfg.rolling_slot0 = int32_t(8 + snapshots);
  cfg.snapshot_usable = [](int64_t, int64_t) { return true; };
  cache::BlockManager bm(128, 16, 8, 1);
  Scheduler sched(cfg, bm);
  FakeExecutor exec(bm.num_blocks(), bm.block_size());
  exec.check_state = true;
  exec.snapshot_slot0 = cfg.snapshot_slot0;
  TurnsOutcome out;
  std::vector<int32_t> prompt = shared_then_own(0, 100, 1);
  std::vector<std::unique_ptr<Request>> reqs;
  auto run_one = [&](std::unique_ptr<Request> r) {
    Request* req = r.get();
    reqs.push_back(std::move(r));
    StepPlan plans[2];
    std::deque<StepResult> in_flight;
    for (int step = 0; step < 200 && !(req->finished() && in_flight.empty()); ++step) {
      StepPlan& plan = plans[step % 2];
      sched.schedule(plan);
      if (!plan.empty()) in_flight.push_back(exec.run(plan));
      while (in_flight.size() > (pipelined ? 1u : 0u) || (!in_flight.empty() && plan.empty())) {
        for (Sequence* q : sched.update(in_flight.front()))
          if (q->num_outputs() >= q->request->params.max_tokens) sched.finish(q);
        in_flight.pop_front();
      }
      if (::testing::Test::HasFailure()) return;
    }
    EXPECT_TRUE(req->finished());
  };
  for (int turn = 0; turn < 3; ++turn) {
    const int64_t before = sched.prefix_stats().hit_tokens;
    auto r = request_with(sched, "t" + std::to_string(turn), prompt, outputs);
    Sequence* seq = r->seqs[0].get();
    run_one(std::move(r));
    out.cached.push_back(sched.prefix_stats().hit_tokens - before);
    // The next turn: this one's prompt and outputs, then 30 new tokens.
    prompt.assign(seq->tokens.begin(), seq->tokens.begin() + seq->num_tokens());
    for (int32_t t : shared_then_own(0, 30, 10 + turn)) prompt.push_back(t);
    if (interloper) run_one(request_with(sched, "x" + std::to_string(turn), shared_then_own(0, 50, 20 + turn), 2));
  }
  out.stats = sched.prefix_stats();
  out.restores_checked = exec.restores_checked;
  EXPECT_EQ(sched.num_deferred_releases(), 0u);
  EXPECT_EQ(sched.num_running(), 0u);
  EXPECT_EQ(bm.num_free_blocks(), bm.num_blocks());
  return out;
}

}  // namespace

// Turn 1's prompt (100 tokens, 4 outputs) is cut at 96, its last full block, and its
// state saved there; turn 2 (134 tokens) hits 6 blocks and restores that state instead of replaying
// 40 positions; turn 3 (168) restores turn 2's state at 128. Checked by the fake
// executor's state slots: each restored state is exactly at its block's end. Without
// snapshots every hit replays; with one slot an unrelated request between turns evicts
// the turn's snapshot (LRU) and the next turn replays.
TEST(SchedulerStateSnapshots, AgentTurnsRestoreInsteadOfReplaying) {
  for (bool pipelined : {false, true})
    for (int64_t budget : {int64_t(2048), int64_t(24)}) {
      SCOPED_TRACE(std::string(pipelined ? "pipelined" : "lock-step") + ", budget " + std::to_string(budget));
      const TurnsOutcome on = run_turns(2, budget, pipelined, false);
      if (HasFailure()) return;
      EXPECT_EQ(on.cached, (std::vector<int64_t>{0, 96, 128}));
      EXPECT_EQ(on.stats.snapshot_saves, 3);
      EXPECT_EQ(on.stats.snapshot_restores, 2);
      EXPECT_EQ(on.restores_checked, 2);
      EXPECT_EQ(on.stats.replayed_tokens, 0);

      const TurnsOutcome off = run_turns(0, budget, pipelined, false);
      EXPECT_EQ(off.cached, (std::vector<int64_t>{0, 96 - 40, 128 - 40}));
      EXPECT_EQ(off.stats.snapshot_saves, 0);
      EXPECT_EQ(off.stats.replayed_tokens, 80);

      const TurnsOutcome evicted = run_turns(1, budget, pipelined, true);
      EXPECT_EQ(evicted.cached, (std::vector<int64_t>{0, 96 - 40, 128 - 40}));
      EXPECT_EQ(evicted.stats.snapshot_restores, 0);
      EXPECT_EQ(evicted.stats.snapshot_saves, 6);

      const TurnsOutcome kept = run_turns(2, budget, pipelined, true);
      EXPECT_EQ(kept.cached, (std::vector<int64_t>{0, 96, 128}));
      EXPECT_EQ(kept.stats.snapshot_restores, 2);

      // 20 outputs: decoding crosses a block boundary (112, then 160), whose snapshot the
      // next turn, which hits through the outputs, restores.
      const TurnsOutcome decoded = run_turns(2, budget, pipelined, false, 20);
      EXPECT_EQ(decoded.cached, (std::vector<int64_t>{0, 112, 160}));
      // Each prompt's, and the first two turns' last decode snapshots (the third's would be
      // copied by a next plan).
      EXPECT_EQ(decoded.stats.snapshot_saves, 5);
      EXPECT_EQ(decoded.stats.snapshot_restores, 2);
      EXPECT_EQ(decoded.restores_checked, 2);
      EXPECT_EQ(decoded.stats.replayed_tokens, 0);
    }
}
