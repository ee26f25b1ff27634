#include "voxfit/memory/card_table.h"

#include <algorithm>
#include <array>
#include <cctype>
#include <cmath>
#include <cstdlib>
#include <functional>
#include <map>

#include "voxfit/core/csv.h"
#include "voxfit/core/error.h"
#include "voxfit/core/units.h"

namespace voxfit::memory {

namespace {

// The columns a table must have; order in the file is free, so a column can be added later
// without breaking readers that look fields up by name. Columns not listed here or in
// kOptionalColumns are ignored: a user adding a column of their own (a source, a price) keeps a
// table voxfit reads.
constexpr std::array<const char*, 14> kColumns = {
    "id",          "name",      "memory_gb",   "cuda_visible_mib",   "bandwidth_gbs",
    "sms",         "boost_mhz", "fp32_tflops", "fp16_tensor_tflops", "tf32_tflops",
    "bf16_tflops", "l2_mb",     "tdp_w",       "visible_source"};
// Known columns a table may leave out (the default applies).
constexpr std::array<const char*, 5> kOptionalColumns = {"inband_ecc", "base_mhz", "fp16_vector_tflops", "architecture",
                                                         "memory_type"};

bool is_known_column(const std::string& name) {
  return std::find(kColumns.begin(), kColumns.end(), name) != kColumns.end() ||
         std::find(kOptionalColumns.begin(), kOptionalColumns.end(), name) != kOptionalColumns.end();
}

// Locates one field for error messages: "cards.csv:7:4 (cuda_visible_mib)".
struct Where {
  const std::filesystem::path& file;
  std::size_t line;
  std::string where(std::size_t column, const std::string& name) const {
    return file.string() + ":" + std::to_string(line) + ":" + std::to_string(column + 1) + " (" + name + ")";
  }
};

class RowReader {
 public:
  RowReader(const Where& at, const std::vector<std::string>& fields, const std::map<std::string, std::size_t>& index)
      : at_(at), fields_(fields), index_(index) {}

  const std::string& text(const std::string& name) const { return fields_[index_.at(name)]; }

  // An optional yes/no column: `fallback` when the column is absent or the field empty.
  bool flag(const std::string& name, bool fallback) const {
    const auto it = index_.find(name);
    if (it == index_.end() || fields_[it->second].empty()) return fallback;
    const std::string& s = fields_[it->second];
    if (s == "yes") return true;
    if (s == "no") return false;
    throw IoError(at_.where(it->second, name) + ": '" + s + "' is not yes or no");
  }

  // An optional text column: "" when the column is absent.
  std::string optional_text(const std::string& name) const {
    const auto it = index_.find(name);
    return it == index_.end() ? std::string() : fields_[it->second];
  }

  // An optional whole number: 0 when the column is absent or the field empty.
  int optional_integer(const std::string& name) const { return index_.count(name) ? integer(name, false) : 0; }

  // fp16_vector_tflops: a rate, "none" (emulated) or empty (unknown).
  std::optional<double> fp16_vector(bool& emulated) const {
    emulated = false;
    const auto it = index_.find("fp16_vector_tflops");
    if (it == index_.end()) return std::nullopt;
    if (fields_[it->second] == "none") {
      emulated = true;
      return std::nullopt;
    }
    const std::string& t = fields_[it->second];
    char* end = nullptr;
    const double v = std::strtod(t.c_str(), &end);
    if (!t.empty() && (end != t.c_str() + t.size() || !std::isfinite(v) || v <= 0))
      throw IoError(at_.where(it->second, "fp16_vector_tflops") + ": '" + t +
                    "' is not a positive number or none (FP16 emulated)");
    return optional_number("fp16_vector_tflops");
  }

  std::optional<double> optional_number(const std::string& name) const {
    const std::size_t col = index_.at(name);
    const std::string& s = fields_[col];
    if (s.empty()) return std::nullopt;
    char* end = nullptr;
    const double v = std::strtod(s.c_str(), &end);
    if (end != s.c_str() + s.size() || !std::isfinite(v) || v <= 0)
      throw IoError(at_.where(col, name) + ": '" + s + "' is not a positive number");
    return v;
  }

  double number(const std::string& name) const {
    const auto v = optional_number(name);
    if (!v) throw IoError(at_.where(index_.at(name), name) + ": a value is required");
    return *v;
  }

  int integer(const std::string& name, bool required = true) const {
    if (!required && text(name).empty()) return 0;
    const double v = number(name);
    if (v != std::floor(v) || v > 1e9)
      throw IoError(at_.where(index_.at(name), name) + ": '" + text(name) + "' is not a whole number");
    return static_cast<int>(v);
  }

  std::string id() const {
    const std::string& s = text("id");
    bool ok = !s.empty();
    for (char c : s)
      ok = ok &&
           (std::islower(static_cast<unsigned char>(c)) || std::isdigit(static_cast<unsigned char>(c)) || c == '_');
    if (!ok)
      throw IoError(at_.where(index_.at("id"), "id") + ": '" + s +
                    "' is not a card id (lower-case letters, digits and '_', as --card takes it)");
    return s;
  }

  VisibleSource visible_source() const {
    const std::string& s = text("visible_source");
    if (s == to_string(VisibleSource::MeasuredPublicLog)) return VisibleSource::MeasuredPublicLog;
    if (s == to_string(VisibleSource::Estimated)) return VisibleSource::Estimated;
    throw IoError(at_.where(index_.at("visible_source"), "visible_source") + ": '" + s +
                  "' is not one of measured-public-log, estimated");
  }

 private:
  const Where& at_;
  const std::vector<std::string>& fields_;
  const std::map<std::string, std::size_t>& index_;
};

std::string join(const std::vector<std::string>& items) {
  std::string out;
  for (const auto& s : items) out += (out.empty() ? "" : ", ") + s;
  return out;
}

}  // namespace

std::uint64_t CardSpec::cuda_visible_bytes() const {
  return static_cast<std::uint64_t>(std::llround(cuda_visible_mib * static_cast<double>(kMiB)));
}

std::string to_string(VisibleSource source) {
  return source == VisibleSource::MeasuredPublicLog ? "measured-public-log" : "estimated";
}

CardTable::CardTable(std::vector<CardSpec> cards, std::filesystem::path source)
    : cards_(std::move(cards)), source_(std::move(source)) {}

const CardSpec* CardTable::find(const std::string& id) const {
  for (const auto& c : cards_)
    if (c.id == id) return &c;
  return nullptr;
}

const CardSpec& CardTable::at(const std::string& id) const {
  if (const CardSpec* c = find(id)) return *c;
  throw ConfigError("--card: unknown card '" + id + "' (known in " + source_.string() + ": " + join(ids()) + ")");
}

std::vector<std::string> CardTable::ids() const {
  std::vector<std::string> out;
  for (const auto& c : cards_) out.push_back(c.id);
  return out;
}

CardTable load_card_table(const std::filesystem::path& path) {
  // Spaces around a field are dropped: people edit this table by hand ("a, b").
  CsvReader csv(path, "the card table", CsvOptions{/*trim=*/true});
  const auto no_cards = [&] {
    return IoError(path.string() + ": no cards (expected a header line and one line per card)");
  };
  if (csv.header().empty()) throw no_cards();

  const std::vector<std::string>& header = csv.header();
  const Where at_header{path, csv.header_line()};
  std::map<std::string, std::size_t> index;
  for (std::size_t i = 0; i < header.size(); ++i) {
    if (!is_known_column(header[i])) continue;  // someone's own column: read past it
    if (!index.emplace(header[i], i).second) throw IoError(at_header.where(i, header[i]) + ": column given twice");
  }
  std::vector<std::string> missing;
  for (const char* c : kColumns)
    if (!index.count(c)) missing.emplace_back(c);
  if (!missing.empty())
    throw IoError(csv.where(csv.header_line()) + ": header lacks the required column" +
                  (missing.size() > 1 ? "s " : " ") + join(missing));

  std::vector<CardSpec> cards;
  for (CsvRow csv_row; csv.next(csv_row);) {
    const Where at{path, csv_row.line};
    const RowReader row(at, csv_row.fields, index);
    CardSpec c;
    c.id = row.id();
    if (std::any_of(cards.begin(), cards.end(), [&](const CardSpec& o) { return o.id == c.id; }))
      throw IoError(at.where(index.at("id"), "id") + ": card '" + c.id + "' is listed twice");
    c.name = row.text("name");
    c.memory_gb = row.number("memory_gb");
    c.cuda_visible_mib = row.number("cuda_visible_mib");
    c.bandwidth_gbs = row.number("bandwidth_gbs");
    c.sms = row.integer("sms");
    c.boost_mhz = row.integer("boost_mhz");
    c.fp32_tflops = row.number("fp32_tflops");
    c.fp16_tensor_tflops = row.optional_number("fp16_tensor_tflops");
    c.tf32_tflops = row.optional_number("tf32_tflops");
    c.bf16_tflops = row.optional_number("bf16_tflops");
    c.l2_mb = row.number("l2_mb");
    c.tdp_w = row.integer("tdp_w");
    c.visible_source = row.visible_source();
    c.inband_ecc = row.flag("inband_ecc", false);
    c.base_mhz = row.optional_integer("base_mhz");
    c.fp16_vector_tflops = row.fp16_vector(c.fp16_emulated);
    c.architecture = row.optional_text("architecture");
    c.memory_type = row.optional_text("memory_type");
    cards.push_back(std::move(c));
  }
  if (cards.empty()) throw no_cards();
  return CardTable(std::move(cards), path);
}

}  // namespace voxfit::memory
