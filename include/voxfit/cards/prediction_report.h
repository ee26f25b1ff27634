#pragma once
// `voxfit cards predict`'s results: predicted samples/s of each profile on every card, the check
// against the published reference numbers, samples/s at each card's largest batch (with a sweep),
// as predictions.csv, predictions.md and (where gnuplot exists) predictions.png.
#include <filesystem>
#include <string>
#include <vector>

#include "voxfit/bench/reference_table.h"
#include "voxfit/cards/memory_fit.h"
#include "voxfit/cards/roofline.h"

namespace voxfit::cards {

struct ProfilePredictions {
  KernelProfile profile;
  std::string source_card;            ///< the profiled card's id
  std::vector<CardPrediction> cards;  ///< table order
};

/// Every card of `table` for every profile.
std::vector<ProfilePredictions> predict_all(const std::vector<KernelProfile>& profiles, const memory::CardTable& table,
                                            const RooflineConstants& constants);

/// A prediction beside a published number (inference profiles of the reference models only).
struct ReferenceCheck {
  bench::ReferenceRow reference;
  double predicted = 0;
  double error = 0;  ///< predicted / published - 1
};
std::vector<ReferenceCheck> check_reference(const std::vector<ProfilePredictions>& predictions,
                                            const std::vector<bench::ReferenceRow>& reference);

/// A card's largest batch for a swept configuration and the samples/s predicted there: the sweep's
/// measured samples/s at that batch on the profiled GPU (interpolated; flat beyond the largest batch
/// timed) times the card's predicted speed relative to the profiled GPU, from the training profile of
/// the same model, patch and precision. samples_per_s is 0 when no profile matches.
struct FitThroughput {
  CardFit fit;
  double samples_per_s = 0;
};
std::vector<FitThroughput> fit_throughput(const std::vector<CardFit>& fits, const std::vector<SweptPoint>& points,
                                          const std::vector<ProfilePredictions>& predictions);

/// Writes the files and returns the Markdown that `voxfit cards predict` prints. Plots only where
/// `plot` is set and gnuplot is on the PATH.
std::string write_prediction_report(const std::vector<ProfilePredictions>& predictions,
                                    const std::vector<ReferenceCheck>& checks,
                                    const std::vector<FitThroughput>& fit_throughputs,
                                    const RooflineConstants& constants, const std::filesystem::path& dir, bool plot);

}  // namespace voxfit::cards
