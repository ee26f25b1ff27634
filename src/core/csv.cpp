#include "voxfit/core/csv.h"

#include <cstdio>
#include <fstream>
#include <iterator>
#include <sstream>

#include "voxfit/core/error.h"

namespace voxfit {

namespace {

bool is_blank(char c) { return c == ' ' || c == '\t'; }

std::string read_text(const std::filesystem::path& path, const std::string& what) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw IoError(path.string() + ": cannot open " + what);
  std::string text{std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
  if (in.bad()) throw IoError(path.string() + ": cannot read " + what);
  return text;
}

// `text` in quotes, quotes inside doubled.
std::string quote(const std::string& text) {
  std::string out = "\"";
  for (char c : text) {
    if (c == '"') out += '"';
    out += c;
  }
  return out + "\"";
}

}  // namespace

CsvReader::CsvReader(std::string text, std::string source, const CsvOptions& options)
    : text_(std::move(text)), source_(std::move(source)), options_(options) {
  bool blank = true;
  while (blank && next_raw(header_, blank)) {
  }
  if (blank) header_ = CsvRow{};
}

CsvReader::CsvReader(const std::filesystem::path& path, const std::string& what, const CsvOptions& options)
    : CsvReader(read_text(path, what), path.string(), options) {}

CsvReader CsvReader::from_text(std::string text, std::string source, const CsvOptions& options) {
  return CsvReader(std::move(text), std::move(source), options);
}

std::optional<std::size_t> CsvReader::find(const std::string& name) const {
  for (std::size_t i = 0; i < header_.fields.size(); ++i)
    if (header_.fields[i] == name) return i;
  return std::nullopt;
}

std::size_t CsvReader::column(const std::string& name) const {
  if (const auto i = find(name)) return *i;
  throw IoError(where(header_.line) + ": the header has no column '" + name + "'");
}

std::string CsvReader::where(std::size_t line) const { return source_ + ":" + std::to_string(line); }

bool CsvReader::next(CsvRow& row) {
  bool blank = true;
  while (blank)
    if (!next_raw(row, blank)) return false;
  if (row.fields.size() != header_.fields.size())
    throw IoError(where(row.line) + ": " + std::to_string(row.fields.size()) +
                  (row.fields.size() == 1 ? " field" : " fields") + ", the header has " +
                  std::to_string(header_.fields.size()));
  return true;
}

std::vector<CsvRow> CsvReader::rows() {
  std::vector<CsvRow> out;
  for (CsvRow row; next(row);) out.push_back(std::move(row));
  return out;
}

bool CsvReader::next_raw(CsvRow& row, bool& blank) {
  if (pos_ >= text_.size()) return false;
  row.line = line_;
  row.fields.clear();
  bool quoted_any = false;
  while (true) {
    bool quoted = false;
    row.fields.push_back(field(row.fields.size() + 1, quoted));
    quoted_any = quoted_any || quoted;
    if (pos_ < text_.size() && text_[pos_] == ',') {
      ++pos_;
      continue;
    }
    break;
  }
  // The line's end: CRLF or LF (or the text's end).
  if (pos_ < text_.size() && text_[pos_] == '\r') ++pos_;
  if (pos_ < text_.size() && text_[pos_] == '\n') {
    ++pos_;
    ++line_;
  }
  blank = !quoted_any && row.fields.size() == 1 && row.fields[0].find_first_not_of(" \t") == std::string::npos;
  return true;
}

bool CsvReader::at_line_end() const {
  if (pos_ >= text_.size() || text_[pos_] == '\n') return true;
  return text_[pos_] == '\r' && (pos_ + 1 == text_.size() || text_[pos_ + 1] == '\n');
}

// The field at pos_ (the `number`th of its row), up to the comma or line end after it.
std::string CsvReader::field(std::size_t number, bool& quoted) {
  const std::size_t start = pos_;
  if (options_.trim)
    while (pos_ < text_.size() && is_blank(text_[pos_])) ++pos_;
  if (pos_ >= text_.size() || text_[pos_] != '"') {
    pos_ = start;
    while (!at_line_end() && text_[pos_] != ',') ++pos_;
    std::size_t b = start, e = pos_;
    if (options_.trim) {
      while (b < e && is_blank(text_[b])) ++b;
      while (e > b && is_blank(text_[e - 1])) --e;
    }
    return text_.substr(b, e - b);
  }
  quoted = true;
  const std::size_t opened = line_;
  std::string out;
  ++pos_;
  while (true) {
    if (pos_ >= text_.size()) throw IoError(where(opened) + ": unterminated quoted field");
    const char c = text_[pos_++];
    if (c == '"') {
      if (pos_ < text_.size() && text_[pos_] == '"') {
        out += '"';
        ++pos_;
        continue;
      }
      break;
    }
    if (c == '\n') ++line_;
    out += c;
  }
  if (options_.trim)
    while (pos_ < text_.size() && is_blank(text_[pos_])) ++pos_;
  if (pos_ < text_.size() && text_[pos_] != ',' && !at_line_end())
    throw IoError(where(line_) + ": text after the closing quote of field " + std::to_string(number));
  return out;
}

CsvField::CsvField(double v) {
  std::ostringstream out;
  out << v;
  text_ = out.str();
}

CsvField CsvField::fixed(double v, int digits) {
  const int n = std::snprintf(nullptr, 0, "%.*f", digits, v);
  std::string text(n > 0 ? static_cast<std::size_t>(n) : 0, '\0');
  if (n > 0) std::snprintf(text.data(), text.size() + 1, "%.*f", digits, v);
  return CsvField(std::move(text));
}

CsvField CsvField::quoted(std::string text) {
  CsvField f(std::move(text));
  f.always_quoted_ = true;
  return f;
}

std::string csv_escape(const std::string& field) {
  return field.find_first_of(",\"\r\n") == std::string::npos ? field : quote(field);
}

CsvWriter::CsvWriter(std::ostream& out, const std::vector<std::string>& header, bool write_header)
    : out_(out), columns_(header.size()) {
  if (write_header) row(std::vector<CsvField>(header.begin(), header.end()));
}

void CsvWriter::row(const std::vector<CsvField>& fields) {
  if (fields.size() != columns_)
    throw Error("CSV row of " + std::to_string(fields.size()) + " fields, the header has " + std::to_string(columns_));
  for (std::size_t i = 0; i < fields.size(); ++i)
    out_ << (i ? "," : "") << (fields[i].always_quoted() ? quote(fields[i].text()) : csv_escape(fields[i].text()));
  out_ << '\n';
}

}  // namespace voxfit
