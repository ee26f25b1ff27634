#include <gtest/gtest.h>

#include <fstream>
#include <set>

#include "support/test_support.h"
#include "voxfit/core/error.h"
#include "voxfit/core/units.h"
#include "voxfit/memory/card_table.h"

namespace voxfit::memory {
namespace {

using test::TempDirTest;

const char* kHeader =
    "id,name,memory_gb,cuda_visible_mib,bandwidth_gbs,sms,boost_mhz,fp32_tflops,fp16_tensor_tflops,"
    "tf32_tflops,bf16_tflops,l2_mb,tdp_w,visible_source\n";

class CardTableTest : public TempDirTest {
 protected:
  std::filesystem::path write(const std::string& content) {
    const auto path = dir() / "cards.csv";
    std::ofstream(path) << content;
    return path;
  }
  // The message of the IoError that loading `content` throws.
  std::string load_error(const std::string& content) {
    try {
      load_card_table(write(content));
    } catch (const IoError& e) {
      return e.what();
    }
    ADD_FAILURE() << "no IoError for:\n" << content;
    return "";
  }
};

TEST_F(CardTableTest, ShippedTableHasEveryReferenceCard) {
  const CardTable table = load_card_table(test::source_dir() / "data" / "cards.csv");
  const std::set<std::string> expected = {
      "rtx3090",  "a40",       "a100_40gb",      "a100_80gb", "v100_16gb", "v100_32gb", "rtx2080ti",
      "titanxp",  "gtx1080ti", "rtx3060",        "rtx3080ti", "rtx_a4000", "rtx_a5000", "rtx4090",
      "h100_sxm", "h200_sxm",  "v100_pcie_16gb", "t4",        "l4",        "h100_pcie"};
  const auto ids = table.ids();
  EXPECT_EQ(std::set<std::string>(ids.begin(), ids.end()), expected);
  EXPECT_EQ(ids.size(), expected.size());

  // The two cards this project compares, with the README's CUDA-visible totals (A40: ECC on).
  EXPECT_EQ(table.at("rtx3090").cuda_visible_bytes(), 24268 * kMiB);
  EXPECT_EQ(table.at("a40").cuda_visible_bytes(), 45416 * kMiB);
  EXPECT_EQ(table.at("rtx3090").visible_source, VisibleSource::MeasuredPublicLog);
  EXPECT_DOUBLE_EQ(table.at("a40").fp16_tensor_tflops.value(), 149.7);
  EXPECT_DOUBLE_EQ(table.at("rtx3090").bandwidth_gbs, 936);
  EXPECT_FALSE(table.at("gtx1080ti").fp16_tensor_tflops.has_value());
  EXPECT_FALSE(table.at("v100_16gb").bf16_tflops.has_value());
  EXPECT_EQ(table.at("a100_80gb").visible_source, VisibleSource::Estimated);
  // Dense rates with FP32 accumulation (what PyTorch runs), never the sparsity figures: GeForce
  // GA102 runs FP16 x FP32-accumulate at half its FP16-accumulate rate (3090: 71, not 142), the
  // A40 does not (149.7; 299.4 is sparse), Hopper 989.4 (1979 is sparse).
  EXPECT_DOUBLE_EQ(table.at("rtx3090").fp16_tensor_tflops.value(), 71);
  EXPECT_DOUBLE_EQ(table.at("rtx3090").tf32_tflops.value(), 35.6);
  EXPECT_DOUBLE_EQ(table.at("a40").tf32_tflops.value(), 74.8);
  EXPECT_DOUBLE_EQ(table.at("h200_sxm").fp16_tensor_tflops.value(), 989.4);
  EXPECT_DOUBLE_EQ(table.at("h200_sxm").tf32_tflops.value(), 494.7);

  for (const CardSpec& c : table.cards()) {
    // CUDA sees a little less than the marketing size read as GiB, never more.
    EXPECT_LE(c.cuda_visible_mib, c.memory_gb * 1024) << c.id;
    EXPECT_GE(c.cuda_visible_mib, c.memory_gb * 1024 * 0.9) << c.id;
    EXPECT_GT(c.sms, 0) << c.id;
    EXPECT_GT(c.fp32_tflops, 0) << c.id;
  }
}

TEST_F(CardTableTest, UnknownIdIsAConfigErrorListingTheKnownIds) {
  const CardTable table = load_card_table(write(std::string(kHeader) +
                                                "one,Card One,24,24000,900,80,1700,30,60,30,60,6,300,estimated\n"
                                                "two,Card Two,48,45000,700,84,1700,37,150,75,150,6,300,estimated\n"));
  EXPECT_EQ(table.at("two").name, "Card Two");
  EXPECT_EQ(table.find("three"), nullptr);
  try {
    table.at("three");
    FAIL() << "no error";
  } catch (const ConfigError& e) {
    const std::string msg = e.what();
    EXPECT_NE(msg.find("'three'"), std::string::npos) << msg;
    EXPECT_NE(msg.find("one, two"), std::string::npos) << msg;
  }
}

TEST_F(CardTableTest, MissingFileNamesThePath) {
  try {
    load_card_table(dir() / "nope.csv");
    FAIL() << "no error";
  } catch (const IoError& e) {
    EXPECT_NE(std::string(e.what()).find("nope.csv"), std::string::npos) << e.what();
  }
}

TEST_F(CardTableTest, BadNumberNamesFileLineAndColumn) {
  const std::string msg = load_error(std::string(kHeader) +
                                     "one,Card One,24,24000,900,80,1700,30,60,30,60,6,300,estimated\n"
                                     "two,Card Two,48,lots,700,84,1700,37,150,75,150,6,300,estimated\n");
  EXPECT_NE(msg.find("cards.csv:3:4 (cuda_visible_mib)"), std::string::npos) << msg;
  EXPECT_NE(msg.find("'lots'"), std::string::npos) << msg;
}

TEST_F(CardTableTest, MalformedTablesAreRejectedWithTheirPlace) {
  const std::string row = "one,Card One,24,24000,900,80,1700,30,60,30,60,6,300,estimated\n";
  EXPECT_NE(load_error("").find("no cards"), std::string::npos);
  EXPECT_NE(load_error(std::string(kHeader)).find("no cards"), std::string::npos);
  EXPECT_NE(
      load_error("id,name,memory_gb\n" + row).find("cards.csv:1: header lacks the required columns cuda_visible_mib"),
      std::string::npos);
  EXPECT_NE(load_error(std::string(kHeader) + "one,Card One,24\n").find("cards.csv:2: 3 fields, the header has 14"),
            std::string::npos);
  EXPECT_NE(load_error(std::string(kHeader) + row + row).find("cards.csv:3:1 (id): card 'one' is listed twice"),
            std::string::npos);
  EXPECT_NE(load_error(std::string(kHeader) + "One,Card,24,24000,900,80,1700,30,60,30,60,6,300,estimated\n")
                .find("is not a card id"),
            std::string::npos);
  EXPECT_NE(load_error(std::string(kHeader) + "one,Card,24,24000,900,80,1700,30,60,30,60,6,300,guessed\n")
                .find("cards.csv:2:14 (visible_source)"),
            std::string::npos);
  EXPECT_NE(load_error(std::string(kHeader) + "one,Card,24,,900,80,1700,30,60,30,60,6,300,estimated\n")
                .find("cards.csv:2:4 (cuda_visible_mib): a value is required"),
            std::string::npos);
  EXPECT_NE(load_error(std::string(kHeader) + "one,Card,24,24000,900,80.5,1700,30,60,30,60,6,300,estimated\n")
                .find("cards.csv:2:6 (sms)"),
            std::string::npos);
}

TEST_F(CardTableTest, ColumnsMayComeInAnyOrderAndEmptyRatesMeanNone) {
  const CardTable table =
      load_card_table(write("visible_source,id,name,memory_gb,cuda_visible_mib,bandwidth_gbs,sms,boost_mhz,fp32_tflops,"
                            "fp16_tensor_tflops,tf32_tflops,bf16_tflops,l2_mb,tdp_w\r\n"
                            "measured-public-log,old,Old Card,11,11172,484,28,1582,11.3,,,,2.75,250\r\n"));
  const CardSpec& c = table.at("old");
  EXPECT_EQ(c.cuda_visible_bytes(), 11172 * kMiB);
  EXPECT_EQ(c.visible_source, VisibleSource::MeasuredPublicLog);
  EXPECT_FALSE(c.fp16_tensor_tflops || c.tf32_tflops || c.bf16_tflops);
  EXPECT_DOUBLE_EQ(c.l2_mb, 2.75);
}

TEST_F(CardTableTest, UnknownColumnsAreIgnoredAndMissingRequiredOnesNamed) {
  // A user's own columns, anywhere in the header, are read past; the known ones still parse.
  const CardTable table = load_card_table(
      write("price_eur,id,name,memory_gb,cuda_visible_mib,bandwidth_gbs,sms,boost_mhz,fp32_tflops,fp16_tensor_tflops,"
            "tf32_tflops,bf16_tflops,l2_mb,tdp_w,visible_source,my notes\n"
            "1499,mine,My Card,24,24000,900,80,1700,30,60,30,60,6,300,estimated,bought 2024; fan noisy\n"));
  const CardSpec& c = table.at("mine");
  EXPECT_EQ(c.name, "My Card");
  EXPECT_DOUBLE_EQ(c.bandwidth_gbs, 900);
  EXPECT_EQ(c.visible_source, VisibleSource::Estimated);
  EXPECT_FALSE(c.inband_ecc);  // optional column left out
  // A missing required column: one line naming the file, the header line and the column.
  const std::string msg = load_error(
      "id,name,memory_gb,cuda_visible_mib,sms,boost_mhz,fp32_tflops,fp16_tensor_tflops,tf32_tflops,bf16_tflops,"
      "l2_mb,tdp_w,visible_source,extra\n"
      "one,Card One,24,24000,80,1700,30,60,30,60,6,300,estimated,x\n");
  EXPECT_NE(msg.find("cards.csv:1: header lacks the required column bandwidth_gbs"), std::string::npos) << msg;
  EXPECT_EQ(msg.find('\n'), std::string::npos) << msg;
  // Rows must still match the header, extra columns included.
  EXPECT_NE(load_error(std::string("note,") + kHeader + "x,one,Card One,24,24000,900,80,1700,30,60,30,60,6,300\n")
                .find("cards.csv:2: 14 fields, the header has 15"),
            std::string::npos);
}

TEST_F(CardTableTest, AUserColumnMayHoldAQuotedNoteWithCommas) {
  const std::string header = std::string(kHeader).substr(0, std::string(kHeader).size() - 1) + ",note\n";
  const CardTable table = load_card_table(write(
      header +
      "one,\"Card One, 24 GB\",24,24000,900,80,1700,30,60,30,60,6,300,estimated,\"bought 2024, fan \"\"noisy\"\"\"\n"
      "two,Card Two,48,45000,700,84,1700,37,150,75,150,6,300,estimated,\"two lines:\nthe second, with a comma\"\r\n"
      "three,Card Three,48,45000,700,84,1700,37,150,75,150,6,300,estimated,plain\n"));
  EXPECT_EQ(table.ids(), (std::vector<std::string>{"one", "two", "three"}));
  EXPECT_EQ(table.at("one").name, "Card One, 24 GB");
  EXPECT_EQ(table.at("one").visible_source, VisibleSource::Estimated);
  EXPECT_DOUBLE_EQ(table.at("two").cuda_visible_mib, 45000);
  EXPECT_EQ(table.at("three").tdp_w, 300);
  // After a note of two lines, errors still name the line of the file.
  EXPECT_NE(load_error(header + "one,Card,24,24000,900,80,1700,30,60,30,60,6,300,estimated,\"a, b\nc\"\n"
                                "two,Card,48,lots,700,84,1700,37,150,75,150,6,300,estimated,x\n")
                .find("cards.csv:4:4 (cuda_visible_mib): 'lots'"),
            std::string::npos);
  // A note whose quote is not closed: one line naming the file and the line it opens on.
  const std::string msg =
      load_error(header + "one,Card,24,24000,900,80,1700,30,60,30,60,6,300,estimated,\"fast, loud\n");
  EXPECT_NE(msg.find("cards.csv:2: unterminated quoted field"), std::string::npos) << msg;
  EXPECT_EQ(msg.find('\n'), std::string::npos) << msg;
}

TEST_F(CardTableTest, InbandEccIsAnOptionalYesNoColumn) {
  const std::string header = std::string(kHeader).substr(0, std::string(kHeader).size() - 1) + ",inband_ecc\n";
  const CardTable table =
      load_card_table(write(header + "e,Card E,48,45416,696,84,1740,37.4,149.7,74.8,149.7,6,300,estimated,yes\n"
                                     "n,Card N,24,24268,936,82,1695,35.6,71,35.6,71,6,350,estimated,no\n"
                                     "u,Card U,24,24268,936,82,1695,35.6,71,35.6,71,6,350,estimated,\n"));
  EXPECT_TRUE(table.at("e").inband_ecc);
  EXPECT_FALSE(table.at("n").inband_ecc);
  EXPECT_FALSE(table.at("u").inband_ecc);
  EXPECT_NE(load_error(header + "e,Card E,48,45416,696,84,1740,37.4,149.7,74.8,149.7,6,300,estimated,on\n")
                .find("cards.csv:2:15 (inband_ecc): 'on' is not yes or no"),
            std::string::npos);
  EXPECT_NE(load_error(header.substr(0, header.size() - 1) + ",inband_ecc\n").find("(inband_ecc): column given twice"),
            std::string::npos);
  // The shipped table: the A40 (GDDR6, ECC on by default) keeps its ECC in-band, the 3090 and the
  // HBM cards do not.
  const CardTable shipped = load_card_table(test::source_dir() / "data" / "cards.csv");
  EXPECT_TRUE(shipped.at("a40").inband_ecc);
  EXPECT_FALSE(shipped.at("rtx3090").inband_ecc);
  EXPECT_FALSE(shipped.at("h200_sxm").inband_ecc);
}

}  // namespace
}  // namespace voxfit::memory
