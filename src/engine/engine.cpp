#include "core/cpu_budget.h"
#include "engine/engine.h"

#include "kernels/cpu/matmul.h"

#include <algorithm>
#include <filesystem>
#include <chrono>
#include <cstdio>
#include <fstream>
#include <random>
#include <thread>
#include <xxhash.h>

#include "core/cpu_features.h"
#include "core/error.h"
#include "engine/step_profile.h"
#include "core/progress_bar.h"
#include "io/deepseek_v41_config.h"
#include "core/memory_info.h"
#include "io/deepseek_v4_config.h"
#include "io/model_config.h"
#include "model/deepseek_v41/vision.h"

namespace gannet::engine {

namespace {

double now_seconds() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

uint64_t mem_available_bytes() { return gannet::mem_available_bytes().value_or(uint64_t(8) << 30); }

}  // namespace

Engine::Engine(const EngineArgs& args, Collective* group) : args_(args) {
  args_.validate();
  const int threads = args_.threads > 0 ? args_.threads : usable_cpus();
  pool_ = std::make_unique<ThreadPool>(threads);
  io::ModelConfig cfg = io::load_model_config(args_.model);
  cfg.quantize_at_load = io::parse_quantize_flag(args_.quantize);
  cfg.exact_activations = args_.exact_activations;
  if (args_.kv_fake_quant != -1 && !cfg.deepseek_v4)
    fail("--no-kv-fake-quant / GANNET_KV_FAKE_QUANT apply to DeepSeek-V4-Flash only, not ", cfg.architecture);
  cfg.kv_fake_quant = args_.kv_fake_quant != 0;
  if (args_.kv_cache_dtype != "auto" && (cfg.deepseek_v4 || cfg.deepseek_v41))
    fail("--kv-cache-dtype ", args_.kv_cache_dtype, ": ", cfg.architecture,
         " keeps its cache in its own formats (compact FP8/FP4 entries); leave it at auto");
  cfg.kv_cache_bf16 = args_.kv_cache_dtype == "bf16";
  // Expert parallelism: on by default for a MoE model in a job of several ranks.
  const int ranks = group ? group->size() : 1;
  const int64_t routed = cfg.deepseek_v41 ? cfg.deepseek_v41->n_routed_experts
                         : cfg.deepseek_v4 ? cfg.deepseek_v4->n_routed_experts
                                           : 0;
  const bool ep_knobs = args_.ep_redundant_experts > 0 || args_.eplb_interval > 0 || args_.eplb_window > 0;
  if (ranks == 1 && (args_.expert_parallel == 1 || ep_knobs))
    fail("--expert-parallel / --ep-redundant-experts / --eplb-interval spread experts over the ranks of an mpirun job; "
         "this run has one rank (start it with mpirun -np N)");
  const bool ep = ranks > 1 && args_.expert_parallel != 0 && (routed > 0 || args_.expert_parallel == 1);
  if (ep && routed == 0)
    fail("--expert-parallel on: ", cfg.architecture, " has no routed experts",
         "; expert parallelism runs DeepSeek-V4 and V4.1 checkpoints (use --expert-parallel off for data parallelism)");
  if (!ep && ep_knobs) fail("--ep-redundant-experts / --eplb-interval / --eplb-window need expert parallelism");
  io::SafetensorsFile::Keep keep;
  if (ep) {
    if (args_.speculative_verify == "varlen")
      fail("--speculative-verify varlen measures step times with forwards of this rank alone at start-up, which "
           "expert parallelism cannot run; use fixed");
    cfg.ep_rank = group->rank();
    cfg.ep_size = ranks;
    cfg.ep_redundant = args_.ep_redundant_experts;
    cfg.eplb_interval = args_.eplb_interval;
    cfg.eplb_window = args_.eplb_window;
    const model::ExpertPlacement first = model::initial_placement(routed, ranks, args_.ep_redundant_experts);
    const int me = group->rank();
    keep = [first, me](const std::string& name) {
      const int64_t e = model::routed_expert_of_tensor(name);
      if (e < 0 || e >= first.n_experts) return true;
      for (int32_t g : first.replicas[size_t(e)])
        if (first.rank_of(g) == me) return true;
      return false;
    };
  }
  checkpoint_ = std::make_unique<io::Checkpoint>(args_.model, nullptr, keep);
  {
    // Weights are read in once at start-up whatever the logging, so the first requests do
    // not pay for page faults; only the progress bar depends on --quiet.
    ProgressBar bar(args_.quiet ? std::string() : "loading " + args_.model, true);
    // Ranks of an mpirun job that share a machine would each hold a copy where the file
    // mapping shares one page cache, so auto keeps the mapping there; copy is honoured.
    io::WeightMemory wm = io::parse_weight_memory(args_.weight_memory);
    if (wm == io::WeightMemory::kAuto && group && group->size() > 1) wm = io::WeightMemory::kMap;
    const io::PageInReport& r = page_in_ = checkpoint_->page_in(wm, [&](uint64_t d, uint64_t t) {
      if (!args_.quiet) bar.update(d, t);
    });
    if (!args_.quiet && r.copied && args_.weight_memory == "auto")
      std::fprintf(stderr, "weights: %.2f GiB were cached in 4 KiB pages; copied into memory on 2 MiB pages "
                   "(--weight-memory map keeps the file mapping)\n", double(r.copied) / double(1 << 30));
    if (!args_.quiet && r.small_pages)
      std::fprintf(stderr, "weights: %.2f GiB are mapped with 4 KiB pages, which slows decode, and too little "
                   "memory is available to copy them (--weight-memory)\n", double(r.small_pages) / double(1 << 30));
  }
  // DSpark without --num-speculative-tokens drafts the default 4, or the drafter's whole
  // block when that is smaller (it proposes no more per step).
  if (args_.speculative == "dspark" && args_.num_speculative_tokens == 0 && cfg.deepseek_v41 &&
      cfg.deepseek_v41->dspark_block_size > 0 && cfg.deepseek_v41->dspark_block_size < args_.speculative_tokens())
    args_.num_speculative_tokens = cfg.deepseek_v41->dspark_block_size;
  cfg.speculative_tokens = args_.speculative_tokens();  // ring room for rejected drafts (DeepSeek-V4.1)
  if (args_.speculative == "dspark" && !cfg.deepseek_v41)
    fail("--speculative dspark: ", cfg.architecture, " has no DSpark drafter (only DeepSeek-V4.1 checkpoints carry one; "
         "use --speculative ngram)");
  cfg.dspark = args_.speculative == "dspark";  // the model refuses a checkpoint without mtp.* tensors
  model_ = model::create_model(cfg, *checkpoint_);
  if (cfg.deepseek_v41 && cfg.deepseek_v41->vision.present) {  // image input
    image_token_id_ = cfg.deepseek_v41->image_token_id;
    image_cfg_ = model::deepseek_v41::image_processor_config(*cfg.deepseek_v41, args_.model);
  }
  // A model with bf16 linears has its bf16 GEMM route measured (or GANNET_BF16_GEMM read)
  // once, at start-up, on the pool it will use; other models never need it.
  if (model_->weight_bytes_by_format().count("bf16")) kernels::bf16_gemm_choice(pool_.get());
  // A checkpoint without tokenizer.json runs on token ids (prompt_token_ids); its outputs
  // have no text.
  if (std::filesystem::exists(std::filesystem::path(args_.model) / "tokenizer.json"))
    tokenizer_ = std::make_unique<tokenizer::Tokenizer>(tokenizer::Tokenizer::from_dir(args_.model));
  for (int64_t e : cfg.eos_token_ids) {
    if (e >= cfg.vocab_size)
      fail(args_.model, ": eos_token_id ", e, " (config.json / generation_config.json) is outside the vocabulary of ",
           cfg.vocab_size);
    eos_ids_.push_back(int32_t(e));
  }
  if (args_.max_model_len > cfg.max_position_embeddings)
    fail("--max-model-len ", args_.max_model_len, " exceeds the model's context of ", cfg.max_position_embeddings,
         " tokens");
  max_model_len_ = args_.max_model_len > 0 ? std::min(args_.max_model_len, cfg.max_position_embeddings)
                                           : cfg.max_position_embeddings;
  if (!args_.enable_chunked_prefill && args_.max_num_batched_tokens < max_model_len_)
    fail("without chunked prefill --max-num-batched-tokens (", args_.max_num_batched_tokens,
         ") must be at least the context length (", max_model_len_, "), or long prompts could never run");

  // KV budget: the flag, or 40% of available memory capped at what max_num_seqs
  // sequences of the full context could ever use.
  const model::CacheSpec spec = model_->cache_spec();
  spec.check_block_size(args_.block_size);
  const uint64_t per_block = spec.bytes_per_block(args_.block_size);
  // Prefix caching: a cache that is all paged takes hits as they are; a model with
  // per-sequence state (DeepSeek-V4 and V4.1's window rings and open compressor groups,
  // V4.1's Engram history) rebuilds it by recomputing cached positions
  // (Model::prefix_replay_start, which covers DSpark's rings too: they are seeded from the
  // replayed rows), or copies a state snapshot (below); one that cannot runs without.
  const bool stateful = spec.state_bytes_per_seq > 0;
  const bool rebuildable = !stateful || model_->prefix_replay_start(int64_t(1) << 30, 0) >= 0;
  const char* no_cache_why = !rebuildable ? "keeps per-sequence state a cache hit cannot rebuild" : nullptr;
  if (args_.enable_prefix_caching == 1 && no_cache_why)
    fail("--enable-prefix-caching: ", cfg.architecture, " ", no_cache_why, "; use --no-prefix-caching or leave the default");
  const bool prefix_caching = args_.enable_prefix_caching != 0 && !no_cache_why;
  // State snapshots: extra state slots after the sequences' own.
  const bool snapshots_possible = prefix_caching && stateful && model_->state_restorable(1, 0);
  if (args_.prefix_state_snapshots > 0 && !snapshots_possible)
    fail("--prefix-state-snapshots: ", cfg.architecture,
         !stateful ? " keeps no per-sequence state (its cache hits need no snapshot)"
                   : (prefix_caching ? " cannot restore a saved state" : " runs without prefix caching"));
  int64_t num_snapshots = snapshots_possible ? args_.prefix_state_snapshots : 0;
  uint64_t budget = args_.kv_cache_memory;
  if (budget == 0) {
    const uint64_t blocks_per_seq = uint64_t((max_model_len_ + args_.block_size - 1) / args_.block_size);
    const uint64_t cap = uint64_t(args_.max_num_seqs) * blocks_per_seq * per_block +
                         uint64_t(args_.max_num_seqs) * uint64_t(spec.state_bytes_per_seq);
    budget = std::min<uint64_t>(uint64_t(double(mem_available_bytes()) * 0.4), cap);
  }
  // Snapshot slots come on top of the budget (which keeps its blocks); by default four per
  // sequence (a conversation keeps its last prompt's and last answer's while its next turn
  // waits, and more conversations wait than run), up to a quarter of the budget's size;
  // then a rolling slot per sequence.
  if (num_snapshots < 0)
    num_snapshots = std::min<int64_t>(4 * args_.max_num_seqs, int64_t(budget / 4 / uint64_t(spec.state_bytes_per_seq)));
  // With snapshots, each sequence slot also has a rolling slot for its decode snapshots.
  const int64_t num_slots = args_.max_num_seqs + num_snapshots + (num_snapshots > 0 ? args_.max_num_seqs : 0);
  const int64_t num_blocks = cache::CacheEngine::blocks_for_budget(spec, budget, args_.block_size, args_.max_num_seqs);
  if (num_blocks < 1)
    fail("--kv-cache-memory ", format_bytes(budget), " holds no block of ", args_.block_size, " tokens (",
         format_bytes(per_block), " each, plus ", format_bytes(uint64_t(spec.state_bytes_per_seq)),
         " of state for each of --max-num-seqs ", args_.max_num_seqs, " sequences)");
  // The arena is committed now: a budget this machine cannot hold is refused here.
  const uint64_t arena = uint64_t(num_blocks) * per_block + uint64_t(num_slots) * uint64_t(spec.state_bytes_per_seq);
  const uint64_t available = mem_available_bytes();
  if (arena > available)
    fail("the KV cache needs ", format_bytes(arena), " (--kv-cache-memory / GANNET_KV_CACHE_MEMORY = ",
         format_bytes(budget),
         num_snapshots > 0 ? ", plus " + std::to_string(num_snapshots + args_.max_num_seqs) +
                                 " state snapshots (--prefix-state-snapshots and one per sequence)"
                           : std::string(),
         ") but only ", format_bytes(available), " of memory is available; lower it");
  try {
    cache_ = std::make_unique<cache::CacheEngine>(spec, num_blocks, args_.block_size, num_slots);
  } catch (const Error& e) {
    fail(e.what(), " (--kv-cache-memory / GANNET_KV_CACHE_MEMORY = ", format_bytes(budget), "; lower it)");
  }
  const int64_t watermark = int64_t(args_.watermark * double(num_blocks));
  blocks_ = std::make_unique<cache::BlockManager>(num_blocks, args_.block_size, args_.max_num_seqs, watermark);
  SchedulerConfig sc;
  sc.max_model_len = max_model_len_;
  sc.max_num_seqs = args_.max_num_seqs;
  sc.max_num_batched_tokens = args_.max_num_batched_tokens;
  sc.chunked_prefill = args_.enable_chunked_prefill;
  sc.prompt_logprob_chunk = std::min<int64_t>(256, args_.max_num_batched_tokens);
  sc.max_logit_rows = args_.max_num_seqs + sc.prompt_logprob_chunk;
  // Speculative decoding (engine_args.h). The DeepSeek models' per-sequence rings get room
  // for rejected drafts (ModelConfig::speculative_tokens).
  sc.num_speculative_tokens = args_.speculative_tokens();
  // Verified drafts need logit rows of their own (as many as 256 more; fewer drafts when
  // a step runs out of them).
  sc.max_logit_rows += std::min<int64_t>(args_.max_num_seqs * sc.num_speculative_tokens, 256);
  sc.recompute_to_decode = args_.speculative == "dspark";
  sc.full_depth = args_.speculative_sampling == "rejection";
  if (sc.full_depth) {
    // Every decode verifies all its drafts: logit rows for all of them, and a step of
    // tokens that holds at least one full row.
    sc.max_logit_rows = args_.max_num_seqs * (1 + sc.num_speculative_tokens) + sc.prompt_logprob_chunk;
    if (args_.max_num_batched_tokens < 1 + sc.num_speculative_tokens)
      fail("--speculative-sampling rejection verifies all ", sc.num_speculative_tokens,
           " drafts of a row in one step: --max-num-batched-tokens (", args_.max_num_batched_tokens,
           ") must be at least ", 1 + sc.num_speculative_tokens);
  }
  // Bounded replay exists for models with decoder layers after their last KV source.
  if (!cfg.deepseek_v41 && (args_.yoco_keep_tokens != -1 || args_.yoco_replay != -1))
    fail("--yoco-keep-tokens / --no-yoco-replay apply to DeepSeek-V4.1 only; ", cfg.architecture,
         " has no decoder layers to replay");
  replay_keep_ = cfg.deepseek_v41 && args_.yoco_replay != 0 ? (args_.yoco_keep_tokens > 0 ? args_.yoco_keep_tokens : 140) : 0;
  sc.prefix_caching = prefix_caching;
  if (sc.prefix_caching && stateful) {
    const model::Model* m = model_.get();
    const int64_t keep = replay_keep_;
    // A request's decoder bounded replay start (0: none).
    auto replay_from = [keep](int64_t prompt_len) { return keep > 0 ? std::max<int64_t>(0, prompt_len - keep) : 0; };
    sc.replay_start = [m, replay_from](int64_t hit, int64_t prompt_len) {
      return m->prefix_replay_start(hit, replay_from(prompt_len));
    };
    if (num_snapshots > 0) {
      sc.num_snapshots = num_snapshots;
      sc.snapshot_slot0 = int32_t(args_.max_num_seqs);
      sc.rolling_slot0 = int32_t(args_.max_num_seqs + num_snapshots);
      // With bounded replay every sequence's decoder layers start at its own replay_from:
      // a saved state serves one whose replay starts at or after the snapshot (one with
      // no bounded replay at all, its prompt shorter than keep, would need rows the saver
      // skipped).
      sc.snapshot_usable = [m, keep, replay_from](int64_t at, int64_t prompt_len) {
        const int64_t rf = replay_from(prompt_len);
        return (keep == 0 || rf > 0) && m->state_restorable(at, rf);
      };
    }
  }
  sc.prefix_wait_steps = args_.prefix_wait_steps;
  scheduler_ = std::make_unique<Scheduler>(sc, *blocks_);
  if (!args_.prefix_cache_dir.empty()) {
    if (!sc.prefix_caching)
      fail("--prefix-cache-dir: ", cfg.architecture, " runs without prefix caching (per-sequence state)");
    const uint64_t disk_bytes = args_.prefix_cache_disk_size ? args_.prefix_cache_disk_size : uint64_t(20) << 30;
    cache::BlockHash id = model_identity(spec);
    if (model_->expert_parallel()) {
      // Each rank's KV depends on every rank's experts: the identity covers all shares.
      const std::string mine = std::to_string(id.lo) + ":" + std::to_string(id.hi) + ";";
      std::string all;
      for (const std::string& part : group->gather(mine)) all += part;
      all = group->broadcast(all);
      id = cache::hash_text(all, id);
    }
    disk_ = std::make_unique<cache::DiskTier>(args_.prefix_cache_dir, disk_bytes, id, *cache_);
    cache::DiskTier* disk = disk_.get();
    // A block whose writing step is still in flight is not copied out (its contents are
    // not complete yet); it is simply not saved.
    const Scheduler* sched = scheduler_.get();
    blocks_->set_evict_hook([disk, sched](int32_t b, const cache::BlockHash& h, const cache::BlockHash& p,
                                          const int32_t* t, uint64_t ready) {
      if (ready <= sched->completed_step()) disk->store(b, h, p, t);
      else disk->count_dropped();
    });
    scheduler_->set_disk_tier(disk);
  }
  executor_ = std::make_unique<Executor>(*model_, *cache_, pool_.get(), args_.max_num_batched_tokens,
                                         sc.max_logit_rows, args_.max_num_seqs, eos_ids_, replay_keep_,
                                         sampling::NgramConfig{args_.ngram_min, args_.ngram_max},
                                         args_.speculative_sampling == "rejection");
  if (args_.speculative_verify == "varlen") {
    // The step-time profile the depth choice needs (measured once per model, threads and
    // kernel path, then cached), over the tokens a step of full-depth rows may hold.
    const int64_t max_b = std::min<int64_t>({args_.max_num_batched_tokens,
                                             args_.max_num_seqs * (1 + sc.num_speculative_tokens), 160});
    const std::string key = std::filesystem::absolute(args_.model).string() + "|" +
                            std::to_string(model_->weight_bytes()) + "|" + std::to_string(threads) + "|" +
                            std::string(kernel_path_name());
    if (!args_.quiet) std::fprintf(stderr, "gannet: step-time profile for --speculative-verify varlen\n");
    executor_->set_step_profile(step_profile(key, *model_, *cache_, pool_.get(), max_b));
  }
  executor_->set_grammar_rollback(int(std::max<int64_t>(16, 2 * (args_.num_speculative_tokens + model_->draft_block()) + 2)));
  outputs_ = std::make_unique<OutputProcessor>(tokenizer_.get());
  if (model::ExpertParallel* x = model_->expert_parallel()) {
    lockstep_ = group->split();
    x->set_comm(lockstep_.get());
    executor_->set_lockstep(lockstep_.get());
  }
  if (args_.async_scheduling) exec_thread_ = std::make_unique<ExecutorThread>(*executor_);
  if (!args_.quiet) {
    std::fprintf(stderr, "gannet: engine %s\n", args_.describe().c_str());
    if (const model::ExpertParallel* x = model_->expert_parallel())
      std::fprintf(stderr,
                   "gannet: expert parallel over %d ranks: %lld expert slots per rank and layer (%lld redundant), "
                   "rank 0 maps %s of the checkpoint's %s; EPLB %s\n",
                   x->ranks(), (long long)x->slots(), (long long)args_.ep_redundant_experts,
                   format_bytes(checkpoint_->mapped_bytes()).c_str(), format_bytes(checkpoint_->total_bytes()).c_str(),
                   args_.eplb_interval ? ("every " + std::to_string(args_.eplb_interval) + " forwards").c_str() : "off");
    const int64_t tokens = cache_->capacity_tokens();
    std::fprintf(stderr,
                 "gannet: KV cache %s: %lld blocks x %d tokens = %lld tokens; %.2f sequences of the full context "
                 "(%lld tokens) fit at once\n",
                 format_bytes(cache_->bytes()).c_str(), (long long)num_blocks, args_.block_size, (long long)tokens,
                 double(tokens) / double(max_model_len_), (long long)max_model_len_);
    if (disk_)
      std::fprintf(stderr, "gannet: prefix cache disk tier %s: %lld blocks (%s) of this model found\n",
                   args_.prefix_cache_dir.c_str(), (long long)disk_->stats().files,
                   format_bytes(uint64_t(disk_->stats().bytes)).c_str());
    std::fprintf(stderr, "gannet: prefix caching %s\n",
                 sc.prefix_caching ? "on"
                 : args_.enable_prefix_caching == 0
                     ? "off (--no-prefix-caching)"
                     : "off (this model keeps per-sequence state a cache hit cannot rebuild)");
  }
}

void Engine::set_forced_drafts(std::map<std::vector<int32_t>, std::vector<int32_t>> by_prompt) {
  GANNET_CHECK(!has_unfinished(), "forced drafts are set between runs");
  executor_->set_forced_drafts(std::move(by_prompt));
}

Engine::~Engine() {
  exec_thread_.reset();  // finishes the steps in flight before the buffers they use go
  if (disk_) {
    // What memory still caches goes to disk too, so the next start finds it.
    blocks_->for_each_cached([&](int32_t b, const cache::BlockHash& h, const cache::BlockHash& p, const int32_t* t) {
      disk_->store(b, h, p, t, /*wait=*/true);
    });
    blocks_->set_evict_hook(nullptr);
    disk_.reset();  // waits for the writes
  }
}

cache::BlockHash Engine::model_identity(const model::CacheSpec& spec) const {
  // Everything besides the tokens that decides what a block's K/V hold: the architecture
  // and config, every weight (names, types, shapes, bytes), the cache layout and the
  // flags that change numerics. Not the thread count or kernel path: results are
  // bit-identical across those.
  std::string id = "gannet prefix cache 1\n";
  {
    std::ifstream f(args_.model + "/config.json", std::ios::binary);
    id += std::string(std::istreambuf_iterator<char>(f), std::istreambuf_iterator<char>()) + "\n";
  }
  cache::BlockHash h = cache::hash_text(id);
  for (const std::string& name : checkpoint_->names()) {
    const io::TensorRef t = checkpoint_->find(name);
    std::string meta = name + "|" + std::to_string(int(t.info->dtype));
    for (int64_t d : t.info->shape) meta += "," + std::to_string(d);
    h = cache::hash_text(meta, h);
    if (t.data)  // a rank of an expert-parallel job has its share of the experts only
      h = cache::hash_text(std::string_view(reinterpret_cast<const char*>(t.data), size_t(t.info->end - t.info->begin)), h);
  }
  std::string layout = "block_size=" + std::to_string(args_.block_size);
  for (const kernels::CacheGroup& g : spec.groups)
    layout += "|" + g.name + "," + std::to_string(g.layers) + "," + std::to_string(g.bytes_per_entry) + "," +
              std::to_string(g.tokens_per_entry) + "," + kernels::cache_format_name(g.format);
  layout += "|quantize=" + args_.quantize + "|exact_activations=" + std::to_string(args_.exact_activations) +
            "|kv_fake_quant=" + std::to_string(args_.kv_fake_quant) + "|kv_cache_dtype=" + args_.kv_cache_dtype;
  return cache::hash_text(layout, h);
}

void Engine::add_request(const std::string& id, const std::string& prompt, const SamplingParams& params) {
  if (prompt.empty()) fail("request '", id, "': the prompt is empty");
  auto req = std::make_unique<Request>();
  req->id = id;
  req->prompt = prompt;
  if (!tokenizer_)
    fail("request '", id, "': ", args_.model, " has no tokenizer.json, so prompts must be token ids (prompt_token_ids)");
  req->prompt_ids = tokenizer_->encode(prompt, /*add_special_tokens=*/true);
  req->params = params;
  attach_images(*req, {});
  add(std::move(req));
}

void Engine::add_request(const std::string& id, const std::vector<int32_t>& prompt_ids, const SamplingParams& params) {
  auto req = std::make_unique<Request>();
  req->id = id;
  req->prompt_ids = prompt_ids;
  req->params = params;
  attach_images(*req, {});
  add(std::move(req));
}

void Engine::add_request(const std::string& id, const std::string& prompt, const SamplingParams& params,
                         const std::vector<vision::RgbImage>& images) {
  if (images.empty()) return add_request(id, prompt, params);
  if (prompt.empty()) fail("request '", id, "': the prompt is empty");
  if (!tokenizer_)
    fail("request '", id, "': ", args_.model, " has no tokenizer.json, so prompts must be token ids (prompt_token_ids)");
  if (image_token_id_ < 0) fail("request '", id, "': ", args_.model, " takes no images (no vision tower)");
  auto req = std::make_unique<Request>();
  req->id = id;
  req->prompt = prompt;
  req->prompt_ids = encode_with_image_markers(prompt, /*add_special_tokens=*/true);
  req->params = params;
  attach_images(*req, images);
  add(std::move(req));
}

void Engine::add_request(const std::string& id, const std::vector<int32_t>& prompt_ids, const SamplingParams& params,
                         const std::vector<vision::RgbImage>& images) {
  auto req = std::make_unique<Request>();
  req->id = id;
  req->prompt_ids = prompt_ids;
  req->params = params;
  attach_images(*req, images);
  add(std::move(req));
}

std::vector<int32_t> Engine::encode_with_image_markers(const std::string& text, bool add_special_tokens) const {
  if (!tokenizer_) fail(args_.model, " has no tokenizer.json, so prompts must be token ids (prompt_token_ids)");
  if (image_token_id_ < 0) return tokenizer_->encode(text, add_special_tokens);
  // Each marker is the placeholder id, whether or not the tokenizer knows it.
  const std::string marker = kImageMarker;
  std::vector<int32_t> ids;
  size_t at = 0;
  for (bool first = true;; first = false) {
    const size_t hit = text.find(marker, at);
    const std::vector<int32_t> part =
        tokenizer_->encode(text.substr(at, hit == std::string::npos ? std::string::npos : hit - at),
                           first && add_special_tokens);
    ids.insert(ids.end(), part.begin(), part.end());
    if (hit == std::string::npos) return ids;
    ids.push_back(int32_t(image_token_id_));
    at = hit + marker.size();
  }
}

void Engine::attach_images(Request& req, const std::vector<vision::RgbImage>& images) const {
  const std::string& id = req.id;
  int64_t holders = 0;
  for (int32_t t : req.prompt_ids) holders += image_token_id_ >= 0 && t == image_token_id_;
  if (images.empty()) {
    if (holders > 0)
      fail("request '", id, "': the prompt holds ", holders, " image placeholder(s) (token id ", image_token_id_,
           ") but no images were given");
    return;
  }
  if (image_token_id_ < 0) fail("request '", id, "': ", args_.model, " takes no images (no vision tower)");
  if (int64_t(images.size()) > args_.limit_images_per_prompt)
    fail("request '", id, "': ", images.size(), " images, more than --limit-images-per-prompt ",
         args_.limit_images_per_prompt);
  if (holders != int64_t(images.size()))
    fail("request '", id, "': ", images.size(), " image(s) but the prompt holds ", holders, " image placeholder(s) (",
         kImageMarker, ", token id ", image_token_id_, "): one per image, where it goes");
  auto spans = std::make_shared<model::ImageSpans>();
  std::vector<int32_t> ids;
  size_t k = 0;
  for (int32_t t : req.prompt_ids) {
    if (t != image_token_id_) {
      ids.push_back(t);
      continue;
    }
    vision::ImagePatches p;
    try {
      p = vision::preprocess_image(images[k], image_cfg_);
    } catch (const Error& e) {
      fail("request '", id, "': image ", k, ": ", e.what());
    }
    model::ImageSpan s;
    s.start = int64_t(ids.size());
    s.grid_h = p.plan.grid_h;
    s.grid_w = p.plan.grid_w;
    s.length = model_->image_span_tokens(s.grid_h, s.grid_w);
    GANNET_CHECK(s.length == p.plan.n_tokens, "image span ", s.length, " vs the processor's ", p.plan.n_tokens);
    s.pixels = std::move(p.values);
    // The content key of the prefix cache: the pixels the model sees and their grid.
    XXH3_state_t* st = XXH3_createState();
    XXH3_128bits_reset(st);
    const int64_t grid[2] = {s.grid_h, s.grid_w};
    XXH3_128bits_update(st, grid, sizeof(grid));
    XXH3_128bits_update(st, s.pixels.data(), s.pixels.size() * sizeof(float));
    const XXH128_hash_t h = XXH3_128bits_digest(st);
    XXH3_freeState(st);
    s.hash_lo = h.low64, s.hash_hi = h.high64;
    ids.insert(ids.end(), size_t(s.length), int32_t(image_token_id_));
    spans->push_back(std::move(s));
    ++k;
  }
  req.prompt_ids = std::move(ids);
  req.images = std::move(spans);
}

void Engine::add(std::unique_ptr<Request> req) {
  const std::string& id = req->id;
  try {
    req->params.validate();
  } catch (const Error& e) {
    fail("request '", id, "': ", e.what());
  }
  if (requests_.count(id)) fail("request id '", id, "' is already in use");
  const auto& p = req->params;
  const int64_t n = int64_t(req->prompt_ids.size());
  if (n == 0) fail("request '", id, "': the prompt is empty");
  for (int32_t t : req->prompt_ids)
    if (t < 0 || t >= model_->config().vocab_size)
      fail("request '", id, "': prompt token id ", t, " is outside the vocabulary (size ", model_->config().vocab_size, ")");
  if (p.max_tokens > max_model_len_ - n)
    fail("request '", id, "': prompt of ", n, " tokens plus max_tokens ", p.max_tokens, " exceeds the model's context of ",
         max_model_len_, " tokens");
  if (blocks_->blocks_for(n + p.max_tokens) > blocks_->num_blocks())
    fail("request '", id, "': ", n + p.max_tokens, " tokens need more KV blocks than the whole budget holds (",
         blocks_->num_blocks(), " blocks of ", blocks_->block_size(), " tokens); raise --kv-cache-memory");
  if (!tokenizer_ && !p.stop.empty())
    fail("request '", id, "': 'stop' strings need text, and ", args_.model, " has no tokenizer.json (use stop_token_ids)");
  for (int32_t t : p.stop_token_ids)
    if (t >= model_->config().vocab_size)
      fail("request '", id, "': stop token id ", t, " is outside the vocabulary (size ", model_->config().vocab_size, ")");
  if (p.n > args_.max_num_seqs) fail("request '", id, "': n = ", p.n, " exceeds --max-num-seqs ", args_.max_num_seqs);
  if (p.prompt_logprobs && replay_keep_ > 0 && n > replay_keep_)
    fail("request '", id, "': prompt_logprobs need every prompt row, but decoder bounded replay computes only the last ",
         replay_keep_, " (run with --no-yoco-replay)");
  req->seed = p.seed ? *p.seed : (uint64_t(std::random_device{}()) << 32) ^ std::random_device{}();
  req->metrics.arrival_time = now_seconds();
  if (p.prompt_logprobs) req->prompt_logprobs.assign(size_t(n), std::nullopt);
  auto seq = std::make_unique<Sequence>();
  seq->id = scheduler_->new_seq_id();
  seq->request = req.get();
  // Room for every token the sequence may reach (+ one placeholder), so decode steps
  // never reallocate.
  seq->tokens.reserve(size_t(n + p.max_tokens + 1));
  seq->tokens = req->prompt_ids;
  seq->prompt_len = n;
  seq->out.token_ids.reserve(size_t(p.max_tokens));
  if (p.logprobs) seq->out.logprobs.reserve(size_t(p.max_tokens));
  // Text: every token at its longest, up to 256 KiB (past that, growth may allocate).
  seq->out.text.reserve(
      size_t(std::min<int64_t>(p.max_tokens * int64_t(outputs_->max_token_bytes() + 3) + 16, int64_t(256) << 10)));
  Sequence* s = seq.get();
  req->seqs.push_back(std::move(seq));
  if (p.structured.active()) {
    if (!tokenizer_)
      fail("request '", id, "': structured output needs token text, and ", args_.model, " has no tokenizer.json");
    if (!grammar_vocab_.valid()) {
      const tokenizer::Tokenizer* tok = tokenizer_.get();
      const int64_t V = model_->config().vocab_size;
      std::vector<int32_t> eos = eos_ids_;
      grammar_vocab_ = std::async(std::launch::async, [tok, V, eos]() mutable {
                         std::vector<std::string> bytes; bytes.resize(size_t(V));
                         for (int32_t t = 0; t < int32_t(std::min<int64_t>(V, int64_t(tok->vocab_size()))); ++t)
                           if (!tok->is_special(t)) bytes[size_t(t)] = tok->id_to_token(t);
                         return std::make_shared<const structured::TokenVocab>(std::move(bytes), eos);
                       }).share();
    }
    const StructuredOutput& so = p.structured;
    const std::string key = std::string(StructuredOutput::kind_name(so.kind)) + '\0' +
                            std::to_string(so.max_whitespace) + '\0' + so.spec;
    auto it = grammar_cache_.find(key);
    if (it == grammar_cache_.end()) {
      if (grammar_cache_.size() >= 64) grammar_cache_.clear();  // each up to a few MiB of masks
      auto vocab = grammar_vocab_;
      auto job = [so, vocab] {
        auto a = std::make_shared<structured::Automaton>(structured::compile_structured(so), vocab.get());
        a->precompute();  // first visits of masks here, off the decode loop
        return a;
      };
      it = grammar_cache_.emplace(key, std::async(std::launch::async, job).share()).first;
    }
    compiling_.push_back({req.get(), it->second});
    requests_[id] = std::move(req);
    return;
  }
  requests_[id] = std::move(req);
  scheduler_->add(s);
}

void Engine::admit_compiled() {
  size_t kept = 0;
  for (size_t i = 0; i < compiling_.size(); ++i) {
    auto& [req, fut] = compiling_[i];
    if (fut.wait_for(std::chrono::seconds(0)) != std::future_status::ready) {
      compiling_[kept++] = compiling_[i];
      continue;
    }
    try {
      req->grammar = fut.get();
      scheduler_->add(req->seqs[0].get());
    } catch (const Error& e) {
      Sequence& s = *req->seqs[0];
      s.status = SeqStatus::kFinished;
      s.out.finish_reason = "error";
      req->metrics.finished_time = now_seconds();
      RequestOutput& o = next_output();
      o = OutputProcessor::snapshot(*req);
      o.finished = true;
      o.error = std::string("structured output: ") + e.what();
      const std::string id = req->id;
      requests_.erase(id);
    }
  }
  compiling_.resize(kept);
}

void Engine::finish(Sequence& seq, const char* reason, bool flush_text) {
  scheduler_->finish(&seq);
  // After a stop string the text ends at the cut: bytes held back by the detokenizer
  // belong to what followed it.
  if (flush_text) outputs_->flush(seq);
  else outputs_->forget(seq);
  seq.out.finish_reason = reason;
}

void Engine::check_stop(Sequence& seq) {
  const SamplingParams& p = seq.request->params;
  const int32_t tok = seq.last_token();
  const int64_t outs = seq.num_outputs();
  if (std::find(p.stop_token_ids.begin(), p.stop_token_ids.end(), tok) != p.stop_token_ids.end() &&
      outs >= p.min_tokens) {
    if (p.include_stop_str_in_output) outputs_->add_token_text(seq);
    seq.out.stop_reason = tok;
    return finish(seq, "stop");
  }
  // A grammar allows EOS only once its document is complete, and then only EOS: it ends
  // the output even before min_tokens.
  if (!p.ignore_eos && (outs >= p.min_tokens || p.structured.active()) &&
      std::find(eos_ids_.begin(), eos_ids_.end(), tok) != eos_ids_.end())
    return finish(seq, "stop");
  if (auto hit = outputs_->add_token_text(seq)) {
    seq.out.stop_reason = *hit;
    return finish(seq, "stop", /*flush_text=*/false);
  }
  if (outs >= p.max_tokens || seq.num_tokens() >= max_model_len_) return finish(seq, "length");
}

RequestOutput& Engine::next_output() {
  if (num_out_ == out_buf_.size()) out_buf_.emplace_back();
  return out_buf_[num_out_++];
}

void Engine::process(const StepResult& result) {
  auto t0 = std::chrono::steady_clock::now();
  executor_seconds_ += result.seconds;
  if (result.idle) return;  // an idle lockstep step: nothing of this rank's ran
  draft_seconds_ += result.draft_seconds;
  const std::vector<Sequence*>& touched = scheduler_->update(result);
  progressed_.clear();
  const double done_time = now_seconds();
  for (Sequence* seq : touched) {
    Request* req = seq->request;
    if (req->metrics.first_token_time == 0) req->metrics.first_token_time = done_time;
    check_stop(*seq);
    // A speculative step's further tokens, each checked as if it had come alone.
    while (!seq->finished() && scheduler_->has_held(seq)) {
      scheduler_->commit_held(seq);
      check_stop(*seq);
    }
    if (req->progress_mark != result.step_id) {  // once per request, in progress order
      req->progress_mark = result.step_id;
      progressed_.push_back(req);
    }
  }
  for (Request* req : progressed_) {
    const bool done = req->finished();
    if (done) req->metrics.finished_time = done_time;
    if (done || streaming_) outputs_->delta(*req, &next_output());
  }
  for (Request* req : progressed_)
    if (req->finished()) requests_.erase(req->id);  // its output was copied above
  sched_seconds_ += std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

void Engine::drain() {
  for (;;) {
    while (exec_thread_ && exec_thread_->in_flight() > 0) process(*exec_thread_->wait());
    // Rows of ended sequences leave the executor with a plan; with nothing left to run,
    // send one that only removes them.
    if (!scheduler_->has_pending_removals()) return;
    StepPlan& plan = plans_[next_buffer_ % 2];
    scheduler_->schedule(plan);
    plan.lockstep = plan.idle = false;  // removals only: no forward, outside the lock-step
    if (plan.empty()) return;
    launch(plan);
  }
}

void Engine::launch(const StepPlan& plan) {
  StepResult& result = results_[next_buffer_ % 2];
  ++next_buffer_;
  if (!plan.idle) ++steps_;
  if (exec_thread_) return exec_thread_->submit(&plan, &result);
  const auto t0 = std::chrono::steady_clock::now();
  executor_->run(plan, &result);
  result.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  process(result);
}

std::span<RequestOutput> Engine::step() {
  num_out_ = 0;
  if (!compiling_.empty()) admit_compiled();
  auto t0 = std::chrono::steady_clock::now();
  StepPlan& plan = plans_[next_buffer_ % 2];
  scheduler_->schedule(plan);
  const double now = now_seconds();
  for (const RowAdd& a : plan.added)
    if (Sequence* s = scheduler_->find_running(a.seq_id))
      if (s->request->metrics.first_scheduled_time == 0) s->request->metrics.first_scheduled_time = now;
  sched_seconds_ += std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  const bool has_work = !plan.empty();
  plan.lockstep = lockstep_ != nullptr;
  plan.idle = false;
  if (has_work) launch(plan);
  else if (lockstep_) {  // every rank runs one forward per step: an idle one here
    plan.clear();
    plan.idle = true;
    launch(plan);
  }
  // Asynchronous: apply the older step while the new one runs; with nothing new to run,
  // wait for what is in flight.
  if (exec_thread_ && (exec_thread_->in_flight() > 1 || (!has_work && exec_thread_->in_flight() == 1)))
    process(*exec_thread_->wait());
  // Once every request is done, collect the steps still in flight (ahead-planned work of
  // finished sequences) so their blocks and rows come back before the engine idles.
  if (requests_.empty()) drain();
  // Nothing to run but grammars still compiling: wait for one rather than spin.
  if (!has_work && !compiling_.empty() && (!exec_thread_ || exec_thread_->in_flight() == 0))
    compiling_.front().second.wait();
  // Nothing to run while a waiting request's blocks are read back from disk: wait for a
  // read (briefly) rather than spin.
  else if (!has_work && disk_ && (!exec_thread_ || exec_thread_->in_flight() == 0) && scheduler_->disk_reads_pending())
    disk_->wait_reads(std::chrono::milliseconds(20));
  return std::span<RequestOutput>(out_buf_.data(), num_out_);
}

std::optional<RequestOutput> Engine::abort(const std::string& id) {
  auto it = requests_.find(id);
  if (it == requests_.end()) return std::nullopt;
  Request& req = *it->second;
  const auto c = std::find_if(compiling_.begin(), compiling_.end(), [&](const auto& x) { return x.first == &req; });
  const bool compiling = c != compiling_.end();
  if (compiling) compiling_.erase(c);
  for (auto& s : req.seqs) {
    if (s->finished()) continue;
    if (!compiling) scheduler_->abort(s.get());
    outputs_->forget(*s);
    s->out.finish_reason = "abort";
  }
  req.metrics.finished_time = now_seconds();
  RequestOutput out = OutputProcessor::snapshot(req);
  out.finished = true;
  requests_.erase(it);
  if (requests_.empty()) drain();
  return out;
}

}  // namespace gannet::engine
