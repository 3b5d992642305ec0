#include "engine/scheduler.h"

#include <algorithm>
#include <chrono>

#include "core/error.h"
#include "engine/request.h"

namespace gannet::engine {

Scheduler::Scheduler(const SchedulerConfig& cfg, cache::BlockManager& blocks) : cfg_(cfg), blocks_(blocks) {
  GANNET_CHECK(cfg.max_num_seqs >= 1 && cfg.max_num_batched_tokens >= 1);
  blocks_.set_prefix_caching(cfg.prefix_caching);
  GANNET_CHECK(cfg.num_snapshots == 0 || (cfg.prefix_caching && cfg.replay_start && cfg.snapshot_usable),
               "state snapshots need prefix caching of a model with per-sequence state");
  GANNET_CHECK(cfg.rolling_slot0 < 0 || cfg.num_snapshots > 0, "decode snapshots need snapshot slots");
  snaps_.resize(size_t(std::max<int64_t>(0, cfg.num_snapshots)));
}

int64_t Scheduler::snapshot_boundary(Sequence* seq) {
  if (cfg_.num_snapshots <= 0 || seq->forked) return 0;
  const int bs = blocks_.block_size();
  const int64_t b = seq->prompt_len / bs * bs;
  if (b <= seq->num_computed) return 0;
  hash_blocks(seq, b / bs);
  // Already saved (by a sequence with the same prompt start): nothing to take.
  if (snap_index_.count(seq->block_hashes[size_t(b / bs - 1)])) return 0;
  return b;
}

int64_t Scheduler::cut_at_snapshot(Sequence* seq, int64_t chunk) {
  const int64_t b = snapshot_boundary(seq);
  return b > 0 && seq->num_computed + chunk > b ? b - seq->num_computed : chunk;  // ends where its state is saved
}

void Scheduler::emit_saves(StepPlan& plan) {
  const int bs = blocks_.block_size();
  for (const PendingSave& s : saves_) {
    if (s.rolling) {  // into the sequence's rolling slot, its block's hash now known
      Sequence* q = find_running(s.seq_id);
      if (!q || q->epoch != s.epoch || q->num_tokens() < (s.block + 1) * bs) continue;
      hash_blocks(q, s.block + 1);
      plan.state_copies.push_back({s.src, cfg_.rolling_slot0 + q->table.state_slot});
      q->rolling_block = s.block;
      q->rolling_hash = q->block_hashes[size_t(s.block)];
      continue;
    }
    if (snap_index_.count(s.hash)) continue;
    size_t v = 0;  // the least recently used slot (an empty one first)
    for (size_t i = 1; i < snaps_.size(); ++i)
      if (snaps_[i].used < snaps_[v].used) v = i;
    if (snaps_[v].used) snap_index_.erase(snaps_[v].hash);
    snaps_[v] = {s.hash, ++snap_tick_};
    snap_index_[s.hash] = int32_t(v);
    plan.state_copies.push_back({s.src, cfg_.snapshot_slot0 + int32_t(v)});
    ++prefix_stats_.snapshot_saves;
  }
  saves_.clear();
}

void Scheduler::hash_blocks(Sequence* seq, int64_t n) {
  const int bs = blocks_.block_size();
  GANNET_CHECK(n * bs <= seq->num_tokens(), "hashing block ", n - 1, " past the real tokens");
  auto& h = seq->block_hashes;
  const model::ImageSpans* images = seq->request ? seq->request->images.get() : nullptr;
  while (int64_t(h.size()) < n) {
    const int64_t i = int64_t(h.size());
    // A block holding image positions is keyed by those images' contents and where their
    // spans start (all image positions carry the same placeholder id): the same image hits,
    // another image with the same placeholders never does. Later blocks chain from it.
    uint64_t extra = 0;
    if (images)
      for (const model::ImageSpan& s : *images)
        if (s.start < (i + 1) * bs && s.start + s.length > i * bs)
          extra = (extra ^ s.hash_lo ^ (s.hash_hi * 0x9E3779B97F4A7C15ull) ^ uint64_t(s.start - i * bs)) *
                      0xBF58476D1CE4E5B9ull + 1;
    h.push_back(cache::hash_block(i ? h.back() : cache::kRootBlockHash, extra, seq->tokens.data() + i * bs, bs));
  }
}

namespace {
double since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}
}  // namespace

void Scheduler::offer_planned(Sequence* seq) {
  // Full blocks of real tokens whose positions the steps planned so far compute: this
  // plan (or an earlier one) writes them, so any later plan may read them.
  const int bs = blocks_.block_size();
  const int64_t full = std::min({seq->num_computed, seq->num_tokens(), seq->table.num_tokens}) / bs;
  if (seq->num_registered >= full) return;
  const auto t0 = std::chrono::steady_clock::now();
  hash_blocks(seq, full);
  for (int64_t i = seq->num_registered; i < full; ++i) {
    pending_.push_back({seq->table.blocks[size_t(i)], seq->block_hashes[size_t(i)],
                        i ? seq->block_hashes[size_t(i - 1)] : cache::kRootBlockHash, step_});
    pending_tokens_.insert(pending_tokens_.end(), seq->tokens.begin() + i * bs, seq->tokens.begin() + (i + 1) * bs);
  }
  drop_claims(seq, full);
  seq->num_registered = full;
  prefix_stats_.register_seconds += since(t0);
}

void Scheduler::claim_blocks(Sequence* seq, int64_t from, int64_t to) {
  // A block already claimed stays its first claimant's (a sequence that stopped waiting
  // computes it as well; whoever offers it first registers it).
  for (int64_t i = from; i < to; ++i) claims_.emplace(seq->block_hashes[size_t(i)], seq->id);
  seq->num_claimed = to;
}

void Scheduler::drop_claims(Sequence* seq, int64_t to) {
  for (int64_t i = seq->num_registered; i < std::min(to, seq->num_claimed); ++i) {
    auto it = claims_.find(seq->block_hashes[size_t(i)]);
    if (it != claims_.end() && it->second == seq->id) claims_.erase(it);
  }
}

void Scheduler::register_pending() {
  // Blocks offered while the previous plan was built. A block nobody holds any more (its
  // sequence ended and the step that wrote it has completed) is left out; one still held
  // keeps the contents it was offered with (blocks are only ever reused after release).
  const int bs = blocks_.block_size();
  for (size_t k = 0; k < pending_.size(); ++k) {
    const PendingBlock& p = pending_[k];
    if (blocks_.ref_count(p.block) > 0)
      blocks_.register_block(p.block, p.hash, p.parent, pending_tokens_.data() + int64_t(k) * bs, p.step);
  }
  pending_.clear();
  pending_tokens_.clear();
}

void Scheduler::add(Sequence* seq) {
  seq->status = SeqStatus::kWaiting;
  waiting_.push_back(seq);
}

int64_t Scheduler::slots_needed(const Sequence* seq) const {
  return seq->forked ? 1 : seq->request->params.n;
}

int64_t Scheduler::recompute_target(const Sequence* seq) const {
  const int64_t left = seq->num_uncomputed();
  // A recomputed sequence (it has outputs) stops before its last token when the model
  // drafts (SchedulerConfig::recompute_to_decode); that token is then a decode.
  if (cfg_.recompute_to_decode && int64_t(seq->tokens.size()) > seq->prompt_len && left > 1) return left - 1;
  return left;
}

void Scheduler::schedule_chunk(Sequence* seq, int64_t count, StepPlan& plan, int spec_k) {
  // A speculative row may reach spec_k positions further, after what the speculative
  // steps in flight may have added.
  const int64_t extra = spec_k >= 0 ? spec_k + seq->spec_inflight : 0;
  blocks_.grow(seq->table, seq->num_computed + count + extra, plan.copies);
  if (!seq->in_executor) {
    // The executor learns the sequence with its whole history (real tokens only: a
    // sequence outside the executor has nothing pending).
    GANNET_CHECK(seq->num_pending == 0);
    const Request& req = *seq->request;
    RowAdd& a = plan.added.emplace_back();
    a.seq_id = seq->id;
    a.epoch = seq->epoch;
    a.tokens = seq->tokens;
    a.prompt_len = seq->prompt_len;
    a.reserve = seq->prompt_len + req.params.max_tokens;
    a.max_blocks = blocks_.blocks_for(a.reserve + 1 + 2 * cfg_.num_speculative_tokens);
    a.params = req.params;
    a.seed = req.seed;
    a.sample_index = seq->sample_index;
    a.state_slot = seq->table.state_slot;
    a.grammar = req.grammar;
    a.images = req.images;
    a.window_from = seq->window_from;
    a.cached_until = seq->cached_until;
    seq->in_executor = true;
    seq->table.dirty_from = 0;  // the new row gets the whole table
  }
  // A prompt chunk ending at the sequence's snapshot boundary: the next plan saves its state.
  if (cfg_.num_snapshots > 0 && spec_k < 0) {
    const int64_t b = snapshot_boundary(seq);
    const int bs = blocks_.block_size();
    const int64_t end = seq->num_computed + count;
    if (b > 0 && end == b)
      saves_.push_back({seq->table.state_slot, seq->block_hashes[size_t(b / bs - 1)]});
    else if (cfg_.rolling_slot0 >= 0 && end > seq->prompt_len && end % bs == 0)
      saves_.push_back({seq->table.state_slot, {}, true, seq->id, seq->epoch, end / bs - 1});
  }
  PlanRow r;
  r.seq_id = seq->id;
  r.epoch = seq->epoch;
  r.start = seq->num_computed;
  r.count = count;
  const bool reaches_end = seq->num_computed + count == int64_t(seq->tokens.size());
  // An unforked request samples n tokens at the end of its prompt; a decode planned while
  // that result is still pending runs after the fork, on one sample.
  r.num_samples = reaches_end ? int(seq->forked || seq->num_pending > 0 ? 1 : seq->request->params.n) : 0;
  r.prompt_logprobs = seq->request->params.prompt_logprobs.has_value() && !seq->forked &&
                      r.start < seq->prompt_len - 1;
  if (seq->table.changed_since_sync()) {
    // Only the entries that changed since the executor's copy was last synced.
    const auto& blocks = seq->table.blocks;
    r.table_from = seq->table.dirty_from;
    r.table_offset = int64_t(plan.tables.size());
    r.table_len = int64_t(blocks.size()) - r.table_from;
    plan.tables.insert(plan.tables.end(), blocks.begin() + r.table_from, blocks.end());
    seq->table.mark_synced();
  }
  r.spec_k = spec_k;
  plan.num_tokens += count + std::max(spec_k, 0);
  plan.num_logit_rows += r.prompt_logprobs ? count : (r.num_samples ? 1 + std::max(spec_k, 0) : 0);
  plan.rows.push_back(r);
  if (spec_k > 0) seq->spec_inflight += spec_k;
  seq->planned_in_step = step_;
  // Planned ahead: the positions count as computed now, and the sampled token is a
  // placeholder until the result replaces it.
  seq->num_computed += count;
  if (r.num_samples > 0) {
    seq->tokens.push_back(-1);
    ++seq->num_pending;
  }
}

void Scheduler::schedule(StepPlan& plan) {
  plan.clear();
  if (cfg_.prefix_caching) register_pending();
  plan.step_id = ++step_;
  // Snapshot saves first: they read slots that the forks' copies and the restores below
  // may write (a slot released since and given to another sequence).
  emit_saves(plan);
  for (const PendingStateCopy& c : state_copies_) {
    const Sequence* child = find_running(c.child_id);
    if (child && child->epoch == c.child_epoch) plan.state_copies.push_back({c.src, c.dst});
  }
  state_copies_.clear();
  int64_t budget = cfg_.max_num_batched_tokens;
  bool preempted = false;
  // 1. Sequences with one uncomputed token (decodes): one position each. A sequence whose
  // planned outputs already reach max_tokens (or the context) waits for its results.
  for (size_t i = 0; i < running_.size() && budget > 0; ++i) {
    Sequence* seq = running_[i];
    if (seq->num_uncomputed() != 1) continue;
    if (int64_t(seq->tokens.size()) - seq->prompt_len >= seq->request->params.max_tokens ||
        int64_t(seq->tokens.size()) >= cfg_.max_model_len)
      continue;
    if (plan.num_logit_rows + 1 > cfg_.max_logit_rows) break;
    // Speculative decoding: every decode is a speculative row (the executor places it),
    // with as many drafts as the step's token and logit-row budgets and the tokens the
    // sequence may still produce allow.
    int spec_k = -1;
    if (cfg_.num_speculative_tokens > 0) {
      const int64_t left = seq->request->params.max_tokens - (int64_t(seq->tokens.size()) - seq->prompt_len);
      const auto& want = seq->request->params.num_speculative_tokens;
      const int64_t natural = std::max<int64_t>(0, std::min({want ? int64_t(*want) : cfg_.num_speculative_tokens, left - 1,
                                                             cfg_.max_model_len - int64_t(seq->tokens.size()) - 1}));
      spec_k = int(std::max<int64_t>(0, std::min({natural, budget - 1, cfg_.max_logit_rows - plan.num_logit_rows - 1})));
      if (cfg_.full_depth && spec_k < natural) continue;  // waits for a step with room for all its drafts
    }
    const int64_t reach = seq->num_computed + 1 + (spec_k >= 0 ? spec_k + seq->spec_inflight : 0);
    bool self_preempted = false;
    while (!blocks_.can_grow(seq->table, reach)) {
      Sequence* victim = running_.back();
      preempt(victim);
      preempted = true;
      if (victim == seq) {
        self_preempted = true;
        break;
      }
    }
    if (self_preempted) break;  // seq was the newest: nothing after it remains
    schedule_chunk(seq, 1, plan, spec_k);
    budget -= 1 + std::max(spec_k, 0);
  }
  // 2. Prompt chunks of running sequences. Prompts whose logprobs are wanted may always be
  // split (their logit rows are capped per step), whatever chunked_prefill says.
  for (size_t i = 0; i < running_.size() && budget > 0; ++i) {
    Sequence* seq = running_[i];
    const int64_t left = seq->num_uncomputed();
    if (left <= 1) continue;
    const bool lp = seq->request->params.prompt_logprobs.has_value() && !seq->forked;
    const bool splittable = cfg_.chunked_prefill || lp;
    const int64_t target = recompute_target(seq);
    int64_t chunk = std::min(target, budget);
    if (lp) chunk = std::min({chunk, cfg_.prompt_logprob_chunk, cfg_.max_logit_rows - plan.num_logit_rows});
    else if (plan.num_logit_rows + 1 > cfg_.max_logit_rows) continue;
    if (chunk <= 0 || (!splittable && chunk < target)) continue;
    // Shrink to the blocks available; when not even one position fits, preempt the newest
    // running sequence (possibly this one) so the older ones always make progress.
    bool self_preempted = false;
    for (;;) {
      const int64_t fit = blocks_.positions_growable(seq->table) - seq->num_computed;
      if (fit >= chunk || (fit > 0 && splittable)) {
        chunk = std::min(chunk, fit);
        break;
      }
      // A sequence already in this step's plan cannot give up its blocks; decodes are
      // progressing then, and will free blocks as they finish.
      Sequence* victim = running_.back();
      if (victim != seq && victim->planned_in_step == step_) {
        chunk = 0;
        break;
      }
      preempt(victim);
      preempted = true;
      if (victim == seq) {
        self_preempted = true;
        break;
      }
    }
    if (self_preempted) break;  // seq was the newest: nothing after it remains
    if (chunk <= 0) continue;
    if (splittable) chunk = cut_at_snapshot(seq, chunk);
    schedule_chunk(seq, chunk, plan);
    budget -= chunk;
  }
  // 3. Admission, first come first served; none in a step that had to preempt. The free-
  // block watermark is kept back for running sequences; with none running it is not. A
  // sequence that waits for a block another one computes (prefix-aware admission) keeps
  // its place and the ones behind it are considered.
  for (size_t wi = 0; !preempted && budget > 0 && wi < waiting_.size();) {
    Sequence* seq = waiting_[wi];
    const int64_t need_slots = slots_needed(seq);
    if (int64_t(running_.size()) + reserved_slots_ + need_slots > cfg_.max_num_seqs) break;
    if (blocks_.num_free_slots() - reserved_slots_ < need_slots) break;
    const bool lp = seq->request->params.prompt_logprobs.has_value() && !seq->forked;
    const bool splittable = cfg_.chunked_prefill || lp;
    const int64_t target = recompute_target(seq);
    int64_t chunk = std::min(target, budget);
    if (lp) chunk = std::min({chunk, cfg_.prompt_logprob_chunk, cfg_.max_logit_rows - plan.num_logit_rows});
    else if (plan.num_logit_rows + 1 > cfg_.max_logit_rows) break;
    // Prefix caching: the longest cached run of its full blocks, leaving at least the last
    // position of the prefill to compute (its logits are sampled from). The blocks are
    // pinned while admission decides; where memory's run ends, the disk tier may continue
    // it, reading blocks back into free ones (kept cached even if admission fails).
    const int bs = blocks_.block_size();
    int64_t hit = 0;
    hit_blocks_.clear();
    const int64_t reserve = running_.empty() ? 0 : blocks_.watermark();
    int64_t n = 0;  // full blocks looked up (hashed)
    if (cfg_.prefix_caching && !lp && target > 1) {
      const auto t0 = std::chrono::steady_clock::now();
      n = std::min(seq->num_tokens() / bs, blocks_.blocks_for(target - 1));
      if (n > 0) {
        hash_blocks(seq, n);
        blocks_.match_prefix(seq->block_hashes.data(), seq->tokens.data(), n, hit_blocks_);
        for (int32_t b : hit_blocks_) blocks_.pin(b);
        // Disk: where memory's run ends the disk tier may continue it. Its reader thread
        // reads blocks ahead (never this thread); a block read is filled into a free block
        // by this plan (the executor writes it before the forward pass, after every step in
        // flight) and registered at once, so this and later plans take it. The sequence
        // waits for blocks still being read, bounded as below. One free block stays for
        // computing, the watermark for running sequences.
        bool reading = false;
        while (disk_ && int64_t(hit_blocks_.size()) < n && blocks_.num_free_blocks() > reserve + 1) {
          const size_t i = hit_blocks_.size();
          const cache::BlockHash& h = seq->block_hashes[i];
          const cache::BlockHash& parent = i ? seq->block_hashes[i - 1] : cache::kRootBlockHash;
          const int32_t* toks = seq->tokens.data() + int64_t(i) * bs;
          const cache::DiskTier::ReadState rs = disk_->read_state(h);
          if (rs == cache::DiskTier::ReadState::kPending) {
            reading = true;
            break;
          }
          if (rs == cache::DiskTier::ReadState::kFailed) {  // corrupt, gone or different: compute it
            disk_->forget_read(h);
            break;
          }
          if (rs == cache::DiskTier::ReadState::kNone) {
            if (!disk_->contains(h)) break;
            // This block and the ones after it that the disk holds, read ahead together.
            for (size_t j = i; j < size_t(n) && j < i + kDiskReadAhead; ++j) {
              const cache::BlockHash& hj = seq->block_hashes[j];
              if (!disk_->contains(hj)) break;
              disk_->read_ahead(hj, j ? seq->block_hashes[j - 1] : cache::kRootBlockHash,
                                seq->tokens.data() + int64_t(j) * bs);
            }
            if (disk_->read_state(h) == cache::DiskTier::ReadState::kNone) break;  // no room to read ahead
            continue;  // pending, or read already
          }
          std::vector<uint8_t> data;  // moved into the plan, which owns it until it has run
          if (!disk_->take_read(h, data)) break;
          const int32_t b = blocks_.take_free_block();
          blocks_.register_block(b, h, parent, toks, step_);
          if (!blocks_.is_cached(b)) {  // memory holds other contents under this hash (a
            blocks_.unpin(b);           // collision): never share a block the index lacks
            break;
          }
          plan.fills.push_back({b, std::move(data)});
          hit_blocks_.push_back(b);
          ++prefix_stats_.disk_hit_blocks;
          prefix_stats_.disk_hit_blocks_in_flight += completed_step_ + 1 < step_;
        }
        // Prefix-aware admission: the next block is one a running sequence computes (a
        // step later it is cached): wait, unless this sequence has waited
        // prefix_wait_steps steps since its cached run last grew.
        // Blocks the disk tier is reading wait the same way, with a bound of their own
        // (kDiskWaitSteps) so that disk hits work with admission waits turned off.
        const int64_t got = int64_t(hit_blocks_.size());
        if ((cfg_.prefix_wait_steps > 0 || reading) && got < n) {
          auto c = claims_.find(seq->block_hashes[size_t(got)]);
          if (reading || (c != claims_.end() && c->second != seq->id)) {
            if (got > seq->wait_hit_blocks || seq->wait_steps == 0) {
              seq->wait_hit_blocks = got;
              seq->wait_steps = 0;
            }
            if (seq->wait_steps < (reading ? std::max(cfg_.prefix_wait_steps, kDiskWaitSteps) : cfg_.prefix_wait_steps)) {
              ++seq->wait_steps;
              ++prefix_stats_.admission_waits;
              for (int32_t b : hit_blocks_) blocks_.unpin(b);
              prefix_stats_.lookup_seconds += since(t0);
              ++wi;
              continue;
            }
          }
        }
        hit = std::min(int64_t(hit_blocks_.size()) * bs, target - 1);
        if (cfg_.replay_start) hit = hit / bs * bs;  // state is rebuilt at block boundaries
        while (int64_t(hit_blocks_.size()) > blocks_.blocks_for(hit)) {  // capped: drop unused tail
          blocks_.unpin(hit_blocks_.back());
          hit_blocks_.pop_back();
        }
      }
      prefix_stats_.lookup_seconds += since(t0);
    }
    // The first position computed: the hit's end, or earlier where the model rebuilds its
    // per-sequence state by recomputing positions it holds cached (the replay).
    int64_t start = hit;
    int32_t snap = -1;  // a state snapshot taken instead of the replay
    if (cfg_.replay_start && hit > 0) {
      start = cfg_.replay_start(hit, seq->prompt_len);
      // A snapshot at a cached block's end at or after where the replay would start:
      // restoring it computes nothing before that block's end.
      for (int64_t j = hit / bs; cfg_.num_snapshots > 0 && j >= 1 && j * bs >= std::max<int64_t>(start, 1); --j) {
        auto it = snap_index_.find(seq->block_hashes[size_t(j - 1)]);
        if (it == snap_index_.end() || !cfg_.snapshot_usable(j * bs, seq->prompt_len)) continue;
        snap = it->second;
        hit = start = j * bs;
        while (int64_t(hit_blocks_.size()) > j) {
          blocks_.unpin(hit_blocks_.back());
          hit_blocks_.pop_back();
        }
        break;
      }
      if (start <= 0) {  // too short a hit to pay for its replay
        for (int32_t b : hit_blocks_) blocks_.unpin(b);
        hit_blocks_.clear();
        hit = start = 0;
      }
    }
    // Positions from `start` on that fit: the replayed ones (in cached blocks), new blocks,
    // and the rest of the last cached block, which writing into takes a private copy of.
    const int64_t tail = hit % bs ? bs - hit % bs : 0;
    const int64_t avail = blocks_.num_free_blocks() - reserve - (tail ? 1 : 0);
    const int64_t fit = (hit - start) + (avail < 0 ? 0 : avail * bs + tail);
    chunk = std::min(chunk, target - start);
    if (splittable) chunk = std::min(chunk, fit);
    if (chunk <= 0 || chunk > fit || (!splittable && chunk < target - start)) {
      for (int32_t b : hit_blocks_) blocks_.unpin(b);
      break;
    }
    waiting_.erase(waiting_.begin() + std::ptrdiff_t(wi));
    seq->wait_hit_blocks = seq->wait_steps = 0;
    // Room for every block it may reach, so its decodes never reallocate the table.
    seq->table.blocks.reserve(size_t(blocks_.blocks_for(seq->prompt_len + seq->request->params.max_tokens + 1)));
    if (cfg_.prefix_caching) seq->block_hashes.reserve(seq->table.blocks.capacity());
    if (hit > 0) blocks_.admit_cached(seq->table, hit_blocks_, hit);
    else blocks_.admit(seq->table, 0);
    for (int32_t b : hit_blocks_) blocks_.unpin(b);
    seq->num_computed = start;
    seq->num_registered = 0;
    seq->window_from = start < hit ? start : 0;
    seq->cached_until = start < hit ? hit : 0;
    if (snap >= 0) {  // before the forward pass, after every copy that may write the slot
      plan.state_copies.push_back({cfg_.snapshot_slot0 + snap, seq->table.state_slot});
      snaps_[size_t(snap)].used = ++snap_tick_;
      ++prefix_stats_.snapshot_restores;
    }
    if (cfg_.prefix_caching && !lp) {
      // Saved: the positions not computed (a replay computes some cached ones again).
      prefix_stats_.queried_tokens += target;
      prefix_stats_.hit_tokens += start;
      prefix_stats_.replayed_tokens += hit - start;
      prefix_stats_.admissions_hit += start > 0;
      ++prefix_stats_.admissions;
      if (seq->num_preemptions == 0 && seq->sample_index == 0) seq->request->metrics.cached_tokens = start;
    }
    reserved_slots_ += need_slots - 1;
    seq->status = SeqStatus::kRunning;
    seq->admit_order = next_admit_++;
    running_.push_back(seq);
    by_id_[seq->id] = seq;
    // The prompt blocks it computes from here on are claimed until it offers them.
    if (cfg_.prefix_caching && !lp && cfg_.prefix_wait_steps > 0)
      claim_blocks(seq, int64_t(hit_blocks_.size()), n);
    if (splittable) chunk = cut_at_snapshot(seq, chunk);
    schedule_chunk(seq, chunk, plan);
    budget -= chunk;
  }
  plan.removed.swap(removed_);
  removed_.clear();
  // Prefix caching: the full blocks this plan completes become visible to the next one.
  if (cfg_.prefix_caching)
    for (Sequence* seq : running_)
      if (seq->planned_in_step == step_) offer_planned(seq);
  if (plan.empty()) {  // nothing to submit: the step id is not used
    --step_;
    plan.step_id = 0;
  }
}

void Scheduler::remove_running(Sequence* seq) {
  auto it = std::find(running_.begin(), running_.end(), seq);
  GANNET_CHECK(it != running_.end(), "sequence ", seq->id, " is not running");
  running_.erase(it);
  by_id_.erase(seq->id);
  drop_claims(seq, seq->num_claimed);
  seq->num_claimed = 0;
  reserved_slots_ -= slots_needed(seq) - 1;
}

void Scheduler::leave_executor(Sequence* seq) {
  if (!seq->in_executor) return;
  removed_.push_back(seq->id);
  seq->in_executor = false;
}

void Scheduler::release_table(Sequence* seq) {
  // Steps up to planned_in_step may read these blocks; those not yet completed are in
  // flight (or queued), so the release waits for their results.
  if (seq->planned_in_step > completed_step_) {
    deferred_.push_back({std::move(seq->table), seq->planned_in_step});
    seq->table = cache::BlockTable{};
  } else {
    blocks_.release(seq->table);
  }
}

void Scheduler::preempt(Sequence* seq) {
  remove_running(seq);
  leave_executor(seq);
  // Called inside schedule(): the plan being built runs after everything in flight (see
  // scheduler.h), so the blocks may serve it at once.
  blocks_.release(seq->table);
  seq->tokens.resize(size_t(seq->num_tokens()));  // placeholders: their results go stale
  seq->num_pending = 0;
  seq->num_computed = 0;
  seq->spec_inflight = 0;
  seq->held.clear();
  seq->held_next = 0;
  seq->epoch++;
  seq->rolling_block = -1;  // its slot (and rolling slot) go to others
  seq->num_preemptions++;
  seq->status = SeqStatus::kWaiting;
  // Back to the front: preempted sequences were admitted before anything still waiting.
  waiting_.push_front(seq);
  preemptions_++;
}

void Scheduler::finish(Sequence* seq) {
  if (seq->status == SeqStatus::kRunning) {
    // Its last decode snapshot becomes a snapshot: the next plan copies it before anything
    // can write the rolling slot again.
    if (seq->rolling_block >= 0) saves_.push_back({cfg_.rolling_slot0 + seq->table.state_slot, seq->rolling_hash});
    seq->rolling_block = -1;
    remove_running(seq);
    leave_executor(seq);
    release_table(seq);
  }
  seq->tokens.resize(size_t(seq->num_tokens()));
  seq->num_pending = 0;
  seq->held.clear();
  seq->held_next = 0;
  seq->status = SeqStatus::kFinished;
  seq->epoch++;
}

void Scheduler::abort(Sequence* seq) {
  if (seq->status == SeqStatus::kWaiting) {
    auto it = std::find(waiting_.begin(), waiting_.end(), seq);
    if (it != waiting_.end()) waiting_.erase(it);
    seq->status = SeqStatus::kFinished;
    seq->epoch++;
    return;
  }
  finish(seq);
}

void Scheduler::append_token(Sequence* s, const SampledToken& t) {
  const StepResult& result = *held_result_;
  s->out.token_ids.push_back(t.token);
  if (s->request->params.logprobs) {
    s->out.cumulative_logprob += t.logprob;
    PositionLogprobs& lp = s->out.logprobs.emplace_back();
    lp.id = t.token;
    lp.logprob = t.logprob;
    lp.top.assign(result.top.begin() + t.top_offset, result.top.begin() + t.top_offset + t.top_len);
  }
}

void Scheduler::commit_held(Sequence* seq) {
  GANNET_CHECK(has_held(seq), "sequence ", seq->id, " holds no tokens");
  const SampledToken& t = *seq->held[seq->held_next++];
  // Before the placeholders of the steps still in flight; the draft it follows was
  // computed by the step that verified it.
  seq->tokens.insert(seq->tokens.begin() + seq->num_tokens(), t.token);
  ++seq->num_computed;
  append_token(seq, t);
  if (!has_held(seq)) {
    seq->held.clear();
    seq->held_next = 0;
  }
}

const std::vector<Sequence*>& Scheduler::update(const StepResult& result) {
  GANNET_CHECK(result.step_id == completed_step_ + 1, "step ", result.step_id, " completed after ", completed_step_);
  completed_step_ = result.step_id;
  touched_.clear();
  held_result_ = &result;
  for (const RowResult& r : result.rows) {
    auto found = by_id_.find(r.seq_id);
    if (found == by_id_.end()) continue;  // ended since
    Sequence* seq = found->second;
    if (seq->epoch != r.epoch || seq->status != SeqStatus::kRunning) continue;  // stale
    Request* req = seq->request;
    for (int64_t i = 0; i < r.prompt_lp_len; ++i) {
      const int64_t pos = r.first_prompt_pos + i;
      const SampledToken& t = result.prompt_lps[size_t(r.prompt_lp_offset + i)];
      if (pos < int64_t(req->prompt_logprobs.size()))
        req->prompt_logprobs[size_t(pos)] = PositionLogprobs{
            t.token, t.logprob,
            std::vector<TokenLogprob>(result.top.begin() + t.top_offset,
                                      result.top.begin() + t.top_offset + t.top_len)};
    }
    if (r.num_samples == 0) continue;
    GANNET_CHECK(seq->num_pending > 0, "sequence ", seq->id, " got a token it did not wait for");
    auto append = [&](Sequence* s, const SampledToken& t) {
      append_token(s, t);
      touched_.push_back(s);
    };
    const SampledToken* samples = result.samples.data() + r.sample_offset;
    if (r.spec_k >= 0) {
      // A speculative row: its accepted drafts and the token after them. The first takes
      // the placeholder's place now; the engine commits the others one by one. The table
      // keeps what the steps still in flight may reach.
      seq->spec_inflight -= r.spec_k;
      const int64_t accepted = r.num_samples - 1;
      RequestMetrics& m = req->metrics;
      ++m.spec_steps;
      m.spec_drafted += r.spec_drafted;
      m.spec_accepted += accepted;
      if (int64_t(m.spec_drafted_at.size()) < r.spec_drafted) {
        m.spec_drafted_at.resize(size_t(r.spec_drafted), 0);
        m.spec_accepted_at.resize(size_t(r.spec_drafted), 0);
      }
      for (int i = 0; i < r.spec_drafted; ++i) ++m.spec_drafted_at[size_t(i)];
      for (int64_t i = 0; i < accepted; ++i) ++m.spec_accepted_at[size_t(i)];
      if (r.spec_has_conf) {
        if (m.spec_calib_n.empty()) {
          m.spec_calib_n.assign(10, 0);
          m.spec_calib_accepted.assign(10, 0);
          m.spec_calib_conf.assign(10, 0.0);
        }
        for (int64_t i = 0; i < std::min<int64_t>(r.spec_drafted, accepted + 1); ++i) {
          const float c = r.spec_conf[size_t(i)];
          const size_t bin = size_t(std::clamp(int(c * 10.0f), 0, 9));
          ++m.spec_calib_n[bin];
          m.spec_calib_conf[bin] += c;
          m.spec_calib_accepted[bin] += i < accepted;
        }
      }
      blocks_.truncate(seq->table, seq->num_computed + accepted + seq->spec_inflight);
      seq->held.clear();
      seq->held_next = 0;
      for (int i = 1; i < r.num_samples; ++i) seq->held.push_back(samples + i);
      held_result_ = &result;
      seq->tokens[size_t(seq->num_tokens())] = samples[0].token;
      --seq->num_pending;
      append(seq, samples[0]);
      continue;
    }
    if (!seq->forked && r.num_samples > 1) {
      // Fork the other samples off the prompt: shared blocks for the prompt's positions
      // (the parent may have been planned further already), own slots (reserved).
      GANNET_CHECK(seq->num_tokens() == seq->prompt_len);
      reserved_slots_ -= int64_t(r.num_samples) - 1;
      seq->forked = true;
      for (int i = 1; i < r.num_samples; ++i) {
        auto child = std::make_unique<Sequence>();
        child->id = new_seq_id();
        child->request = req;
        child->sample_index = i;
        child->status = SeqStatus::kRunning;
        child->tokens.reserve(size_t(seq->prompt_len + req->params.max_tokens + 1));
        child->tokens.assign(seq->tokens.begin(), seq->tokens.begin() + seq->prompt_len);
        child->tokens.push_back(samples[i].token);
        child->prompt_len = seq->prompt_len;
        child->num_computed = seq->prompt_len;
        child->forked = true;
        child->admit_order = next_admit_++;
        child->planned_in_step = seq->planned_in_step;
        child->out.index = i;
        child->out.token_ids.reserve(size_t(req->params.max_tokens));
        child->table.blocks.reserve(size_t(blocks_.blocks_for(seq->prompt_len + req->params.max_tokens + 1)));
        blocks_.fork(seq->table, child->table, seq->prompt_len);
        child->block_hashes.reserve(child->table.blocks.capacity());
        child->block_hashes.assign(seq->block_hashes.begin(), seq->block_hashes.end());
        child->num_registered = std::min(seq->num_registered, seq->prompt_len / blocks_.block_size());
        state_copies_.push_back({child->id, child->epoch, seq->table.state_slot, child->table.state_slot});
        running_.push_back(child.get());
        by_id_[child->id] = child.get();
        append(child.get(), samples[i]);
        req->seqs.push_back(std::move(child));
      }
    } else {
      seq->forked = true;
    }
    // The oldest placeholder is this step's token.
    seq->tokens[size_t(seq->num_tokens())] = samples[0].token;
    --seq->num_pending;
    append(seq, samples[0]);
  }
  // Ended sequences whose last step has now completed give their cache back.
  for (size_t i = 0; i < deferred_.size();) {
    if (deferred_[i].after_step <= completed_step_) {
      blocks_.release(deferred_[i].table);
      deferred_[i] = std::move(deferred_.back());
      deferred_.pop_back();
    } else {
      ++i;
    }
  }
  return touched_;
}

}  // namespace gannet::engine
