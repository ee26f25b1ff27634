#include <gtest/gtest.h>

#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "support/test_support.h"
#include "voxfit/core/csv.h"
#include "voxfit/core/error.h"

namespace voxfit {
namespace {

using Fields = std::vector<std::string>;

// The rows of CSV text, as the reader gives them.
std::vector<Fields> csv_fields(const std::string& text, const CsvOptions& options = {}) {
  CsvReader reader = CsvReader::from_text(text, "t.csv", options);
  std::vector<Fields> out;
  for (const CsvRow& row : reader.rows()) out.push_back(row.fields);
  return out;
}

// The message of the IoError that reading `text` (header and every row) throws.
std::string csv_error(const std::string& text) {
  try {
    csv_fields(text);
  } catch (const IoError& e) {
    return e.what();
  }
  ADD_FAILURE() << "no IoError for:\n" << text;
  return "";
}

TEST(CsvReader, QuotedFieldKeepsItsCommas) {
  CsvReader reader = CsvReader::from_text("id,note,n\none,\"fast, loud\",3\n", "t.csv");
  EXPECT_EQ(reader.header(), (Fields{"id", "note", "n"}));
  EXPECT_EQ(reader.header_line(), 1u);
  ASSERT_EQ(reader.find("note"), std::optional<std::size_t>(1));
  EXPECT_FALSE(reader.find("price"));
  const auto rows = reader.rows();
  ASSERT_EQ(rows.size(), 1u);
  EXPECT_EQ(rows[0].line, 2u);
  EXPECT_EQ(rows[0].fields, (Fields{"one", "fast, loud", "3"}));
  EXPECT_EQ(rows[0].fields[reader.column("note")], "fast, loud");
  // A trailing comma is an empty last field; a quoted field may be empty, or span lines.
  EXPECT_EQ(csv_fields("a,b\n1,\n\"\",\"two\nlines\"\n"), (std::vector<Fields>{{"1", ""}, {"", "two\nlines"}}));
}

TEST(CsvReader, DoubledQuoteInsideQuotesIsOneQuote) {
  EXPECT_EQ(csv_fields("note\n\"say \"\"hi\"\", then go\"\n\"\"\"\"\n"),
            (std::vector<Fields>{{"say \"hi\", then go"}, {"\""}}));
  // A quote inside an unquoted field is an ordinary character.
  EXPECT_EQ(csv_fields("size\n24\" screen\n"), (std::vector<Fields>{{"24\" screen"}}));
}

TEST(CsvReader, CrlfLineEndsAndBlankLinesAreTolerated) {
  CsvReader reader = CsvReader::from_text("\r\na,b\r\n1,2\r\n\r\n3,\"x, y\"\r\n  \r\n4,5", "t.csv");
  EXPECT_EQ(reader.header(), (Fields{"a", "b"}));
  EXPECT_EQ(reader.header_line(), 2u);
  const auto rows = reader.rows();
  ASSERT_EQ(rows.size(), 3u);
  EXPECT_EQ(rows[0].fields, (Fields{"1", "2"}));
  EXPECT_EQ(rows[1].fields, (Fields{"3", "x, y"}));
  EXPECT_EQ(rows[2].fields, (Fields{"4", "5"}));  // no line end after the last row
  EXPECT_EQ(rows[1].line, 5u);
  EXPECT_EQ(rows[2].line, 7u);
}

TEST(CsvReader, SpacesArePartOfAFieldUnlessTrimmed) {
  const std::string text = "a, b\n 1 , \"x, y\" \n";
  EXPECT_EQ(csv_fields(text, CsvOptions{/*trim=*/true}), (std::vector<Fields>{{"1", "x, y"}}));
  // Untrimmed, spaces are kept and a quote after one is an ordinary character, as RFC 4180 has it.
  EXPECT_EQ(csv_fields("a, b\n 1 , c \n"), (std::vector<Fields>{{" 1 ", " c "}}));
  EXPECT_EQ(csv_fields("a,b\n1, \"x\"\n"), (std::vector<Fields>{{"1", " \"x\""}}));
  EXPECT_EQ(CsvReader::from_text(text, "t.csv").header(), (Fields{"a", " b"}));
}

class CsvFile : public test::TempDirTest {};

TEST_F(CsvFile, FieldCountAgainstTheHeaderIsAnErrorNamingFileAndLine) {
  const auto path = dir() / "table.csv";
  std::ofstream(path) << "a,b,c,d,e,f,g\n1,2,3,4,5,6,7\n1,2,\"3,4\",5,6\n";
  CsvReader reader(path, "the test table");
  CsvRow row;
  ASSERT_TRUE(reader.next(row));  // line 2 is whole; the error comes with line 3
  try {
    reader.next(row);
    FAIL() << "no error";
  } catch (const IoError& e) {
    EXPECT_EQ(std::string(e.what()), path.string() + ":3: 5 fields, the header has 7");
  }
  EXPECT_EQ(csv_error("a,b\n1,2,3\n"), "t.csv:2: 3 fields, the header has 2");
  EXPECT_EQ(csv_error("a,b\n\n1\n"), "t.csv:3: 1 field, the header has 2");
}

TEST_F(CsvFile, MissingFileNamesThePathAndWhatItIs) {
  try {
    CsvReader(dir() / "nope.csv", "the test table");
    FAIL() << "no error";
  } catch (const IoError& e) {
    EXPECT_EQ(std::string(e.what()), (dir() / "nope.csv").string() + ": cannot open the test table");
  }
}

TEST(CsvReader, UnterminatedQuoteIsAnErrorNamingTheLineItOpensOn) {
  EXPECT_EQ(csv_error("a,b\n1,2\n3,\"open\n4,5\n"), "t.csv:3: unterminated quoted field");
  EXPECT_EQ(csv_error("\"a,b\n"), "t.csv:1: unterminated quoted field");  // in the header
  EXPECT_EQ(csv_error("a,b\n1,\"x\"y\n"), "t.csv:2: text after the closing quote of field 2");
}

TEST(CsvReader, AnEmptyTextHasNoHeaderAndAMissingColumnIsNamed) {
  CsvReader empty = CsvReader::from_text("\n\n", "t.csv");
  EXPECT_TRUE(empty.header().empty());
  EXPECT_EQ(empty.header_line(), 0u);
  CsvRow row;
  EXPECT_FALSE(empty.next(row));
  CsvReader reader = CsvReader::from_text("\na,b\n", "t.csv");
  try {
    reader.column("c");
    FAIL() << "no error";
  } catch (const IoError& e) {
    EXPECT_EQ(std::string(e.what()), "t.csv:2: the header has no column 'c'");
  }
}

TEST(CsvWriter, QuotesOnlyWhereNeededAndRoundTrips) {
  std::ostringstream out;
  CsvWriter writer(out, {"name", "note", "n"});
  const Fields tricky = {"a, b", "say \"hi\"", "two\nlines"};
  writer.row({"plain", "x y", 3});
  writer.row({tricky[0], tricky[1], tricky[2]});
  writer.row({"", "\"", CsvField::fixed(2.5, 2)});
  EXPECT_EQ(out.str(),
            "name,note,n\n"
            "plain,x y,3\n"
            "\"a, b\",\"say \"\"hi\"\"\",\"two\nlines\"\n"
            ",\"\"\"\",2.50\n");
  EXPECT_EQ(csv_fields(out.str()), (std::vector<Fields>{{"plain", "x y", "3"}, tricky, {"", "\"", "2.50"}}));
  // Through a file, with the reader's line numbers.
  CsvReader reader = CsvReader::from_text(out.str(), "t.csv");
  const auto rows = reader.rows();
  ASSERT_EQ(rows.size(), 3u);
  EXPECT_EQ(rows[2].line, 5u);  // after the two-line field
  EXPECT_THROW(writer.row({"only one"}), Error);
}

TEST(CsvWriter, FormatsNumbersAsTheReportsDo) {
  // Doubles as an ostream prints them (log.csv), fixed decimals as printf's %.*f (results.csv).
  EXPECT_EQ(CsvField(0.1).text(), "0.1");
  EXPECT_EQ(CsvField(1e-5).text(), "1e-05");
  EXPECT_EQ(CsvField(1234.5678).text(), "1234.57");
  EXPECT_EQ(CsvField(3.0).text(), "3");
  EXPECT_EQ(CsvField(std::int64_t{12345678901}).text(), "12345678901");
  EXPECT_EQ(CsvField(std::uint64_t{18446744073709551615ull}).text(), "18446744073709551615");
  EXPECT_EQ(CsvField::fixed(2.0 / 3.0, 3).text(), "0.667");
  EXPECT_EQ(CsvField::fixed(1e20, 0).text(), "100000000000000000000");
  EXPECT_EQ(CsvField::fixed(-0.04, 1).text(), "-0.0");
  // A column a report has always quoted keeps its quotes.
  std::ostringstream out;
  CsvWriter writer(out, {"profile", "batch"}, /*write_header=*/false);
  writer.row({CsvField::quoted("resnet50 float16 inference b64"), 64});
  EXPECT_EQ(out.str(), "\"resnet50 float16 inference b64\",64\n");
  EXPECT_EQ(csv_escape("plain"), "plain");
  EXPECT_EQ(csv_escape("a\rb"), "\"a\rb\"");
}

}  // namespace
}  // namespace voxfit
