#include "bench/vision_bench.h"

#include <algorithm>
#include <chrono>

#include "core/error.h"
#include "core/thread_pool.h"
#include "io/checkpoint.h"
#include "io/model_config.h"
#include "model/deepseek_v41/model.h"
#include "vision/image_processor.h"

namespace gannet::bench {

Report run_vision_bench(const VisionBenchOptions& o, const Roofline& roofline) {
  const io::ModelConfig cfg = io::load_model_config(o.model);
  if (!cfg.deepseek_v41 || !cfg.deepseek_v41->vision.present)
    fail("bench vision: ", o.model, " has no vision tower (a DeepSeek-V4.1 config with vision_config)");
  const io::DeepseekV41Config& c = *cfg.deepseek_v41;
  io::Checkpoint ckpt(o.model);
  const model::deepseek_v41::DeepseekV41 m(cfg, ckpt);
  const vision::ImageProcessorConfig ic = model::deepseek_v41::image_processor_config(c, o.model);
  // A synthetic picture: gradients and a texture, so nothing is constant.
  vision::RgbImage img;
  img.width = o.image_w, img.height = o.image_h;
  img.rgb.resize(size_t(o.image_w) * size_t(o.image_h) * 3);
  for (int y = 0; y < o.image_h; ++y)
    for (int x = 0; x < o.image_w; ++x) {
      uint8_t* p = &img.rgb[(size_t(y) * size_t(o.image_w) + size_t(x)) * 3];
      p[0] = uint8_t(x * 255 / std::max(1, o.image_w - 1));
      p[1] = uint8_t(y * 255 / std::max(1, o.image_h - 1));
      p[2] = uint8_t((x * 7 + y * 13) % 256);
    }
  ThreadPool pool(o.threads);
  const auto t_pre = std::chrono::steady_clock::now();
  const vision::ImagePatches patches = vision::preprocess_image(img, ic);
  const double pre_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t_pre).count();
  const auto& pl = patches.plan;
  const double flops = 2 * m.vision()->macs(pl.grid_h, pl.grid_w);
  Report rep;
  rep.bench = "vision";
  rep.meta = make_meta(o.model, o.threads, roofline);
  rep.meta["image_size"] = {o.image_w, o.image_h};
  rep.meta["patch_grid"] = {pl.grid_h, pl.grid_w};
  rep.meta["tokens_per_image"] = pl.n_tokens;
  rep.meta["flops_per_image"] = flops;
  rep.meta["preprocess_s"] = pre_s;
  rep.columns = {{"run", "run", 0},           {"seconds", "encode s", 3},    {"gflop_per_s", "GFLOP/s", 1},
                 {"of_f32_peak", "of f32 peak", 3}, {"ms_per_token", "ms/token", 2}};
  std::vector<double> times;
  for (int r = 0; r <= o.repeats; ++r) {  // run 0 warms caches and page-ins, unreported
    const auto t0 = std::chrono::steady_clock::now();
    const std::vector<float> rows = m.vision()->encode(patches.values.data(), pl.grid_h, pl.grid_w, &pool);
    const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    GANNET_CHECK(int64_t(rows.size()) == pl.n_tokens * c.hidden_size);
    if (r == 0) continue;
    times.push_back(s);
    rep.rows.push_back({{"run", r},
                        {"seconds", s},
                        {"gflop_per_s", flops / s / 1e9},
                        {"of_f32_peak", roofline.f32_fma_gflop_per_s > 0 ? flops / s / 1e9 / roofline.f32_fma_gflop_per_s : 0.0},
                        {"ms_per_token", 1e3 * s / double(pl.n_tokens)}});
  }
  std::sort(times.begin(), times.end());
  const double med = times[times.size() / 2];
  rep.meta["median_s"] = med;
  rep.meta["median_gflop_per_s"] = flops / med / 1e9;
  return rep;
}

}  // namespace gannet::bench
