#include "voxfit/bench/reference_table.h"

#include "voxfit/core/csv.h"
#include "voxfit/core/error.h"
#include "voxfit/core/units.h"

namespace voxfit::bench {

namespace {

// A row as its line in the file, for messages.
std::string as_line(const std::vector<std::string>& fields) {
  std::string out;
  for (std::size_t i = 0; i < fields.size(); ++i) out += (i ? "," : "") + csv_escape(fields[i]);
  return out;
}

}  // namespace

std::vector<ReferenceRow> load_reference_table(const std::filesystem::path& csv) {
  CsvReader in(csv, "the reference table");
  if (in.header().empty()) throw IoError(csv.string() + ": empty reference table (no header)");
  const std::vector<std::string> expected_header = {"card", "model", "precision", "images_per_s"};
  if (in.header() != expected_header)
    throw IoError(in.where(in.header_line()) + ": expected the header 'card,model,precision,images_per_s', found '" +
                  as_line(in.header()) + "'");
  std::vector<ReferenceRow> rows;
  for (CsvRow line; in.next(line);) {
    const auto& f = line.fields;
    const std::string where = in.where(line.line) + ": ";
    if (f[0].empty() || f[1].empty() || f[2].empty())
      throw IoError(where + "expected 4 fields (card,model,precision,images_per_s), found '" + as_line(f) + "'");
    ReferenceRow row{f[0], f[1], f[2], to_number(f[3]).value_or(0.0)};
    if (!(row.images_per_s > 0.0))
      throw IoError(where + "images_per_s must be a positive number, found '" + f[3] + "'");
    rows.push_back(row);
  }
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
