#pragma once
// The largest batch of each swept configuration on every card of the table, from the sweep's
// measured memory model: peak = static + per-sample x batch (results.jsonl `fit`), against the
// card's CUDA-visible memory minus the CUDA context and library workspaces measured in the sweep
// (the memory module's budget rule: usable = visible - overhead). Predicted, never run; where the
// sweep ran the card's own budget, the measured largest batch stands beside it.
#include <nlohmann/json_fwd.hpp>

#include <cstdint>
#include <filesystem>
#include <optional>
#include <string>
#include <vector>

#include "voxfit/memory/card_table.h"

namespace voxfit::cards {

/// One journal entry of a sweep that found a largest batch.
struct SweptPoint {
  std::string model, patch, precision, checkpoint;  ///< as in the journal
  std::string budget;                               ///< budget label: "rtx3090", "24.00 GiB"
  std::uint64_t visible_bytes = 0;
  std::uint64_t overhead_bytes = 0;  ///< measured CUDA context + workspaces
  double static_bytes = 0;
  double per_sample_bytes = 0;
  std::int64_t max_batch = 0;
  /// (batch, samples/s) measured at each batch the sweep timed, ascending.
  std::vector<std::pair<std::int64_t, double>> throughput;
  /// "model|patch|precision|checkpoint": the configuration without its budget.
  std::string config() const { return model + "|" + patch + "|" + precision + "|" + checkpoint; }
};

/// Reads SWEEP_DIR/results.jsonl. IoError naming the file when it is missing, a line other than
/// the last is not JSON (a truncated last line is a crash mid-append and is skipped, as the sweep
/// does), an entry lacks a field, or no entry has a fit. Skipped points are left out.
std::vector<SweptPoint> load_sweep_results(const std::filesystem::path& sweep_dir);

/// usable = visible - overhead, as memory::plan_budget computes it; 0 when the overhead does not
/// even fit (plan_budget's BudgetError case).
std::uint64_t usable_bytes(std::uint64_t visible_bytes, std::uint64_t overhead_bytes);

/// The largest batch with static + per_sample x batch <= usable (the sweep's MemoryFit rule).
std::int64_t fit_batch(double static_bytes, double per_sample_bytes, std::uint64_t usable);

struct CardFit {
  std::string config;  ///< SweptPoint::config()
  std::string model, patch, precision, checkpoint;
  std::string card;
  std::uint64_t visible_bytes = 0;
  std::uint64_t overhead_bytes = 0;
  std::uint64_t usable_bytes = 0;
  std::string fit_from;  ///< the budget whose fit and overhead were used
  double static_bytes = 0;
  double per_sample_bytes = 0;
  std::int64_t predicted_batch = 0;
  std::optional<std::int64_t> measured_batch;  ///< the sweep's own result for this card's budget
};

/// For every configuration (in journal order) and every card (in table order): the prediction
/// from the fit of the swept budget nearest the card's visible memory (the local slope holds best
/// near the card's size) and that sweep's measured overhead.
std::vector<CardFit> fit_cards(const std::vector<SweptPoint>& points, const memory::CardTable& table);

/// cards_fit.csv and cards_fit.md in `dir` (atomic writes).
void write_fit_tables(const std::vector<CardFit>& fits, const std::filesystem::path& dir);
/// The Markdown table (configurations x cards), also what `voxfit cards fit` prints.
std::string fit_markdown(const std::vector<CardFit>& fits);

}  // namespace voxfit::cards
