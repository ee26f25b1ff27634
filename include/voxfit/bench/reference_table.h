#pragma once
// Published reference throughputs (data/reference/autodl_seed.csv: card, model, precision,
// images_per_s) and how a run compares with them.
#include <filesystem>
#include <string>
#include <vector>

namespace voxfit::bench {

/// One published steady-state inference throughput.
struct ReferenceRow {
  std::string card;       ///< "rtx3090"
  std::string model;      ///< "resnet50"
  std::string precision;  ///< "float16"
  double images_per_s = 0.0;
};

/// Reads a reference CSV (core/csv.h) with the header `card,model,precision,images_per_s`. Throws
/// IoError naming the file and line when it cannot be read or a row is malformed.
std::vector<ReferenceRow> load_reference_table(const std::filesystem::path& csv);

/// A measured throughput divided by a published one.
struct Comparison {
  ReferenceRow reference;
  double ratio = 0.0;  ///< measured / reference images/s
};

/// The rows for `model` and `precision`, in file order, each with measured / published. The
/// references are inference numbers: a training run compares with nothing (empty result).
std::vector<Comparison> compare_with_reference(const std::vector<ReferenceRow>& table, const std::string& model,
                                               const std::string& precision, bool train, double measured_images_per_s);

}  // namespace voxfit::bench
