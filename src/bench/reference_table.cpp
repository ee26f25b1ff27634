#include "voxfit/bench/reference_table.h"

#include <fstream>
#include <sstream>

#include "voxfit/core/error.h"
#include "voxfit/core/units.h"

namespace voxfit::bench {

namespace {

std::vector<std::string> split_csv_line(const std::string& line) {
  std::vector<std::string> fields;
  std::stringstream ss(line);
  std::string field;
  while (std::getline(ss, field, ',')) fields.push_back(field);
  if (!line.empty() && line.back() == ',') fields.emplace_back();
  return fields;
}

}  // namespace

std::vector<ReferenceRow> load_reference_table(const std::filesystem::path& csv) {
  std::ifstream in(csv);
  if (!in) throw IoError(csv.string() + ": cannot open the reference table");
  const std::string expected_header = "card,model,precision,images_per_s";
  std::vector<ReferenceRow> rows;
  std::string line;
  int number = 0;
  while (std::getline(in, line)) {
    ++number;
    if (!line.empty() && line.back() == '\r') line.pop_back();
    const std::string where = csv.string() + ":" + std::to_string(number) + ": ";
    if (number == 1) {
      if (line != expected_header)
        throw IoError(where + "expected the header '" + expected_header + "', found '" + line + "'");
      continue;
    }
    if (line.empty()) continue;
    const auto f = split_csv_line(line);
    if (f.size() != 4 || f[0].empty() || f[1].empty() || f[2].empty())
      throw IoError(where + "expected 4 fields (card,model,precision,images_per_s), found '" + line + "'");
    ReferenceRow row{f[0], f[1], f[2], to_number(f[3]).value_or(0.0)};
    if (!(row.images_per_s > 0.0))
      throw IoError(where + "images_per_s must be a positive number, found '" + f[3] + "'");
    rows.push_back(row);
  }
  if (number == 0) throw IoError(csv.string() + ": empty reference table (no header)");
  return rows;
}

std::vector<Comparison> compare_with_reference(const std::vector<ReferenceRow>& table, const std::string& model,
                                               const std::string& precision, bool train, double measured_images_per_s) {
  std::vector<Comparison> out;
  if (train) return out;
  for (const auto& row : table)
    if (row.model == model && row.precision == precision)
      out.push_back({row, measured_images_per_s / row.images_per_s});
  return out;
}

}  // namespace voxfit::bench
