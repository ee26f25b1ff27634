#pragma once
// CSV as RFC 4180 has it, the one reader and writer of voxfit's tables (the card table, the
// reference numbers) and reports (results.csv, cards_fit.csv, predictions.csv, log.csv, ...).
// A field is quoted where it holds a comma, a quote or a line break ("a, b"; "" inside quotes is
// one quote); a header row names the columns.
#include <cstddef>
#include <filesystem>
#include <optional>
#include <ostream>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

namespace voxfit {

/// One row of a CSV file: its fields, and the line it starts on (1-based) for messages.
struct CsvRow {
  std::size_t line = 0;
  std::vector<std::string> fields;
};

struct CsvOptions {
  /// Drop spaces and tabs around each field (outside its quotes), for tables people edit by hand
  /// ("a, b"). Off: spaces are part of the field, as RFC 4180 has it.
  bool trim = false;
};

/// Reads CSV: fields separated by commas, rows by LF or CRLF; a quoted field may hold commas,
/// line breaks and "" (one quote); a quote inside an unquoted field is an ordinary character;
/// blank lines are skipped. The first row that is not blank is the header; the rows after it are
/// read one at a time (next), so that a caller checks the header before any row, and the errors
/// come in the order of the lines. Errors are IoError in one line naming the file and line:
/// "FILE:LINE: unterminated quoted field", "FILE:LINE: 5 fields, the header has 7",
/// "FILE:LINE: text after the closing quote of field 3".
class CsvReader {
 public:
  /// Reads the file `path` and its header row; `what` names the file where it cannot be read
  /// ("PATH: cannot open the card table").
  CsvReader(const std::filesystem::path& path, const std::string& what, const CsvOptions& options = {});
  /// CSV text; `source` names it in messages, as a file name would.
  static CsvReader from_text(std::string text, std::string source, const CsvOptions& options = {});

  /// The file (or `source`) as messages name it.
  const std::string& source() const { return source_; }
  /// The column names; empty (and header_line() 0) for a text with no rows at all.
  const std::vector<std::string>& header() const { return header_.fields; }
  std::size_t header_line() const { return header_.line; }
  /// The index of the column named `name` (the first, if the header repeats it), or nullopt.
  std::optional<std::size_t> find(const std::string& name) const;
  /// As find, but IoError "FILE:LINE: the header has no column 'NAME'" where there is none.
  std::size_t column(const std::string& name) const;

  /// The next row (as many fields as the header) into `row`; false after the last.
  bool next(CsvRow& row);
  /// The rows not read yet, all at once.
  std::vector<CsvRow> rows();
  /// "FILE:LINE", for messages.
  std::string where(std::size_t line) const;

 private:
  CsvReader(std::string text, std::string source, const CsvOptions& options);
  // The next row of the text, blank or not; false at its end.
  bool next_raw(CsvRow& row, bool& blank);
  std::string field(std::size_t number, bool& quoted);
  bool at_line_end() const;

  std::string text_, source_;
  CsvOptions options_;
  std::size_t pos_ = 0, line_ = 1;
  CsvRow header_;
};

/// One field to write: text as it is, integers in decimal, doubles as an ostream prints them
/// (6 significant digits: 0.25, 1e-05, 1234.57); CsvField::fixed for a fixed number of decimals.
class CsvField {
 public:
  // Implicit, so that a row is a braced list of values: row({name, 3, CsvField::fixed(x, 2)}).
  CsvField(std::string text) : text_(std::move(text)) {}
  CsvField(const char* text) : text_(text) {}
  template <typename T, std::enable_if_t<std::is_integral_v<T>, int> = 0>
  CsvField(T v) : text_(std::to_string(v)) {}
  CsvField(double v);
  CsvField(bool) = delete;  // say "true" / "1" in the caller: reports differ

  /// `v` with `digits` decimals, as printf's "%.*f" ("1234.50").
  static CsvField fixed(double v, int digits);
  /// `text` in quotes even where it needs none (a report that has always quoted a column).
  static CsvField quoted(std::string text);

  const std::string& text() const { return text_; }
  bool always_quoted() const { return always_quoted_; }

 private:
  std::string text_;
  bool always_quoted_ = false;
};

/// `field` as a CSV field: in quotes (quotes inside doubled) where it holds a comma, a quote, CR
/// or LF, else as it is.
std::string csv_escape(const std::string& field);

/// Writes a CSV table to a stream: the header, then rows of as many fields, each line ended by
/// "\n". The stream is the caller's (an ostringstream for write_file_atomic, a log file).
class CsvWriter {
 public:
  /// Writes the header line now, unless `write_header` is false (rows appended to a file that has
  /// it already).
  CsvWriter(std::ostream& out, const std::vector<std::string>& header, bool write_header = true);
  /// One row; Error when it has not as many fields as the header (a bug of the caller).
  void row(const std::vector<CsvField>& fields);

 private:
  std::ostream& out_;
  std::size_t columns_;
};

}  // namespace voxfit
