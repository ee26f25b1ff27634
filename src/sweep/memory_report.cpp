#include "voxfit/sweep/memory_report.h"

#include <algorithm>
#include <cctype>
#include <sstream>

#include "voxfit/core/units.h"
#include "voxfit/memory/breakdown_plot.h"

namespace voxfit::sweep {

namespace fs = std::filesystem;
using nlohmann::json;

namespace {

std::string bytes_text(std::int64_t bytes) {
  return bytes < 0 ? "-" + format_bytes(static_cast<std::uint64_t>(-bytes))
                   : format_bytes(static_cast<std::uint64_t>(bytes));
}

std::int64_t group_bytes(const json& b, const std::string& group) {
  std::int64_t n = 0;
  for (const auto& p : b.at("parts"))
    if (p.at("group") == group) n += p.at("bytes").get<std::int64_t>();
  return n;
}

// "decoder1 0.41 GiB, encoder0 0.20 GiB, ...": the three largest activation parts.
std::string largest_blocks(const json& b) {
  std::vector<std::pair<std::int64_t, std::string>> blocks;
  for (const auto& p : b.at("parts"))
    if (p.at("group") == "activations")
      blocks.emplace_back(p.at("bytes").get<std::int64_t>(), p.at("name").get<std::string>());
  std::sort(blocks.rbegin(), blocks.rend());
  std::string out;
  for (std::size_t i = 0; i < blocks.size() && i < 3; ++i)
    out += (out.empty() ? "" : ", ") + blocks[i].second + " " + bytes_text(blocks[i].first);
  return out;
}

std::string table_row(const PointResult& e, const json& b) {
  std::ostringstream row;
  row << "| " << e.model << " | " << e.patch << " | " << e.precision << " | " << e.checkpoint << " | " << e.budget
      << " | " << b.value("batch", 0) << " | " << format_bytes(b.value("peak_allocated", std::uint64_t{0})) << " ("
      << b.value("peak_phase", "") << ") | " << bytes_text(group_bytes(b, "static")) << " | "
      << bytes_text(group_bytes(b, "inputs")) << " | " << bytes_text(group_bytes(b, "activations")) << ": "
      << largest_blocks(b) << " | " << bytes_text(group_bytes(b, "workspace") + group_bytes(b, "gradients")) << " | "
      << format_bytes(b.value("fragmentation", std::uint64_t{0})) << " | "
      << format_bytes(b.value("cuda_context", std::uint64_t{0})) << " | "
      << format_bytes(b.value("headroom", std::uint64_t{0})) << " | " << bytes_text(group_bytes(b, "unattributed"))
      << " |\n";
  return row.str();
}

// The point's key as a file name part: "unetr|96x96x96|fp16|none|rtx3090" -> "unetr-96x96x96-fp16-none-rtx3090".
std::string file_stem(const std::string& key) {
  std::string s = key;
  for (char& c : s)
    if (!(std::isalnum(static_cast<unsigned char>(c)) || c == '.' || c == '_')) c = '-';
  return s;
}

// The point's two PNGs; their Markdown, or why there are none.
std::string point_plots(const PointResult& e, const fs::path& dir) {
  const json& mb = e.memory_breakdown;
  const std::string stem = file_stem(e.key.empty() ? "point" : e.key);
  std::vector<std::pair<std::string, json>> bars;
  if (mb.contains("batch_1")) bars.emplace_back("batch 1", mb["batch_1"]);
  if (mb.contains("max_batch") && mb["max_batch"].value("batch", 0) != 1)
    bars.emplace_back("batch " + std::to_string(mb["max_batch"].value("batch", 0)) + " (max)", mb["max_batch"]);
  const std::string& label = e.key;
  const fs::path bar_png = dir / ("breakdown-" + stem + ".png");
  std::string why = memory::write_breakdown_bars(bars, bar_png, "Memory at the peak: " + label);
  if (!why.empty()) return "\n(no memory plots: " + why + ")\n";
  std::vector<json> by_batch;
  for (const auto& p : e.probe_log)
    if (p.fits && !p.memory.is_null()) by_batch.push_back(p.memory);
  const fs::path lines_png = dir / ("components-" + stem + ".png");
  why = memory::write_components_by_batch(by_batch, lines_png, "Memory components against batch: " + label);
  std::string md = "\n![memory breakdown " + label + "](" + bar_png.filename().string() + ")\n";
  if (why.empty()) md += "\n![memory components " + label + "](" + lines_png.filename().string() + ")\n";
  return md;
}

}  // namespace

std::string memory_report(const std::vector<const PointResult*>& entries, const fs::path& dir) {
  std::ostringstream md, plots;
  bool any = false;
  for (const PointResult* entry : entries) {
    const PointResult& e = *entry;
    if (e.memory_breakdown.is_null() || e.memory_breakdown.empty()) continue;
    if (!any)
      md << "\n# Where the memory goes\n\nAt batch 1 and at the largest batch that fit, the peak of the training "
            "step (allocated, and the phase it came in) split into: static (parameters, optimizer state, buffers, "
            "loss scaler), the batch on the device, activations kept for backward (measured per top-level block "
            "by the allocator; the three largest named), workspace (the peak over the live bytes at the start of "
            "its phase or block: temporaries, library workspaces, in backward the gradients so far net of the "
            "activations freed), then fragmentation (reserved - allocated), the CUDA context and the budget "
            "left unused. Unattributed: live bytes at the start of the forward that the tensor counts miss; "
            "parts sum to the peak.\n\n"
            "| model | patch | precision | checkpointing | budget | batch | peak | static | batch bytes | "
            "activations | workspace | fragmentation | CUDA context | headroom | unattributed |\n"
            "|---|---|---|---|---|---:|---:|---:|---:|---|---:|---:|---:|---:|---:|\n";
    any = true;
    const json& mb = e.memory_breakdown;
    if (mb.contains("batch_1")) md << table_row(e, mb["batch_1"]);
    if (mb.contains("max_batch") && mb["max_batch"].value("batch", 0) != 1) md << table_row(e, mb["max_batch"]);
    plots << point_plots(e, dir);
  }
  return any ? md.str() + plots.str() : "";
}

}  // namespace voxfit::sweep
