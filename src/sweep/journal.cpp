#include "voxfit/sweep/journal.h"

#include <algorithm>
#include <cstdlib>
#include <fstream>
#include <map>
#include <sstream>

#include "voxfit/core/atomic_file.h"
#include "voxfit/core/error.h"
#include "voxfit/sweep/report.h"

namespace voxfit::sweep {

namespace fs = std::filesystem;
using nlohmann::json;

std::int64_t patch_voxels(const std::vector<std::int64_t>& patch) {
  std::int64_t n = 1;
  for (auto v : patch) n *= v;
  return n;
}

std::vector<json> read_journal(const fs::path& file) {
  std::vector<json> out;
  std::ifstream in(file);
  std::string line;
  while (std::getline(in, line)) {
    if (line.empty()) continue;
    try {
      out.push_back(json::parse(line));
    } catch (const json::exception&) {
      // A process killed mid-append leaves a partial last line: that point simply runs again.
    }
  }
  return out;
}

std::vector<PointResult> read_results(const fs::path& file) {
  std::vector<PointResult> out;
  for (const auto& e : read_journal(file)) {
    try {
      out.push_back(PointResult::from_json(e));
    } catch (const json::exception&) {
      // not a point this version can read: left out, as a truncated line
    }
  }
  return out;
}

void forget_probes(const fs::path& file, const std::string& key) {
  if (!fs::exists(file)) return;
  std::string kept;
  for (const auto& e : read_journal(file))
    if (e.value("key", "") != key) kept += e.dump() + "\n";
  if (kept.empty())
    remove_tree(file);
  else
    write_file_atomic(file, kept);
}

std::vector<PointResult> merge_journals(const std::vector<fs::path>& journals, const fs::path& dir) {
  std::vector<PointResult> merged;
  std::map<std::string, std::size_t> at;
  for (const auto& file : journals)
    for (auto& e : read_results(file)) {
      const auto it = at.find(e.key);
      if (it == at.end()) {
        at[e.key] = merged.size();
        merged.push_back(std::move(e));
      } else if (!merged[it->second].skipped.empty() && e.skipped.empty()) {
        merged[it->second] = std::move(e);
      }
    }
  if (merged.empty()) throw ConfigError(dir.string() + ": no sweep results to merge");
  fs::create_directories(dir);
  std::string text;
  for (const auto& e : merged) text += e.to_json().dump() + "\n";
  write_file_atomic(dir / "results.jsonl", text);
  write_reports(merged, dir);
  return merged;
}

std::vector<fs::path> point_journals(const fs::path& dir) {
  std::vector<fs::path> out;
  if (fs::is_directory(dir / "points"))
    for (const auto& d : fs::directory_iterator(dir / "points"))
      if (fs::exists(d.path() / "results.jsonl")) out.push_back(d.path() / "results.jsonl");
  std::sort(out.begin(), out.end());
  if (out.empty()) throw ConfigError((dir / "points").string() + ": no */results.jsonl to merge");
  return out;
}

}  // namespace voxfit::sweep
