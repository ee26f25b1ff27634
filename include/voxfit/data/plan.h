#pragma once
// The plan of a prepared cache (CACHE/plan.json): what the preprocessing did, so training reads
// the cache and prediction repeats the same steps on new images.
#include <array>
#include <cstdint>
#include <filesystem>
#include <optional>
#include <string>
#include <vector>

namespace voxfit::data {

namespace fs = std::filesystem;

/// How a channel's intensities are normalised (nnU-Net's schemes).
enum class Normalisation {
  CT,      ///< clip to the training set's foreground 0.5/99.5 percentiles, z-score with its mean/std
  ZScore,  ///< per case: z-score over the channel's non-zero voxels; zero voxels stay 0 (MRI)
};
std::string to_string(Normalisation n);
/// "ct" / "zscore"; "auto" is unset (each channel by its name). Throws ConfigError naming `what`.
std::optional<Normalisation> parse_normalisation(const std::string& text, const std::string& what = "--normalisation");

struct ChannelNormalisation {
  Normalisation scheme = Normalisation::ZScore;
  // CT only: statistics of foreground intensities over the whole training set.
  double lower = 0.0;  ///< 0.5th percentile
  double upper = 0.0;  ///< 99.5th percentile
  double mean = 0.0;
  double std = 1.0;
};

struct PlanCase {
  std::string id;
  std::array<std::int64_t, 3> shape{};  ///< preprocessed grid (D, H, W)
  std::vector<std::string> source_images;
  std::string source_label;
};

struct Split {
  std::vector<std::string> train;
  std::vector<std::string> validation;
};

/// A split the dataset declares (io::DeclaredSplits), kept in the plan so a run on the cache alone
/// still honours it.
struct DeclaredSplits {
  std::string source;  ///< "validation list" or "splits_final.json"
  std::string file;    ///< where it was read
  std::vector<Split> folds;
};

struct Plan {
  fs::path cache_dir;  ///< where plan.json was read from (not stored)
  std::string dataset_name;
  std::vector<std::string> channel_names;               ///< modality per channel ("CT", "T1")
  std::vector<ChannelNormalisation> normalisation;      ///< per channel
  std::array<double, 3> target_spacing{1.0, 1.0, 1.0};  ///< (x, y, z) mm of the preprocessed grid
  std::array<double, 3> median_spacing{1.0, 1.0, 1.0};  ///< the dataset's, (x, y, z)
  bool crop_to_nonzero = true;
  /// Class k's value in the dataset's label files; label_values[0] == 0 is background.
  std::vector<std::int64_t> label_values;
  std::vector<std::string> class_names;  ///< per class
  std::vector<PlanCase> cases;
  std::int64_t foreground_samples_per_class = 10000;
  std::string fingerprint;  ///< of the inputs and settings that produced the cache
  std::optional<DeclaredSplits> declared_splits;

  int channels() const { return static_cast<int>(channel_names.size()); }
  /// Classes including background (K: the network's output channels).
  int num_classes() const { return static_cast<int>(label_values.size()); }
  std::vector<std::string> case_ids() const;
  /// CACHE/cases/ID.h5
  fs::path case_file(const std::string& id) const;
  /// The class index of a dataset label value, or -1 if the plan does not know it.
  int class_of(std::int64_t label_value) const;
};

/// Reads CACHE/plan.json; throws IoError/ConfigError naming the file and the field.
Plan load_plan(const fs::path& cache_dir);
/// Writes CACHE/plan.json atomically.
void save_plan(const Plan& plan);

/// A deterministic split: the ids are shuffled with `seed`, then round(fraction * n) of them
/// (at least 1 when there are 2 or more cases, never all) go to validation. The same ids, fraction
/// and seed always give the same split, whatever the order of `ids`.
Split split_cases(std::vector<std::string> ids, double validation_fraction = 0.2, std::uint64_t seed = 12345);

/// Folds of voxfit's own cross-validation (as nnU-Net's 5-fold).
constexpr int kFolds = 5;
/// kFolds folds: the ids shuffled with `seed` as split_cases does, case i of the shuffle validated
/// in fold i % kFolds. Every case is validated in exactly one fold.
std::vector<Split> five_folds(std::vector<std::string> ids, std::uint64_t seed = 12345);

/// The split of a run, where it came from, and every fold of its source (written as splits.json).
struct RunSplit : Split {
  std::string source;        ///< "validation list", "splits_final.json", "5-fold" or "random"
  std::string file;          ///< the file of a declared split; empty for a drawn one
  std::optional<int> fold;   ///< the fold used; none for a random split
  std::vector<Split> folds;  ///< the source's folds; the one split for a random split
};

/// The loader pads cases smaller than the patch (nnU-Net and MONAI do too, e.g. 96^3 patches of thin
/// CT volumes), but a patch (D, H, W) more than twice every case along an axis would train mostly on
/// padding: ConfigError naming the axis and the largest case.
void check_patch_fits(const Plan& plan, const std::vector<std::int64_t>& patch);

/// The split a run with seed `seed` trains and validates on, by precedence:
///  1. the plan's declared split (a "validation" list, or splits_final.json's fold `fold`, 0 if none);
///  2. with `fold`: that fold of five_folds of the plan's cases with seed + 12345;
///  3. else split_cases of the plan's cases with `validation_fraction` and seed + 12345 (so it is
///     not drawn from the weights' stream).
/// `voxfit train`, its --batch max search and a sweep's probes all train on its `train` part.
/// Throws ConfigError for a fold outside 0..kFolds-1 or past the declared folds, or 5 folds of
/// fewer than 5 cases.
RunSplit run_split(const Plan& plan, double validation_fraction, std::uint64_t seed,
                   std::optional<int> fold = std::nullopt);

/// Writes folds as nnU-Net's splits_final.json format: [{"train": [ids], "val": [ids]}, ...].
void write_splits_json(const fs::path& file, const std::vector<Split>& folds);

}  // namespace voxfit::data
