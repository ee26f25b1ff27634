#include <gtest/gtest.h>
#include <torch/torch.h>

#include "data/data_test_util.h"
#include "voxfit/core/error.h"
#include "voxfit/data/patch_loader.h"
#include "voxfit/data/preprocess.h"
#include "voxfit/data/spatial_augment.h"
#include "voxfit/io/dataset.h"

namespace voxfit {
namespace {

namespace fs = std::filesystem;

class PatchLoader : public test::TempDirTest {
 protected:
  fs::path ct_cache() {
    data::prepare_dataset(io::load_dataset(test::ct_msd_dataset(dir() / "ct")), dir() / "ct_cache");
    return dir() / "ct_cache";
  }
  fs::path mri_cache() {
    data::prepare_dataset(io::load_dataset(test::mri_nnunet_dataset(dir() / "mri", 1)), dir() / "mri_cache");
    return dir() / "mri_cache";
  }
};

data::LoaderOptions small(std::int64_t patch, std::int64_t batch, int threads) {
  data::LoaderOptions o;
  o.patch = {patch, patch, patch};
  o.batch_size = batch;
  o.threads = threads;
  o.seed = 42;
  return o;
}

TEST_F(PatchLoader, BatchesHaveTheTrainerShapesAndTypes) {
  const fs::path cache = ct_cache();
  const data::Plan plan = data::load_plan(cache);
  data::PatchLoader loader(cache, {}, small(24, 3, 2));
  for (int i = 0; i < 4; ++i) {
    const data::Batch b = loader.next();
    EXPECT_EQ(b.image.sizes(), (std::vector<std::int64_t>{3, 1, 24, 24, 24}));
    EXPECT_EQ(b.label.sizes(), (std::vector<std::int64_t>{3, 1, 24, 24, 24}));
    EXPECT_EQ(b.image.scalar_type(), torch::kFloat32);
    EXPECT_EQ(b.label.scalar_type(), torch::kInt64);
    EXPECT_TRUE(torch::isfinite(b.image).all().item<bool>());
    EXPECT_GE(b.label.min().item<std::int64_t>(), 0);
    EXPECT_LT(b.label.max().item<std::int64_t>(), plan.num_classes());
  }
  const data::LoaderStats s = loader.stats();
  EXPECT_EQ(s.batches, 4);
  EXPECT_GE(s.patches, 12);
  EXPECT_GE(s.wait_seconds, 0.0);
  EXPECT_GT(s.worker_seconds, 0.0);
}

TEST_F(PatchLoader, PatchesWithoutAugmentationAreCropsOfTheCase) {
  const fs::path cache = mri_cache();
  const data::Plan plan = data::load_plan(cache);
  auto o = small(16, 2, 1);
  o.augment.enabled = false;
  data::PatchLoader loader(data::CacheIndex::load(plan, {"demo_000"}), o);
  const data::PreprocessedCase c = data::read_case(plan, "demo_000");
  const torch::Tensor volume = c.image[0];
  for (int i = 0; i < 3; ++i) {
    const data::Batch b = loader.next();
    for (int s = 0; s < 2; ++s) {
      // Locate the patch through its brightest voxel (rare values make few candidates), then demand
      // that the whole crop there equals the patch, image and label.
      const torch::Tensor p = b.image[s][0];
      if (p.abs().max().item<float>() == 0.0f) continue;  // outside the brain: nothing to locate by
      const auto peak = p.abs().flatten().argmax().item<std::int64_t>();
      const std::int64_t pz = peak / 256, py = peak / 16 % 16, px = peak % 16;
      const torch::Tensor candidates = torch::nonzero(volume == p[pz][py][px].item<float>());
      bool found = false;
      for (std::int64_t k = 0; k < candidates.size(0) && !found; ++k) {
        const std::int64_t z = candidates[k][0].item<std::int64_t>() - pz, y = candidates[k][1].item<std::int64_t>() - py,
                           x = candidates[k][2].item<std::int64_t>() - px;
        if (z < 0 || y < 0 || x < 0 || z + 16 > volume.size(0) || y + 16 > volume.size(1) || x + 16 > volume.size(2))
          continue;
        found = torch::equal(p, volume.slice(0, z, z + 16).slice(1, y, y + 16).slice(2, x, x + 16)) &&
                torch::equal(b.label[s][0], c.label.slice(0, z, z + 16).slice(1, y, y + 16).slice(2, x, x + 16));
      }
      EXPECT_TRUE(found) << "batch " << i << " sample " << s << " is no crop of the case";
    }
  }
}

TEST_F(PatchLoader, ForegroundOversamplingHitsTheConfiguredRate) {
  const fs::path cache = ct_cache();
  const auto index = data::CacheIndex::load(data::load_plan(cache));
  const auto measure = [&](double fraction) {
    auto o = small(12, 8, 2);
    o.oversample_foreground = fraction;
    o.augment.enabled = false;
    data::PatchLoader loader(index, o);
    std::int64_t with_fg = 0, patches = 0;
    for (int i = 0; i < 100; ++i) {
      const data::Batch b = loader.next();
      with_fg += (b.label.flatten(1) > 0).any(1).sum().item<std::int64_t>();
      patches += b.label.size(0);
    }
    const data::LoaderStats s = loader.stats();
    const double forced = static_cast<double>(s.oversampled_patches) / static_cast<double>(s.patches);
    const double measured = static_cast<double>(with_fg) / static_cast<double>(patches);
    std::printf("oversample %.2f: %.3f of patches centred on foreground, %.3f contain foreground (%lld patches)\n",
                fraction, forced, measured, static_cast<long long>(patches));
    return std::pair<double, double>{forced, measured};
  };
  const auto [forced0, natural] = measure(0.0);
  EXPECT_EQ(forced0, 0.0);
  const auto [forced33, measured33] = measure(0.33);
  EXPECT_NEAR(forced33, 0.33, 0.06);
  // Forced patches always hold foreground; the others hold it at the natural rate.
  EXPECT_NEAR(measured33, 0.33 + 0.67 * natural, 0.08);
  const auto [forced1, measured1] = measure(1.0);
  EXPECT_EQ(forced1, 1.0);
  EXPECT_EQ(measured1, 1.0);
}

// --flip-probability: 1 mirrors every axis of every patch, 0 none; the crops themselves are the same
// (the flips are drawn after the crop, from the patch's own generator).
TEST_F(PatchLoader, FlipProbabilityOneMirrorsEveryAxisAndZeroNone) {
  const fs::path cache = ct_cache();
  const auto index = data::CacheIndex::load(data::load_plan(cache));
  const auto first_batch = [&](double flip) {
    auto o = small(12, 4, 1);
    o.augment.scale_probability = o.augment.shift_probability = 0;
    o.augment.gamma_probability = o.augment.noise_probability = 0;
    o.augment.flip_probability = flip;
    data::PatchLoader loader(index, o);
    return loader.next();
  };
  const data::Batch none = first_batch(0.0), all = first_batch(1.0);
  EXPECT_TRUE(torch::equal(all.image, none.image.flip({2, 3, 4})));
  EXPECT_TRUE(torch::equal(all.label, none.label.flip({2, 3, 4})));
  EXPECT_FALSE(torch::equal(all.image, none.image));
}

// --augment without intensity: the intensity group (scale, shift, gamma, noise) leaves the image as
// cropped even when each of its transforms is certain to be drawn; with it, the same crop changes.
TEST_F(PatchLoader, IntensityOffLeavesThePatchAsCropped) {
  const fs::path cache = ct_cache();
  const auto index = data::CacheIndex::load(data::load_plan(cache));
  const auto first_batch = [&](bool intensity, double probability) {
    auto o = small(12, 4, 1);
    o.augment.flip_probability = 0;
    o.augment.scale_probability = o.augment.shift_probability = probability;
    o.augment.gamma_probability = o.augment.noise_probability = probability;
    o.augment.intensity = intensity;
    data::PatchLoader loader(index, o);
    return loader.next();
  };
  const data::Batch plain = first_batch(true, 0.0), off = first_batch(false, 1.0), on = first_batch(true, 1.0);
  EXPECT_TRUE(torch::equal(off.image, plain.image));
  EXPECT_TRUE(torch::equal(on.label, plain.label));
  EXPECT_FALSE(torch::allclose(on.image, plain.image));
}

TEST_F(PatchLoader, SameSeedGivesTheSameBatchesForAnyThreadCount) {
  const fs::path cache = mri_cache();
  const auto index = data::CacheIndex::load(data::load_plan(cache));
  auto o = small(20, 2, 1);
  o.augment.noise_probability = 0.5;
  o.augment.gamma_probability = 0.5;
  std::vector<data::Batch> reference;
  {
    data::PatchLoader a(index, o);
    for (int i = 0; i < 6; ++i) reference.push_back(a.next());
  }
  for (int threads : {1, 3}) {
    o.threads = threads;
    data::PatchLoader b(index, o);
    for (int i = 0; i < 6; ++i) {
      const data::Batch x = b.next();
      EXPECT_TRUE(torch::equal(x.image, reference[i].image)) << threads << " threads, batch " << i;
      EXPECT_TRUE(torch::equal(x.label, reference[i].label)) << threads << " threads, batch " << i;
    }
  }
  o.seed = 43;
  data::PatchLoader c(index, o);
  EXPECT_FALSE(torch::equal(c.next().image, reference[0].image));
}

TEST_F(PatchLoader, ResumingAtABatchIndexContinuesTheSameStream) {
  const fs::path cache = mri_cache();
  const auto index = data::CacheIndex::load(data::load_plan(cache));
  auto o = small(16, 2, 2);
  std::vector<data::Batch> stream;
  {
    data::PatchLoader a(index, o);
    for (int i = 0; i < 5; ++i) stream.push_back(a.next());
  }
  o.first_batch = 3;
  data::PatchLoader resumed(index, o);
  for (int i = 3; i < 5; ++i) {
    const data::Batch b = resumed.next();
    EXPECT_TRUE(torch::equal(b.image, stream[i].image)) << i;
    EXPECT_TRUE(torch::equal(b.label, stream[i].label)) << i;
  }
}

TEST_F(PatchLoader, VolumesSmallerThanThePatchArePadded) {
  const fs::path cache = ct_cache();
  const data::Plan plan = data::load_plan(cache);
  const auto shape = plan.cases[0].shape;  // ct_sm: 36 slices at 2.5 mm
  auto o = small(16, 2, 2);
  o.patch = {shape[0] + 20, 32, 32};
  o.augment.enabled = false;
  data::PatchLoader loader(data::CacheIndex::load(plan, {"ct_sm"}), o);
  const data::Batch b = loader.next();
  EXPECT_EQ(b.image.size(2), shape[0] + 20);
  // Centred: 10 padded slices of zeros before and after the volume.
  EXPECT_EQ(b.image[0][0].slice(0, 0, 10).abs().max().item<float>(), 0.0f);
  EXPECT_EQ(b.label[0][0].slice(0, shape[0] + 10).abs().max().item<std::int64_t>(), 0);
  EXPECT_GT(b.image[0][0][10].abs().max().item<float>(), 0.0f);
}

TEST_F(PatchLoader, CheapToRebuildForAnotherBatchSize) {
  const fs::path cache = mri_cache();
  const auto index = data::CacheIndex::load(data::load_plan(cache));
  for (std::int64_t batch : {1, 2, 4, 8}) {
    data::PatchLoader loader(index, small(16, batch, 2));
    EXPECT_EQ(loader.next().image.size(0), batch);
  }
}

TEST_F(PatchLoader, WorkerErrorsReachTheConsumer) {
  const fs::path cache = mri_cache();
  const auto index = data::CacheIndex::load(data::load_plan(cache));
  for (const auto& c : index->cases()) test::write_text(c.file, "gone");
  data::PatchLoader loader(index, small(16, 2, 2));
  EXPECT_THROW(loader.next(), IoError);
  EXPECT_THROW(data::PatchLoader(cache, {"no_such_case"}, small(16, 2, 1)), DataError);
  EXPECT_THROW(data::PatchLoader(index, small(0, 2, 1)), ConfigError);
}

TEST_F(PatchLoader, SpatialAugmentationMovesImageAndLabelTogether) {
  // A bright cube labelled 1 inside a dark patch.
  data::Batch b;
  b.image = torch::zeros({2, 1, 24, 24, 24});
  b.label = torch::zeros({2, 1, 24, 24, 24}, torch::kInt64);
  b.image.slice(2, 6, 14).slice(3, 8, 16).slice(4, 5, 12).fill_(1.0f);
  b.label.slice(2, 6, 14).slice(3, 8, 16).slice(4, 5, 12).fill_(1);
  data::SpatialAugmentOptions o;
  o.probability = 1.0;
  data::Batch x{b.image.clone(), b.label.clone()};
  data::augment_spatial(x, o, 5);
  EXPECT_FALSE(torch::equal(x.label, b.label));
  const auto u = std::get<0>(torch::_unique(x.label.flatten()));
  EXPECT_LE(u.max().item<std::int64_t>(), 1);
  // Where the label moved, the image moved: labelled voxels are bright, the rest mostly dark.
  const torch::Tensor bright = x.image > 0.5;
  const double agree = (bright == (x.label > 0)).to(torch::kFloat64).mean().item<double>();
  EXPECT_GT(agree, 0.97);
  data::Batch y{b.image.clone(), b.label.clone()};
  data::augment_spatial(y, o, 5);
  EXPECT_TRUE(torch::equal(x.label, y.label));
  EXPECT_TRUE(torch::equal(x.image, y.image));
  // No rotation and unit scale is the identity.
  o.max_rotation_degrees = 0;
  o.scale_range = {1.0, 1.0};
  data::Batch z{b.image.clone(), b.label.clone()};
  data::augment_spatial(z, o, 5);
  EXPECT_TRUE(torch::equal(z.label, b.label));
  EXPECT_TRUE(torch::allclose(z.image, b.image, 1e-5, 1e-5));
}

}  // namespace
}  // namespace voxfit
