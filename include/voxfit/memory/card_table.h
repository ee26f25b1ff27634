#pragma once
// The GPU table (data/cards.csv): memory as CUDA reports it, bandwidth and peak rates, so that a
// budget can emulate a card and the cards module can predict one. Provenance: data/README.md.
#include <cstdint>
#include <filesystem>
#include <optional>
#include <string>
#include <vector>

namespace voxfit::memory {

/// Where a card's CUDA-visible memory comes from.
enum class VisibleSource {
  MeasuredPublicLog,  ///< a total_memory / cudaMemGetInfo value printed in a public log
  Estimated,          ///< derived from a sibling card; data/README.md says how
};

/// One row of data/cards.csv. Rates are datasheet peaks without sparsity.
struct CardSpec {
  std::string id;               ///< "rtx3090": what --card takes
  std::string name;             ///< the device name CUDA reports, e.g. "NVIDIA GeForce RTX 3090"
  double memory_gb = 0;         ///< marketing size (GB)
  double cuda_visible_mib = 0;  ///< total memory as cudaMemGetInfo / total_memory report it (MiB)
  double bandwidth_gbs = 0;
  int sms = 0;
  int boost_mhz = 0;
  /// Base clock (MHz): the clock the card holds at its power limit under a heavy load. Optional
  /// column `base_mhz`; 0 where unknown.
  int base_mhz = 0;
  double fp32_tflops = 0;
  std::optional<double> fp16_tensor_tflops;  ///< FP16 tensor cores with FP32 accumulate; none without tensor cores
  /// FP16 rate of the vector (non-tensor) units, dense. Optional column `fp16_vector_tflops`: a
  /// rate (Pascal GP102: 1/64 of FP32), `none` where FP16 arithmetic is emulated in FP32
  /// (fp16_emulated), empty where unknown.
  std::optional<double> fp16_vector_tflops;
  bool fp16_emulated = false;
  std::optional<double> tf32_tflops;  ///< none before Ampere
  std::optional<double> bf16_tflops;  ///< none where the card has no BF16
  double l2_mb = 0;
  int tdp_w = 0;
  /// Architecture generation, lower case ("pascal", "volta", "turing", "ampere", "ada",
  /// "hopper"). Optional column `architecture`; empty where unknown.
  std::string architecture;
  /// Memory technology ("GDDR6X", "HBM3"). Optional column `memory_type`; for people, not the model.
  std::string memory_type;
  VisibleSource visible_source = VisibleSource::Estimated;
  /// ECC is on and stored in-band, in the same DRAM and over the same bus as the data (GDDR6
  /// data-centre cards such as the A40, ECC on by default): the check bits take 1/16 of the capacity
  /// (visible in cuda_visible_mib) and of every transfer. Optional column `inband_ecc` (yes / no,
  /// empty = no); HBM cards keep their ECC side-band and say no.
  bool inband_ecc = false;

  /// CUDA-visible memory in bytes: where a budget emulating this card starts.
  std::uint64_t cuda_visible_bytes() const;
};

/// The cards of one table file, in file order.
class CardTable {
 public:
  CardTable(std::vector<CardSpec> cards, std::filesystem::path source);

  /// The card with this id; ConfigError listing the known ids otherwise.
  const CardSpec& at(const std::string& id) const;
  /// The card with this id, or nullptr.
  const CardSpec* find(const std::string& id) const;
  const std::vector<CardSpec>& cards() const { return cards_; }
  std::vector<std::string> ids() const;
  /// The file the table was read from (for messages and reports).
  const std::filesystem::path& source() const { return source_; }

 private:
  std::vector<CardSpec> cards_;
  std::filesystem::path source_;
};

/// Reads a card table CSV (header row, then one card a line; empty rate fields mean "none").
/// Read as core/csv.h reads CSV, spaces around fields dropped: a field may be quoted ("a, b"; ""
/// inside quotes is one quote), so notes may hold commas and line breaks.
/// Columns may come in any order; optional columns (inband_ecc, base_mhz, fp16_vector_tflops,
/// architecture, memory_type) may be left out, and columns the
/// reader does not know (a user's own notes, sources) are accepted and ignored. Throws IoError
/// naming the file, line and column for an unreadable file, a missing required column, a known
/// column given twice, a malformed value or a duplicate id.
CardTable load_card_table(const std::filesystem::path& path);

/// "measured-public-log" / "estimated", as in the CSV.
std::string to_string(VisibleSource source);

}  // namespace voxfit::memory
