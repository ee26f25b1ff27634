// Broken input files, each put into an otherwise valid one-case dataset and given to the commands
// that read datasets: `data check` must list the problem naming the file (exit 1), `data prepare`
// must refuse with one line naming the file (exit 1) and leave no cache file behind. Image files
// also go to `predict`, which must refuse them the same way and write no label map.
#include <gtest/gtest.h>

#include <functional>

#include "reliability/reliability_util.h"
#include "voxfit/io/h5_file.h"

namespace voxfit {
namespace {

namespace fs = std::filesystem;
using test::clean_failure;
using test::run_voxfit;

/// Writes a broken file into the dataset at `root` (rewriting dataset.json if needed) and returns
/// the path every message about it must name.
using Breaker = std::function<fs::path(const fs::path& root)>;

struct BadInput {
  const char* name;
  Breaker make;
  const char* message;  ///< what the messages must say besides the path
  bool image = true;    ///< an image (also fed to predict) rather than a label
};
void PrintTo(const BadInput& c, std::ostream* os) { *os << c.name; }

fs::path image_of(const fs::path& root) { return root / "imagesTr" / "c0.nii.gz"; }
fs::path label_of(const fs::path& root) { return root / "labelsTr" / "c0.nii.gz"; }

// A plain .nii of `v`, patched by `edit`, written (gzipped when the name ends in .gz) over `target`.
fs::path patched_nii(const fs::path& target, const Volume& v, const std::function<void(std::string&)>& edit) {
  std::string bytes = test::nii_bytes(v, target.parent_path() / "scratch.nii");
  edit(bytes);
  if (io::volume_extension(target) == ".nii.gz")
    test::gzip_to(target, bytes);
  else
    test::write_text(target, bytes);
  return target;
}

fs::path with_spacing(const fs::path& root, float sx) {
  return patched_nii(image_of(root), test::small_ct(),
                     [&](std::string& b) { test::poke<float>(b, test::kNiiPixdim + 4, sx); });
}

// Rewrites dataset.json so case c0's image is `image` (relative to root).
void point_image_at(const fs::path& root, const std::string& image) {
  test::write_msd_manifest(root, {{image, "./labelsTr/c0.nii.gz"}}, {{"0", "background"}, {"1", "a"}, {"2", "b"}});
}

// The real 20-slice CT series, copied slice by slice into `dir` (all but `skip`, if given).
void copy_dicom(const fs::path& dir, std::optional<std::size_t> skip = std::nullopt) {
  const auto series = io::list_dicom_series(test::totalseg_dir() / "example_ct_dicom");
  fs::create_directories(dir);
  for (std::size_t i = 0; i < series.at(0).files.size(); ++i)
    if (!skip || *skip != i) fs::copy_file(series[0].files[i], dir / fs::path(series[0].files[i]).filename());
}

const std::vector<BadInput>& cases() {
  static const std::vector<BadInput> all = {
      {"ZeroLength",
       [](const fs::path& r) {
         test::write_text(image_of(r), "");
         return image_of(r);
       },
       ""},
      {"TruncatedGzip",
       [](const fs::path& r) {
         test::write_truncated_copy(image_of(r), r / "cut", 0.6);
         fs::rename(r / "cut", image_of(r));
         return image_of(r);
       },
       "truncated"},
      {"CorruptGzipStream",
       [](const fs::path& r) {
         // Same length and trailer, garbage in the middle of the deflate stream.
         std::string b = test::read_file(image_of(r));
         for (std::size_t i = b.size() / 3; i < b.size() / 3 + 64; ++i) b[i] = static_cast<char>(b[i] ^ 0x5a);
         test::write_text(image_of(r), b);
         return image_of(r);
       },
       ""},
      {"NotAnImage",
       [](const fs::path& r) {
         test::write_text(image_of(r), std::string(4096, 'x'));
         return image_of(r);
       },
       ""},
      {"LyingHeaderPlainNii",
       [](const fs::path& r) {
         const fs::path p = r / "imagesTr" / "c0.nii";
         point_image_at(r, "./imagesTr/c0.nii");
         return patched_nii(p, test::small_ct(),
                            [](std::string& b) { test::poke<std::int16_t>(b, test::kNiiDim + 6, 64); });
       },
       "lying header"},
      {"LyingHeaderGzip",
       [](const fs::path& r) {
         return patched_nii(image_of(r), test::small_ct(),
                            [](std::string& b) { test::poke<std::int16_t>(b, test::kNiiDim + 6, 64); });
       },
       "truncated"},
      {"HugeDimsPlainNii",
       [](const fs::path& r) {
         const fs::path p = r / "imagesTr" / "c0.nii";
         point_image_at(r, "./imagesTr/c0.nii");
         return patched_nii(p, test::small_ct(), [](std::string& b) {
           for (int a = 1; a <= 3; ++a) test::poke<std::int16_t>(b, test::kNiiDim + 2 * a, 32767);
         });
       },
       "lying header"},
      {"DatatypeUnknown",  // nifti1_io printed its own lines on stderr for this one
       [](const fs::path& r) {
         return patched_nii(image_of(r), test::small_ct(), [](std::string& b) { test::poke<std::int16_t>(b, 70, 0); });
       },
       "datatype"},
      {"NaNInAffine",  // ITK aborted the process on this one (fuzzing)
       [](const fs::path& r) {
         return patched_nii(image_of(r), test::small_ct(), [](std::string& b) {
           test::poke<std::int16_t>(b, 254, 1);
           test::poke<float>(b, 280, std::nanf(""));
         });
       },
       "srow_x[0]"},
      {"TwoDimensional",
       [](const fs::path& r) {
         return patched_nii(image_of(r), test::small_ct(PixelType::Int16, {24, 20, 1}),
                            [](std::string& b) { test::poke<std::int16_t>(b, test::kNiiDim, 2); });
       },
       "expected a 3D image"},
      {"FourDimensionalImage",
       [](const fs::path& r) {
         // Two stacked volumes: the manifest declares one channel (CT).
         const Volume two = test::small_ct(PixelType::Int16, {24, 20, 32});
         return patched_nii(image_of(r), two, [](std::string& b) {
           test::poke<std::int16_t>(b, test::kNiiDim, 4);
           test::poke<std::int16_t>(b, test::kNiiDim + 6, 16);
           test::poke<std::int16_t>(b, test::kNiiDim + 8, 2);
         });
       },
       "2 channels, expected 1"},
      {"FourDimensionalLabel",
       [](const fs::path& r) {
         Volume two = test::small_label({24, 20, 32});
         return patched_nii(label_of(r), two, [](std::string& b) {
           test::poke<std::int16_t>(b, test::kNiiDim, 4);
           test::poke<std::int16_t>(b, test::kNiiDim + 6, 16);
           test::poke<std::int16_t>(b, test::kNiiDim + 8, 2);
         });
       },
       "expected one 3D volume, found 2 channels", false},
      {"SpacingZero", [](const fs::path& r) { return with_spacing(r, 0.0f); }, "spacing"},
      {"SpacingNegative", [](const fs::path& r) { return with_spacing(r, -1.5f); }, "spacing"},
      {"SpacingNaN", [](const fs::path& r) { return with_spacing(r, std::nanf("")); }, "spacing"},
      {"NaNIntensities",
       [](const fs::path& r) {
         Volume v = test::small_ct(PixelType::Float32);
         v.data[5][5][5] = std::nanf("");
         io::write_volume(image_of(r), v);
         return image_of(r);
       },
       "NaN or Inf"},
      {"InfIntensities",
       [](const fs::path& r) {
         Volume v = test::small_ct(PixelType::Float32);
         v.data[6][6][6] = -INFINITY;
         v.data[7][7][7] = INFINITY;
         io::write_volume(image_of(r), v);
         return image_of(r);
       },
       "NaN or Inf"},
      {"UndeclaredLabelValue",
       [](const fs::path& r) {
         Volume l = test::small_label();
         l.data[8][8][8] = 7;
         io::write_volume(label_of(r), l);
         return label_of(r);
       },
       "label values 7 are not declared", false},
      {"FloatLabelValues",
       [](const fs::path& r) {
         Volume l = test::small_label();
         l.pixel_type = PixelType::Float32;
         l.data = l.data.to(torch::kFloat32);
         l.data[8][8][8] = 1.5f;
         io::write_volume(label_of(r), l);
         return label_of(r);
       },
       "non-integer values", false},
      {"LabelGridSize",
       [](const fs::path& r) {
         io::write_volume(label_of(r), test::small_label({24, 20, 15}));
         return label_of(r);
       },
       "label grid differs", false},
      {"LabelGridSpacing",
       [](const fs::path& r) {
         Volume l = test::small_label();
         l.geometry.spacing[2] = 3.0;
         io::write_volume(label_of(r), l);
         return label_of(r);
       },
       "label grid differs", false},
      {"LabelMissing",
       [](const fs::path& r) {
         fs::remove(label_of(r));
         return label_of(r);
       },
       "file not found", false},
      {"DicomMixedSeries",
       [](const fs::path& r) {
         copy_dicom(r / "imagesTr" / "dcm");
         Volume other = test::small_ct(PixelType::Int16, {512, 512, 2});
         io::write_dicom_series(r / "imagesTr" / "dcm", other, "1.2.826.0.1.3680043.2.1125.99");
         point_image_at(r, "./imagesTr/dcm");
         return r / "imagesTr" / "dcm";
       },
       "holds 2 DICOM series"},
      {"DicomMissingSlice",
       [](const fs::path& r) {
         copy_dicom(r / "imagesTr" / "dcm", 9);
         point_image_at(r, "./imagesTr/dcm");
         return r / "imagesTr" / "dcm";
       },
       "not evenly spaced"},
      {"DicomEmptyFolder",
       [](const fs::path& r) {
         fs::create_directories(r / "imagesTr" / "dcm");
         test::write_text(r / "imagesTr" / "dcm" / "notes.txt", "no slices here");
         point_image_at(r, "./imagesTr/dcm");
         return r / "imagesTr" / "dcm";
       },
       "no DICOM series"},
  };
  return all;
}

class BadInputTest : public test::TempDirTest, public ::testing::WithParamInterface<BadInput> {};

TEST_P(BadInputTest, DataCheckListsItAndPrepareRefusesWithOneLineAndNoCache) {
  const fs::path root = test::small_msd_dataset(dir() / "ds");
  const fs::path bad = GetParam().make(root);
  const std::string message = GetParam().message;

  auto r = run_voxfit("data check '" + root.string() + "'");
  EXPECT_EQ(r.exit_code, 1) << r.out << r.err;
  EXPECT_EQ(r.err, "");
  bool named = false;
  std::istringstream lines(r.out);
  for (std::string line; std::getline(lines, line);)
    named |= line.rfind(bad.string() + ": ", 0) == 0 && line.find(message) != std::string::npos;
  EXPECT_TRUE(named) << "no line '" << bad.string() << ": ..." << message << "...' in\n" << r.out;

  const fs::path cache = dir() / "cache";
  r = run_voxfit("data prepare '" + root.string() + "' -q -o '" + cache.string() + "'");
  EXPECT_TRUE(clean_failure(r, {bad.string(), message}, 1));
  EXPECT_FALSE(fs::exists(cache / "plan.json"));
  EXPECT_EQ(test::files_under(cache), std::vector<std::string>{});
}

std::string case_name(const ::testing::TestParamInfo<BadInput>& info) { return info.param.name; }

INSTANTIATE_TEST_SUITE_P(Files, BadInputTest, ::testing::ValuesIn(cases()), case_name);

// predict reads images outside any dataset: the same broken images, one line, no label map.
class BadPredictInput : public test::TempDirTest, public ::testing::WithParamInterface<BadInput> {};

fs::path trained_checkpoint();

TEST_P(BadPredictInput, PredictRefusesWithOneLineAndWritesNothing) {
  const fs::path root = test::small_msd_dataset(dir() / "ds");
  const fs::path bad = GetParam().make(root);
  const fs::path out = dir() / "pred";
  const auto r = run_voxfit("predict --device cpu --checkpoint '" + trained_checkpoint().string() + "' --input '" +
                            bad.string() + "' --output '" + out.string() + "'");
  // predict knows the plan's channel count, not a manifest's, and reads a folder without DICOM as a
  // folder of image files.
  static const std::map<std::string, std::string> kPredictSays{{"2 channels, expected 1", "takes 1 channel(s), got 2"},
                                                               {"no DICOM series", "holds no image files"}};
  const auto said = kPredictSays.find(GetParam().message);
  const std::string message = said != kPredictSays.end() ? said->second : GetParam().message;
  EXPECT_TRUE(clean_failure(r, {bad.string(), message}));
  EXPECT_EQ(test::files_under(out), std::vector<std::string>{});
}

std::vector<BadInput> image_cases() {
  std::vector<BadInput> out;
  for (const auto& c : cases())
    if (c.image) out.push_back(c);
  return out;
}

INSTANTIATE_TEST_SUITE_P(Files, BadPredictInput, ::testing::ValuesIn(image_cases()), case_name);

// One tiny training run; predict needs a checkpoint with its plan, not a good one.
fs::path trained_checkpoint() {
  static const fs::path ckpt =
      test::shared_fixture("run",
                           [](const fs::path& root) {
                             const auto r = run_voxfit(test::join_args(test::tiny_train_args(root / "run", 1)));
                             ASSERT_EQ(r.exit_code, 0) << r.out << r.err;
                           }) /
      "run" / "last.pt";
  return ckpt;
}

// HDF5 case folders: a case file without the datasets voxfit expects, or with the wrong rank.
struct BadH5 {
  const char* name;
  std::function<void(const fs::path& file)> make;
  const char* message;
};
void PrintTo(const BadH5& c, std::ostream* os) { *os << c.name; }

void write_h5(const fs::path& file, const std::vector<std::pair<std::string, torch::Tensor>>& datasets) {
  io::H5Writer w(file);
  for (const auto& [name, t] : datasets) w.write(name, t);
  w.commit();
}

class BadH5Test : public test::TempDirTest, public ::testing::WithParamInterface<BadH5> {};

TEST_P(BadH5Test, DataCheckAndPrepareNameTheFileAndDataset) {
  const fs::path root = dir() / "h5";
  fs::create_directories(root);
  const fs::path file = root / "case0.h5";
  GetParam().make(file);
  auto r = run_voxfit("data check '" + root.string() + "'");
  EXPECT_EQ(r.exit_code, 1) << r.out << r.err;
  EXPECT_NE(r.out.find(file.string()), std::string::npos) << r.out;
  EXPECT_NE(r.out.find(GetParam().message), std::string::npos) << r.out;
  const fs::path cache = dir() / "cache";
  r = run_voxfit("data prepare '" + root.string() + "' -q -o '" + cache.string() + "'");
  EXPECT_TRUE(clean_failure(r, {file.string(), GetParam().message}, 1));
  EXPECT_EQ(test::files_under(cache), std::vector<std::string>{});
}

const torch::Tensor kImage = torch::rand({16, 12, 10});
const torch::Tensor kLabel = (torch::rand({16, 12, 10}) > 0.5).to(torch::kUInt8);

INSTANTIATE_TEST_SUITE_P(
    Files, BadH5Test,
    ::testing::Values(BadH5{"NoLabelDataset",
                            [](const fs::path& f) {
                              write_h5(f, {{"image", kImage}});
                            },
                            "label: no such dataset"},
                      BadH5{"NoImageDataset",
                            [](const fs::path& f) {
                              write_h5(f, {{"label", kLabel}});
                            },
                            "image: no such dataset"},
                      BadH5{"ImageRankTwo",
                            [](const fs::path& f) {
                              write_h5(f, {{"image", kImage[0]}, {"label", kLabel}});
                            },
                            "expected a 3D [D, H, W] or 4D [C, D, H, W] dataset, found 2D"},
                      BadH5{"LabelRankFour",
                            [](const fs::path& f) {
                              write_h5(f, {{"image", kImage}, {"label", kLabel.unsqueeze(0).repeat({2, 1, 1, 1})}});
                            },
                            "expected one 3D volume, found 2 channels"},
                      BadH5{"LabelShapeDiffers",
                            [](const fs::path& f) {
                              write_h5(f, {{"image", kImage}, {"label", kLabel.slice(0, 0, 8)}});
                            },
                            "label grid differs"},
                      BadH5{"NotHdf5", [](const fs::path& f) { test::write_text(f, std::string(2048, '\x01')); },
                            "not a readable HDF5 file"},
                      BadH5{"TruncatedHdf5",
                            [](const fs::path& f) {
                              write_h5(f, {{"image", kImage}, {"label", kLabel}});
                              test::write_truncated_copy(f, f.string() + ".cut", 0.5);
                              fs::rename(f.string() + ".cut", f);
                            },
                            "case0.h5"}),
    [](const ::testing::TestParamInfo<BadH5>& i) { return std::string(i.param.name); });

}  // namespace
}  // namespace voxfit
