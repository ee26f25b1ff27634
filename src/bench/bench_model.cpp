#include "voxfit/bench/benchmark.h"
#include "voxfit/core/error.h"

namespace voxfit::bench {

// Kept apart from run_benchmark so that code timing its own network does not link the registry.
models::Network make_bench_model(const BenchOptions& options) {
  const models::ModelEntry& entry = models::find_model(options.model);
  if (entry.task != models::TaskKind::kClassification2d)
    throw ConfigError("bench: model '" + options.model +
                      "' is not a 2D image classifier (the benchmark runs resnet50, "
                      "vit_base_patch16_224 and other classification networks)");
  models::ModelContext ctx = entry.defaults;
  ctx.in_channels = static_cast<int>(options.in_channels);
  ctx.num_classes = static_cast<int>(options.num_classes);
  ctx.patch = {options.image_size, options.image_size};
  ctx.attention = options.attention;
  ctx.channels_last = options.channels_last.value_or(false);
  models::Network net = models::make_model(options.model, ctx);
  // The networks convert their input to the layout they were built for on every forward, so the
  // automatic choice must be known at construction: it depends on the weights, hence a rebuild.
  if (!options.channels_last && uses_channels_last(options, *net)) {
    ctx.channels_last = true;
    net = models::make_model(options.model, ctx);
  }
  return net;
}

}  // namespace voxfit::bench
