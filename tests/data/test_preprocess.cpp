#include <gtest/gtest.h>
#include <torch/torch.h>

#include <fstream>
#include <thread>

#include <nlohmann/json.hpp>

#include "data/data_test_util.h"
#include "voxfit/core/error.h"
#include "voxfit/data/preprocess.h"
#include "voxfit/io/dataset.h"

namespace voxfit {
namespace {

namespace fs = std::filesystem;

class Preprocess : public test::TempDirTest {};

std::vector<std::int64_t> unique_values(const fs::path& label_file) {
  const auto u = std::get<0>(torch::_unique(io::read_volume(label_file).data.to(torch::kInt64).flatten()));
  return {u.data_ptr<std::int64_t>(), u.data_ptr<std::int64_t>() + u.numel()};
}

TEST_F(Preprocess, CtMsdDatasetPreparesIntoPlanAndCaseFiles) {
  const io::Dataset ds = io::load_dataset(test::ct_msd_dataset(dir() / "ct"));
  const auto r = data::prepare_dataset(ds, dir() / "cache");
  EXPECT_FALSE(r.up_to_date);
  EXPECT_EQ(r.cases_written, 2u);
  const data::Plan plan = data::load_plan(dir() / "cache");
  EXPECT_EQ(plan.case_ids(), (std::vector<std::string>{"ct_sm", "ct_dicom"}));
  EXPECT_EQ(plan.channels(), 1);
  ASSERT_EQ(plan.normalisation.size(), 1u);
  const auto& n = plan.normalisation[0];
  EXPECT_EQ(n.scheme, data::Normalisation::CT);
  EXPECT_LT(n.lower, n.mean);
  EXPECT_LT(n.mean, n.upper);
  EXPECT_GT(n.std, 1.0);
  // Median of 3 mm and the DICOM series' 0.98/2 mm, per axis.
  EXPECT_NEAR(plan.target_spacing[2], 2.5, 0.01);
  EXPECT_NEAR(plan.target_spacing[0], (3.0 + 0.977) / 2, 0.01);
  // Every label value of both files becomes a class, in increasing order, background first.
  std::set<std::int64_t> values;
  for (const char* f : {"example_seg.nii.gz", "example_seg_dicom.nii.gz"})
    for (auto v : unique_values(test::totalseg_dir() / f)) values.insert(v);
  EXPECT_EQ(plan.label_values, std::vector<std::int64_t>(values.begin(), values.end()));
  EXPECT_GT(plan.num_classes(), 10);
  EXPECT_EQ(plan.class_of(plan.label_values.back()), plan.num_classes() - 1);
  EXPECT_EQ(plan.class_of(100000), -1);
  for (const auto& c : plan.cases) {
    const data::PreprocessedCase pc = data::read_case(plan, c.id);
    EXPECT_EQ(pc.image.sizes(), (std::vector<std::int64_t>{1, c.shape[0], c.shape[1], c.shape[2]}));
    EXPECT_EQ(pc.label.sizes(), (std::vector<std::int64_t>{c.shape[0], c.shape[1], c.shape[2]}));
    EXPECT_TRUE(torch::isfinite(pc.image).all().item<bool>());
    EXPECT_GE(pc.label.min().item<std::int64_t>(), 0);
    EXPECT_LT(pc.label.max().item<std::int64_t>(), plan.num_classes());
    EXPECT_GT((pc.label > 0).sum().item<std::int64_t>(), 1000) << c.id;
    for (int a = 0; a < 3; ++a) EXPECT_NEAR(pc.geometry.spacing[a], plan.target_spacing[a], 1e-9);
    // CT normalisation: foreground intensities end up near zero mean, unit scale.
    const double fg_mean = pc.image[0].masked_select(pc.label > 0).mean().item<double>();
    EXPECT_LT(std::abs(fg_mean), 1.5) << c.id;
  }
  // The 3 mm crop resampled to ~2 mm in x/y grows by about 3/2.
  EXPECT_NEAR(static_cast<double>(plan.cases[0].shape[2]), 122 * 3.0 / plan.target_spacing[0], 1.0);
}

// nnU-Net's stages, each alone: the fingerprint surveys, the plan decides, and prepare_dataset
// leaves the fingerprint on disk beside plan.json.
TEST_F(Preprocess, StagesRunAloneAndTheFingerprintIsWritten) {
  const io::Dataset ds = io::load_dataset(test::ct_msd_dataset(dir() / "ct"));
  const data::DatasetFingerprint f = data::fingerprint_dataset(ds, {});
  EXPECT_EQ(f.case_ids, (std::vector<std::string>{"ct_sm", "ct_dicom"}));
  ASSERT_EQ(f.spacings.size(), 2u);
  EXPECT_NEAR(f.spacings[0][2], 3.0, 1e-6);  // example_ct_sm: 3 mm
  EXPECT_EQ(f.channels, 1u);
  ASSERT_TRUE(f.ct.at(0).has_value());  // the channel is named CT: its statistics are surveyed
  EXPECT_LT(f.ct[0]->lower, f.ct[0]->upper);
  EXPECT_TRUE(f.label_values.count(0));

  data::PrepareOptions o;
  o.spacing = std::array<double, 3>{2.0, 2.0, 4.0};
  o.normalisation = data::Normalisation::ZScore;  // every channel, the CT one too
  const data::Plan plan = data::plan_dataset(ds, f, o, dir() / "unused");
  EXPECT_EQ(plan.target_spacing, (std::array<double, 3>{2.0, 2.0, 4.0}));
  EXPECT_NEAR(plan.median_spacing[2], 2.5, 0.01);
  EXPECT_EQ(plan.normalisation.at(0).scheme, data::Normalisation::ZScore);
  EXPECT_EQ(plan.label_values.front(), 0);
  EXPECT_TRUE(plan.cases.empty());  // stage 3 fills them

  const auto r = data::prepare_dataset(ds, dir() / "cache");
  ASSERT_TRUE(fs::exists(dir() / "cache" / "fingerprint.json"));
  const auto written = nlohmann::json::parse(std::ifstream(dir() / "cache" / "fingerprint.json"));
  EXPECT_EQ(written.at("cases").size(), 2u);
  EXPECT_EQ(written.at("cases")[1].at("id"), "ct_dicom");
  EXPECT_DOUBLE_EQ(written.at("foreground_intensity_ct")[0].at("percentile_00_5").get<double>(),
                   r.plan.normalisation[0].lower);
  EXPECT_FALSE(data::parse_normalisation("auto").has_value());
  EXPECT_THROW(data::parse_normalisation("minmax"), ConfigError);
}

TEST_F(Preprocess, RerunReusesTheCacheAndAChangedInputInvalidatesIt) {
  const fs::path root = test::mri_nnunet_dataset(dir() / "mri", 2);
  io::Dataset ds = io::load_dataset(root);
  auto r = data::prepare_dataset(ds, dir() / "cache");
  ASSERT_EQ(r.cases_written, 3u);
  const auto before = fs::last_write_time(dir() / "cache" / "cases" / "demo_000.h5");
  r = data::prepare_dataset(ds, dir() / "cache");
  EXPECT_TRUE(r.up_to_date);
  EXPECT_EQ(r.cases_written, 0u);
  EXPECT_EQ(fs::last_write_time(dir() / "cache" / "cases" / "demo_000.h5"), before);

  // Rewrite one case's image with other intensities: only that case is rebuilt (z-score is per case).
  std::this_thread::sleep_for(std::chrono::milliseconds(20));
  const fs::path changed = root / "imagesTr" / "demo_002_0000.nii.gz";
  Volume v = io::read_volume(changed);
  v.data = (v.data.to(torch::kFloat32) * 1.5).round().to(v.data.scalar_type());
  io::write_volume(changed, v);
  r = data::prepare_dataset(io::load_dataset(root), dir() / "cache");
  EXPECT_FALSE(r.up_to_date);
  EXPECT_EQ(r.cases_written, 1u);
  EXPECT_EQ(r.cases_reused, 2u);

  // Other settings invalidate every case; --force rebuilds even when nothing changed.
  data::PrepareOptions o;
  o.spacing = std::array<double, 3>{2.0, 2.0, 2.0};
  r = data::prepare_dataset(ds, dir() / "cache", o);
  EXPECT_EQ(r.cases_written, 3u);
  o.force = true;
  r = data::prepare_dataset(ds, dir() / "cache", o);
  EXPECT_EQ(r.cases_written, 3u);
  // A case dropped from the dataset disappears from the cache.
  fs::remove(root / "imagesTr" / "demo_002_0000.nii.gz");
  fs::remove(root / "labelsTr" / "demo_002.nii.gz");
  r = data::prepare_dataset(io::load_dataset(root), dir() / "cache", o);
  EXPECT_EQ(r.plan.cases.size(), 2u);
  EXPECT_FALSE(fs::exists(dir() / "cache" / "cases" / "demo_002.h5"));
}

TEST_F(Preprocess, MriNnUNetDatasetIsZScoredPerCaseOverNonZeroVoxels) {
  const io::Dataset ds = io::load_dataset(test::mri_nnunet_dataset(dir() / "mri", 1));
  // The median spacing is the cases' own: no resampling, so the z-score is exact.
  const auto r = data::prepare_dataset(ds, dir() / "cache");
  const data::Plan& plan = r.plan;
  EXPECT_EQ(plan.normalisation[0].scheme, data::Normalisation::ZScore);
  EXPECT_EQ(plan.channel_names, std::vector<std::string>{"T1"});
  EXPECT_EQ(plan.label_values, unique_values(test::demo_mri_dir() / "KmeansTest_T1KmeansPrelimSegmentation.nii.gz"));
  EXPECT_EQ(plan.class_names[0], "background");
  for (const auto& id : plan.case_ids()) {
    const auto c = data::read_case(plan, id);
    const torch::Tensor nz = c.image[0].masked_select(c.image[0] != 0);
    EXPECT_NEAR(nz.mean().item<double>(), 0.0, 1e-3) << id;
    EXPECT_NEAR(nz.std().item<double>(), 1.0, 1e-3) << id;
    // Cropped to the non-zero (skull-stripped) region, whose first voxel along each axis keeps
    // its place through resampling: the first slab of every axis holds brain.
    for (int axis = 0; axis < 3; ++axis)
      EXPECT_TRUE((c.image[0].select(axis, 0) != 0).any().item<bool>()) << id << " axis " << axis;
  }
  const auto original = io::read_volume(test::demo_mri_dir() / "KmeansTest_T1RawSkullStrip.nii.gz");
  const auto shape = plan.cases[0].shape;
  EXPECT_LT(shape[0] * shape[1] * shape[2], original.data.numel());
}

TEST_F(Preprocess, PredictionMapsBackOntoTheOriginalGridAndLabelValues) {
  const io::Dataset ds = io::load_dataset(test::ct_msd_dataset(dir() / "ct"));
  const auto r = data::prepare_dataset(ds, dir() / "cache");
  const Volume ct = io::read_volume(test::totalseg_dir() / "example_ct_sm.nii.gz");
  const Volume seg = io::read_volume(test::totalseg_dir() / "example_seg.nii.gz");
  const data::InferenceInput in = data::preprocess_for_inference(r.plan, {ct});
  const data::PreprocessedCase cached = data::read_case(r.plan, "ct_sm");
  // The same steps as prepare: identical network input.
  ASSERT_EQ(in.image.sizes(), cached.image.sizes());
  EXPECT_TRUE(torch::allclose(in.image, cached.image, 1e-4, 1e-4));
  // A perfect prediction (the cached label) comes back as the original label map.
  const Volume back = data::restore_prediction(r.plan, in, cached.label);
  EXPECT_EQ(grid_difference(back, seg), "");
  EXPECT_EQ(back.pixel_type, PixelType::UInt8);
  const double agreement = (back.data.to(torch::kInt64) == seg.data.to(torch::kInt64)).to(torch::kFloat64).mean().item<double>();
  EXPECT_GT(agreement, 0.97);
  io::write_volume(dir() / "pred.nii.gz", back);
  EXPECT_EQ(grid_difference(io::read_volume(dir() / "pred.nii.gz"), seg), "");
  EXPECT_THROW(data::restore_prediction(r.plan, in, cached.label.slice(0, 1)), DataError);
  EXPECT_THROW(data::preprocess_for_inference(r.plan, {ct, ct}), DataError);
}

TEST_F(Preprocess, BadDatasetIsRefusedWithItsProblem) {
  const fs::path root = test::mri_nnunet_dataset(dir() / "mri", 1);
  Volume l = io::read_volume(root / "labelsTr" / "demo_001.nii.gz");
  l.geometry.spacing[0] *= 2;
  io::write_volume(root / "labelsTr" / "demo_001.nii.gz", l);
  try {
    data::prepare_dataset(io::load_dataset(root), dir() / "cache");
    ADD_FAILURE() << "a label on another grid must stop prepare";
  } catch (const DataError& e) {
    EXPECT_NE(std::string(e.what()).find("demo_001.nii.gz"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("voxfit data check"), std::string::npos) << e.what();
  }
  EXPECT_FALSE(fs::exists(dir() / "cache" / "plan.json"));
}

TEST_F(Preprocess, SplitIsDeterministicDisjointAndComplete) {
  std::vector<std::string> ids;
  for (int i = 0; i < 10; ++i) ids.push_back("case_" + std::to_string(i));
  const auto a = data::split_cases(ids, 0.2, 7);
  std::vector<std::string> reversed(ids.rbegin(), ids.rend());
  const auto b = data::split_cases(reversed, 0.2, 7);
  EXPECT_EQ(a.train, b.train);
  EXPECT_EQ(a.validation, b.validation);
  EXPECT_EQ(a.validation.size(), 2u);
  EXPECT_EQ(a.train.size(), 8u);
  std::set<std::string> all(a.train.begin(), a.train.end());
  for (const auto& v : a.validation) EXPECT_TRUE(all.insert(v).second) << v;
  EXPECT_EQ(all.size(), 10u);
  EXPECT_NE(data::split_cases(ids, 0.2, 8).validation, a.validation);
  EXPECT_EQ(data::split_cases({"a", "b"}, 0.2).validation.size(), 1u);
  EXPECT_EQ(data::split_cases({"a"}, 0.2).train.size(), 1u);
  EXPECT_THROW(data::split_cases(ids, 1.0), ConfigError);
}

}  // namespace
}  // namespace voxfit
