// `voxfit cards fit`: the sweep's memory model rescaled to each card's CUDA-visible memory, against
// hand-computed batches, and its errors on missing or malformed results.
#include <gtest/gtest.h>

#include <algorithm>
#include <fstream>
#include <nlohmann/json.hpp>

#include "support/test_support.h"
#include "voxfit/cards/memory_fit.h"
#include "voxfit/core/error.h"

namespace voxfit::cards {
namespace {

namespace fs = std::filesystem;
using json = nlohmann::json;
constexpr std::uint64_t MiB = 1024ull * 1024ull;
constexpr std::uint64_t GiB = 1024ull * MiB;

void write(const fs::path& p, const std::string& text) { std::ofstream(p) << text; }

// Two cards: X (24000 MiB CUDA-visible) and Y (46000 MiB).
fs::path card_table(const fs::path& dir) {
  const fs::path p = dir / "cards.csv";
  write(p,
        "id,name,memory_gb,cuda_visible_mib,bandwidth_gbs,sms,boost_mhz,fp32_tflops,fp16_tensor_tflops,tf32_tflops,"
        "bf16_tflops,l2_mb,tdp_w,visible_source\n"
        "cardx,Card X,24,24000,900,80,1700,35,70,35,70,6,350,estimated\n"
        "cardy,Card Y,48,46000,700,84,1700,37,150,75,150,6,300,estimated\n");
  return p;
}

json entry(const std::string& budget, std::uint64_t visible, std::uint64_t overhead, double static_bytes,
           double per_sample, int max_batch) {
  return {{"model", "unetr"},
          {"patch", "96x96x96"},
          {"precision", "fp16"},
          {"checkpoint", "none"},
          {"budget", budget},
          {"budget_report",
           {{"visible_bytes", visible}, {"overhead_bytes", overhead}, {"usable_bytes", visible - overhead}}},
          {"fit", {{"static_bytes", static_bytes}, {"per_sample_bytes", per_sample}}},
          {"max_batch", max_batch},
          {"throughput",
           json::array({{{"batch", 2}, {"samples_per_s", 40.0}}, {{"batch", 16}, {"samples_per_s", 120.0}}})}};
}

class CardsFit : public test::TempDirTest {
 protected:
  void write_results(const std::vector<json>& entries, const std::string& tail = "") {
    std::string text;
    for (const auto& e : entries) text += e.dump() + "\n";
    write(dir() / "results.jsonl", text + tail);
  }
};

TEST(CardsFitRule, UsableIsVisibleMinusOverheadAndTheBatchIsTheFloor) {
  EXPECT_EQ(usable_bytes(24 * GiB, 700 * MiB), 24 * GiB - 700 * MiB);
  EXPECT_EQ(usable_bytes(500 * MiB, 700 * MiB), 0u);
  // (10 GiB - 1 GiB) / 1.5 GiB = 6
  EXPECT_EQ(fit_batch(1.0 * GiB, 1.5 * GiB, 10 * GiB), 6);
  EXPECT_EQ(fit_batch(1.0 * GiB, 1.5 * GiB, 2 * GiB + GiB / 2), 1);  // exactly one sample
  EXPECT_EQ(fit_batch(3.0 * GiB, 1.0 * GiB, 2 * GiB), 0);            // not even the static part
}

TEST_F(CardsFit, EachCardUsesTheNearestBudgetsFitAndOverhead) {
  write_results({entry("24.00 GiB", 24 * GiB, 500 * MiB, 1.0 * GiB, 1.0 * GiB, 22),
                 entry("48.00 GiB", 48 * GiB, 600 * MiB, 2.0 * GiB, 1.5 * GiB, 30)});
  const auto table = memory::load_card_table(card_table(dir()));
  const auto fits = fit_cards(load_sweep_results(dir()), table);
  ASSERT_EQ(fits.size(), 2u);
  // X: 24000 MiB - 500 MiB = 24641536000 B usable; (usable - 1 GiB) / 1 GiB = 21.9 -> 21
  EXPECT_EQ(fits[0].card, "cardx");
  EXPECT_EQ(fits[0].fit_from, "24.00 GiB");
  EXPECT_EQ(fits[0].usable_bytes, 24641536000u);
  EXPECT_EQ(fits[0].predicted_batch, 21);
  EXPECT_FALSE(fits[0].measured_batch.has_value());
  // Y: (46000 - 600 - 2048) MiB / 1536 MiB = 28.2 -> 28, from the 48 GiB sweep
  EXPECT_EQ(fits[1].card, "cardy");
  EXPECT_EQ(fits[1].fit_from, "48.00 GiB");
  EXPECT_EQ(fits[1].overhead_bytes, 600 * MiB);
  EXPECT_EQ(fits[1].predicted_batch, 28);
}

TEST_F(CardsFit, CardsOwnBudgetGivesTheMeasuredValueBesideThePrediction) {
  write_results({entry("24.00 GiB", 24 * GiB, 500 * MiB, 1.0 * GiB, 1.0 * GiB, 22),
                 entry("cardx", 24000 * MiB, 500 * MiB, 1.0 * GiB, 1.0 * GiB, 20)});
  const auto table = memory::load_card_table(card_table(dir()));
  const auto fits = fit_cards(load_sweep_results(dir()), table);
  ASSERT_EQ(fits.size(), 2u);
  EXPECT_EQ(fits[0].fit_from, "cardx");
  EXPECT_EQ(fits[0].predicted_batch, 21);
  ASSERT_TRUE(fits[0].measured_batch.has_value());
  EXPECT_EQ(*fits[0].measured_batch, 20);
  EXPECT_FALSE(fits[1].measured_batch.has_value());
  write_fit_tables(fits, dir() / "out");
  std::ifstream csv(dir() / "out" / "cards_fit.csv");
  std::string header, row;
  std::getline(csv, header);
  std::getline(csv, row);
  EXPECT_EQ(row, "unetr,96x96x96,fp16,none,cardx,24000,500,23500,cardx,1073741824,1073741824,21,20");
  EXPECT_NE(fit_markdown(fits).find("21 (predicted) / 20 measured"), std::string::npos) << fit_markdown(fits);
}

TEST_F(CardsFit, TruncatedLastLineIsSkippedLikeTheSweepDoes) {
  write_results({entry("24.00 GiB", 24 * GiB, 500 * MiB, 1.0 * GiB, 1.0 * GiB, 22)}, "{\"model\": \"unetr\", \"pa");
  EXPECT_EQ(load_sweep_results(dir()).size(), 1u);
}

TEST_F(CardsFit, BadResultsAreOneLineErrorsNamingTheFile) {
  const std::string file = (dir() / "results.jsonl").string();
  const auto expect_error = [&](const std::string& part) {
    try {
      load_sweep_results(dir());
      FAIL() << "expected IoError mentioning " << part;
    } catch (const IoError& e) {
      const std::string what = e.what();
      EXPECT_NE(what.find(file), std::string::npos) << what;
      EXPECT_NE(what.find(part), std::string::npos) << what;
      EXPECT_EQ(what.find('\n'), std::string::npos) << what;
    }
  };
  expect_error("missing or unreadable");
  write_results({}, "not json\n" + entry("24.00 GiB", 24 * GiB, 500 * MiB, GiB, GiB, 22).dump() + "\n");
  expect_error(":1: not a JSON object");
  json e = entry("24.00 GiB", 24 * GiB, 500 * MiB, GiB, GiB, 22);
  e.erase("fit");
  write_results({e});
  expect_error("fit.static_bytes");
  write_results({});
  expect_error("no configuration");
}

TEST_F(CardsFit, CliWritesTheTablesAndFailsWithOneLine) {
  write_results({entry("24.00 GiB", 24 * GiB, 500 * MiB, 1.0 * GiB, 1.0 * GiB, 22)});
  const auto cards = card_table(dir());
  auto r = test::run_voxfit("cards fit --results " + dir().string() + " --cards " + cards.string() + " --output " +
                            (dir() / "out").string());
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(r.out.find("| unetr | 96x96x96 | fp16 | none | 21 (predicted) |"), std::string::npos) << r.out;
  EXPECT_TRUE(fs::exists(dir() / "out" / "cards_fit.csv"));
  EXPECT_TRUE(fs::exists(dir() / "out" / "cards_fit.md"));
  r = test::run_voxfit("cards fit --results " + (dir() / "nowhere").string() + " --cards " + cards.string());
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_NE(r.err.find((dir() / "nowhere" / "results.jsonl").string()), std::string::npos) << r.err;
  EXPECT_EQ(std::count(r.err.begin(), r.err.end(), '\n'), 1) << r.err;
}

}  // namespace
}  // namespace voxfit::cards
