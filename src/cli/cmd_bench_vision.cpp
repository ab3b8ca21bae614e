// `pagoda bench-vision`: how long a vision projector takes to encode one image (median of
// repeats), with the work it does: the ViT's matrices (2 x params x patches) and its
// attention (4 x patches² x width per layer), and the rate that makes.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <random>

#include <nlohmann/json.hpp>

#include "cli/commands.h"
#include "common/error.h"
#include "common/thread_pool.h"
#include "gguf/gguf.h"
#include "kernels/cpu_features.h"
#include "vision/vision_encoder.h"

namespace pagoda::cli {

Runner add_bench_vision(CLI::App& app) {
  struct Opts {
    std::string mmproj;
    int threads = 0, repeats = 3;
    bool json = false;
    std::string image;  // WxH: the picture's size before the projector fits it
  };
  auto o = std::make_shared<Opts>();
  app.add_option("--mmproj", o->mmproj, "Vision projector GGUF (llama.cpp's mmproj file)")->required();
  app.add_option("-t,--threads", o->threads, "Worker threads (default: all cores)");
  app.add_option("-r,--repeats", o->repeats, "Images encoded (median reported)")->capture_default_str()
      ->check(CLI::Range(1, 1000));
  app.add_flag("--json", o->json, "Print one JSON object");
  app.add_option("--image", o->image,
                 "The image's size WxH before the projector fits it (default: the file's image_size square); "
                 "gemma3 always encodes image_size, gemma4v / qwen3vl_merger keep the aspect within their limits");
  return [o] {
    auto enc = VisionEncoder::load(std::make_shared<const gguf::GgufFile>(gguf::GgufFile::open(o->mmproj)));
    const VisionConfig& c = enc->config();
    const int threads = o->threads > 0 ? o->threads : ThreadPool::default_num_threads();
    ThreadPool pool(threads);
    int64_t iw = c.image_size, ih = c.image_size;
    if (!o->image.empty()) {
      long long a = 0, b = 0;
      char x = 0, rest = 0;
      if (std::sscanf(o->image.c_str(), "%lld%c%lld%c", &a, &x, &b, &rest) != 3 || x != 'x' || a <= 0 || b <= 0 ||
          a > 16384 || b > 16384)
        throw Error("bench-vision: --image takes WxH, each side 1 to 16384 (got '" + o->image + "')");
      iw = a, ih = b;
    }
    const auto [w, h] = enc->input_size(iw, ih);
    std::vector<float> pixels(static_cast<size_t>(3 * w * h));
    std::mt19937 rng(1);
    std::uniform_real_distribution<float> u(-1.0f, 1.0f);
    for (float& x : pixels) x = u(rng);
    std::vector<float> out;
    std::vector<double> ms;
    for (int r = 0; r < o->repeats; ++r) {
      const auto t0 = std::chrono::steady_clock::now();
      enc->encode(pixels.data(), w, h, pool, out);
      ms.push_back(std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count());
    }
    std::sort(ms.begin(), ms.end());
    const double median = ms[ms.size() / 2];
    const int64_t patches = (w / c.patch_size) * (h / c.patch_size), tokens = enc->tokens_for(w, h);
    const double T = static_cast<double>(patches), D = static_cast<double>(c.dim);
    // The ViT's matrices and patch embedding; the projector's last map is left out (small).
    const double matrix_flops = 2.0 * T * c.n_layers * (4.0 * D * D + 2.0 * D * c.ffn_dim) + 2.0 * T * D * 3 * c.patch_size * c.patch_size;
    const double attn_flops = 4.0 * T * T * D * c.n_layers;
    const double gflops = (matrix_flops + attn_flops) / (median / 1000.0) / 1e9;
    if (o->json) {
      nlohmann::json j{{"mmproj", o->mmproj},     {"projector", c.projector_name}, {"width", w}, {"height", h},
                       {"patches", patches}, {"tokens", tokens}, {"threads", threads},
                       {"ms_per_image", median},   {"ms_min", ms.front()},         {"ms_max", ms.back()},
                       {"gflop", (matrix_flops + attn_flops) / 1e9}, {"gflops", gflops},
                       {"cpu", cpu_features_string()}};
      std::printf("%s\n", j.dump().c_str());
      return 0;
    }
    std::printf("%s: %s projector, %lldx%lld px, %lld patches -> %lld tokens, %d threads (%s)\n", o->mmproj.c_str(),
                c.projector_name.c_str(), static_cast<long long>(w), static_cast<long long>(h),
                static_cast<long long>(patches), static_cast<long long>(tokens), threads, cpu_features_string().c_str());
    std::printf("encode: %.1f ms an image (median of %d; min %.1f, max %.1f), %.0f GFLOP: %.1f GFLOP/s "
                "(matrices %.0f, attention %.0f GFLOP)\n",
                median, o->repeats, ms.front(), ms.back(), (matrix_flops + attn_flops) / 1e9, gflops,
                matrix_flops / 1e9, attn_flops / 1e9);
    return 0;
  };
}

}  // namespace pagoda::cli
