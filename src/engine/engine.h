// The engine: owns the model, tokenizer, cache, scheduler, executor and output processor,
// and turns add_request / step / abort into RequestOutputs (DESIGN.md section 2,
// docs/request-lifecycle.md). With asynchronous scheduling the executor runs on its own
// thread: step() plans step N+1 and submits it, then collects step N's result and turns
// it into outputs while N+1 runs.
#pragma once

#include <cstdint>
#include <future>
#include <map>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "cache/block_manager.h"
#include "cache/cache_engine.h"
#include "cache/disk_tier.h"
#include "core/collective.h"
#include "core/thread_pool.h"
#include "engine/executor.h"
#include "engine/executor_thread.h"
#include "engine/output_processor.h"
#include "engine/request.h"
#include "engine/scheduler.h"
#include "gannet/engine_args.h"
#include "gannet/request_output.h"
#include "gannet/sampling_params.h"
#include "io/checkpoint.h"
#include "model/expert_parallel.h"
#include "model/model.h"
#include "structured/constraint.h"
#include "tokenizer/tokenizer.h"
#include "vision/image.h"
#include "vision/image_processor.h"

namespace gannet::engine {

class Engine {
 public:
  // group: this engine is one rank of a job (parallel/mpi_world.h) and takes part in its
  // expert parallelism (EngineArgs::expert_parallel); null or one rank: a job of its own.
  // With expert parallelism every rank must call step() the same number of times (the
  // job's drivers loop while any rank has unfinished requests): each step is one forward
  // on every rank, an idle one where a rank has nothing to run.
  explicit Engine(const EngineArgs& args, Collective* group = nullptr);
  ~Engine();

  // Queues a request. Throws gannet::Error (and queues nothing) for bad parameters, an
  // empty prompt, token ids outside the vocabulary, a prompt plus max_tokens longer than
  // the context, more KV than the whole budget, or a duplicate id. A structured-output
  // request's grammar compiles off the engine thread (the same specification once); if it
  // fails, step() returns the request finished with `error` set and finish_reason
  // "error", and the other requests go on.
  void add_request(const std::string& id, const std::string& prompt, const SamplingParams& params);
  void add_request(const std::string& id, const std::vector<int32_t>& prompt_ids, const SamplingParams& params);
  // With images (vision models): the prompt holds one image placeholder per image, in
  // order (image_token_id among the ids, or the model's image marker in the text), which
  // the engine expands to each image's span. Each image is preprocessed here (a bad one is
  // refused before anything is queued) and encoded once, at the first step that computes
  // its span.
  void add_request(const std::string& id, const std::string& prompt, const SamplingParams& params,
                   const std::vector<vision::RgbImage>& images);
  void add_request(const std::string& id, const std::vector<int32_t>& prompt_ids, const SamplingParams& params,
                   const std::vector<vision::RgbImage>& images);
  // Vision models: the image placeholder's token id and text, the processor's settings
  // (vision_config + preprocessor_config.json); image_token_id() < 0 for other models.
  int64_t image_token_id() const { return image_token_id_; }
  static constexpr const char* kImageMarker = "<｜deepseek_image｜>";
  // Text -> token ids with each image marker as image_token_id (plain encode for models
  // without images); add_special_tokens: the BOS id first, as encode does.
  std::vector<int32_t> encode_with_image_markers(const std::string& text, bool add_special_tokens) const;
  const vision::ImageProcessorConfig& image_processor() const { return image_cfg_; }

  // One scheduling + model step. Returns the requests that progressed (with streaming
  // off, only those that finished); a finished request is returned once with
  // finished = true and then forgotten. The outputs live in the engine's buffers, valid
  // until the next step() or abort() (move what you keep). With asynchronous scheduling
  // the outputs are those of the step before the one just submitted.
  std::span<RequestOutput> step();
  // Streaming on (the default): unfinished requests are returned as they progress, each
  // output a delta (new token ids, text and logprobs since the request's last output;
  // the prompt fields only in its first); a finished request's output is complete.
  // Off: only complete outputs of finished requests, for offline batches.
  void set_streaming(bool on) { streaming_ = on; }
  // Stops a request wherever it is and frees its cache. Returns its final output
  // (finish_reason "abort" for unfinished samples), or nothing for an unknown id.
  std::optional<RequestOutput> abort(const std::string& id);
  bool has_unfinished() const { return !requests_.empty(); }

  // Null for a checkpoint without tokenizer.json.
  const tokenizer::Tokenizer* tokenizer() const { return tokenizer_.get(); }
  const model::Model& model() const { return *model_; }
  const EngineArgs& args() const { return args_; }
  const cache::BlockManager& block_manager() const { return *blocks_; }
  // The prefix cache's disk tier, or null.
  cache::DiskTier* disk_tier() const { return disk_.get(); }
  const Scheduler& scheduler() const { return *scheduler_; }
  int64_t max_model_len() const { return max_model_len_; }
  int64_t num_steps() const { return steps_; }
  // Seconds spent in schedule() + update() (not the model), for the scheduler figure.
  double scheduler_seconds() const { return sched_seconds_; }
  // Seconds the executor spent running steps; the rest of a run's wall time is host work
  // the executor waited for (exposed scheduling overhead).
  double executor_seconds() const { return executor_seconds_; }
  double draft_seconds() const { return draft_seconds_; }  // of executor_seconds(): drafting
  // Benchmarks (bench decode --force-accept): requests whose prompt is a key here draft the
  // mapped continuation instead of what the drafter proposes (which still runs), with
  // confidence 1; verification is unchanged. Only while no request is unfinished.
  void set_forced_drafts(std::map<std::vector<int32_t>, std::vector<int32_t>> by_prompt);
  bool async_scheduling() const { return exec_thread_ != nullptr; }
  // Expert parallelism's placement and statistics, or null (one rank, or a dense model).
  const model::ExpertParallel* expert_parallel() const { return model_->expert_parallel(); }
  model::ExpertParallel* expert_parallel() { return model_->expert_parallel(); }
  const io::Checkpoint& checkpoint() const { return *checkpoint_; }
  // Where the weights went at load (--weight-memory): bytes mapped, copied, left on 4 KiB pages.
  const io::PageInReport& weight_page_in() const { return page_in_; }
  // Executor rows currently held (tests: none left once everything has finished).
  size_t num_executor_rows() const { return executor_->num_rows(); }

 private:
  void add(std::unique_ptr<Request> req);
  // Expands the prompt's image placeholders and builds req.images (or refuses them).
  void attach_images(Request& req, const std::vector<vision::RgbImage>& images) const;
  // Hands requests whose grammar finished compiling to the scheduler (or fails them).
  void admit_compiled();
  void check_stop(Sequence& seq);
  void finish(Sequence& seq, const char* reason, bool flush_text = true);
  // Applies one step's result: tokens, stop checks, outputs into outputs_.
  void process(const StepResult& result);
  void drain();  // waits for and applies every step in flight
  // Runs a plan (synchronous: at once, result applied) or submits it to the executor
  // thread; uses the next plan/result buffer pair.
  void launch(const StepPlan& plan);
  RequestOutput& next_output();
  // The prefix cache disk tier's model identity (disk_tier.h).
  cache::BlockHash model_identity(const model::CacheSpec& spec) const;

  EngineArgs args_;
  std::unique_ptr<ThreadPool> pool_;
  std::unique_ptr<io::Checkpoint> checkpoint_;
  io::PageInReport page_in_;
  std::unique_ptr<model::Model> model_;
  std::unique_ptr<tokenizer::Tokenizer> tokenizer_;
  int64_t replay_keep_ = 0;  // decoder bounded replay (DeepSeek-V4.1): rows kept; 0: off
  std::unique_ptr<cache::CacheEngine> cache_;
  std::unique_ptr<cache::BlockManager> blocks_;
  std::unique_ptr<cache::DiskTier> disk_;  // the prefix cache's disk tier, when asked for
  std::unique_ptr<Scheduler> scheduler_;
  std::unique_ptr<Executor> executor_;
  std::unique_ptr<OutputProcessor> outputs_;
  std::vector<int32_t> eos_ids_;
  int64_t max_model_len_ = 0;
  int64_t image_token_id_ = -1;  // vision models only
  vision::ImageProcessorConfig image_cfg_;
  std::map<std::string, std::unique_ptr<Request>> requests_;
  // Structured output: requests waiting for their grammar, compiled grammars by
  // specification (kind, whitespace, text; cleared past 64), and the vocabulary as bytes
  // (built on the first structured request).
  using GrammarFuture = std::shared_future<std::shared_ptr<structured::Automaton>>;
  std::vector<std::pair<Request*, GrammarFuture>> compiling_;
  std::map<std::string, GrammarFuture> grammar_cache_;
  std::shared_future<std::shared_ptr<const structured::TokenVocab>> grammar_vocab_;
  int64_t steps_ = 0;
  double sched_seconds_ = 0, executor_seconds_ = 0, draft_seconds_ = 0;
  bool streaming_ = true;
  // Step buffers, reused: plan and result i serve steps i, i + 2, ... (at most two steps
  // are in flight, and a plan is only rebuilt after its step's result was applied).
  StepPlan plans_[2];
  StepResult results_[2];
  uint64_t next_buffer_ = 0;
  std::vector<Request*> progressed_;   // requests with new output in this step
  std::vector<RequestOutput> out_buf_; // step()'s outputs, reused
  size_t num_out_ = 0;
  std::unique_ptr<Collective> lockstep_;  // the executor's stream of the job (expert parallelism)
  // Last: stopped (after finishing what was submitted) before anything it uses goes.
  std::unique_ptr<ExecutorThread> exec_thread_;
};

}  // namespace gannet::engine
