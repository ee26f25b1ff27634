#include "voxfit/io/dataset_check.h"

#include <torch/torch.h>

#include <algorithm>
#include <cmath>

#include "voxfit/core/error.h"
#include "voxfit/io/volume_io.h"

namespace voxfit::io {

namespace {

// IoErrors start with the path they are about; a Problem carries the path separately.
std::string without_path(const std::string& what, const fs::path& file) {
  const std::string prefix = file.string() + ": ";
  if (what.compare(0, prefix.size(), prefix) == 0) return what.substr(prefix.size());
  return what;
}

fs::path on_disk(const fs::path& p) {
  const std::string s = p.string();
  const auto hash = s.rfind('#');
  if (hash != std::string::npos && fs::is_directory(s.substr(0, hash))) return s.substr(0, hash);
  return p;
}

std::string list_values(const std::vector<std::int64_t>& v, std::size_t max = 12) {
  std::string s;
  for (std::size_t i = 0; i < v.size() && i < max; ++i) s += (i ? ", " : "") + std::to_string(v[i]);
  if (v.size() > max) s += ", ... (" + std::to_string(v.size()) + " in all)";
  return s;
}

// Resampling divides by the spacing and places voxels with the origin and direction: zero,
// negative or non-finite values would give absurd grids (or NaN sizes) much later.
std::string bad_geometry(const Geometry& g) {
  for (double s : g.spacing)
    if (!(std::isfinite(s) && s > 0))
      return "spacing " + format_triple(g.spacing) + " mm; expected three finite positive numbers";
  for (double v : g.origin)
    if (!std::isfinite(v)) return "origin " + format_triple(g.origin) + "; expected finite numbers";
  for (double v : g.direction)
    if (!std::isfinite(v)) return "direction holds non-finite numbers; expected a rotation matrix";
  return "";
}

}  // namespace

std::string format_problem(const Problem& p) { return p.file.string() + ": " + p.message; }

std::vector<Problem> check_case(const Dataset& dataset, const CaseFiles& files, const Channels& image,
                                const std::vector<fs::path>& channel_files, const Volume* label,
                                const CheckOptions& options) {
  std::vector<Problem> out;
  const fs::path first = channel_files.empty() ? fs::path(files.id) : channel_files.front();
  if (!dataset.channel_names.empty() && image.size() != dataset.expected_channels()) {
    std::string names;
    for (const auto& n : dataset.channel_names) names += (names.empty() ? "" : ", ") + n;
    out.push_back({first, "case '" + files.id + "' has " + std::to_string(image.size()) + " channels, expected " +
                              std::to_string(dataset.expected_channels()) + " (" + names + ")"});
  }
  for (std::size_t c = 0; c < image.size(); ++c) {
    const fs::path& file = c < channel_files.size() ? channel_files[c] : first;
    if (const std::string g = bad_geometry(image[c].geometry); !g.empty()) {
      out.push_back({file, g});
      return out;
    }
    if (c > 0) {
      const std::string d = grid_difference(image[0], image[c], options.tolerance);
      if (!d.empty() && !same_voxel_centres(image[0].size(), image[0].geometry, image[c].size(), image[c].geometry,
                                            options.tolerance))
        out.push_back({file, "channel " + std::to_string(c) + " is on another grid than channel 0 in " +
                                 first.string() + " (" + d + "); expected co-registered channels"});
    }
    if (image[c].data.is_floating_point()) {
      const std::int64_t bad = (~torch::isfinite(image[c].data)).sum().item<std::int64_t>();
      if (bad > 0)
        out.push_back({file, std::to_string(bad) + " voxels are NaN or Inf" +
                                 (image.size() > 1 ? " in channel " + std::to_string(c) : std::string()) +
                                 "; expected finite intensities"});
    }
  }
  if (label == nullptr) return out;
  const fs::path lfile = files.label ? *files.label : first;
  if (const std::string g = bad_geometry(label->geometry); !g.empty()) {
    out.push_back({lfile, g});
    return out;
  }
  if (!image.empty()) {
    const std::string d = grid_difference(image[0], *label, options.tolerance);
    if (!d.empty() &&
        !same_voxel_centres(image[0].size(), image[0].geometry, label->size(), label->geometry, options.tolerance))
      out.push_back(
          {lfile,
           "label grid differs from the image " + first.string() + " (" + d +
               "); expected the image's size, spacing, origin and direction, or a flipped/transposed copy of them"});
  }
  torch::Tensor values = label->data;
  if (values.is_floating_point()) {
    const torch::Tensor finite = torch::isfinite(values);
    if (!finite.all().item<bool>() || !(values == values.round()).all().item<bool>()) {
      out.push_back({lfile, "label holds non-integer values; expected integer class values"});
      return out;
    }
  }
  const torch::Tensor unique = std::get<0>(torch::_unique(values.to(torch::kInt64).flatten(), true, false));
  std::vector<std::int64_t> present(unique.data_ptr<std::int64_t>(), unique.data_ptr<std::int64_t>() + unique.numel());
  if (!dataset.labels.empty()) {
    std::vector<std::int64_t> undeclared, declared;
    for (const auto& [v, name] : dataset.labels) declared.push_back(v);
    for (auto v : present)
      if (v != 0 && !dataset.labels.count(v)) undeclared.push_back(v);
    if (!undeclared.empty())
      out.push_back({lfile, "label values " + list_values(undeclared) + " are not declared in " +
                                dataset.manifest.filename().string() + " (declared: " + list_values(declared) + ")"});
  }
  if (present.empty() || (present.size() == 1 && present[0] == 0))
    out.push_back({lfile, "label has no foreground (every voxel is 0); expected at least one labelled voxel"});
  return out;
}

CheckReport check_dataset(const Dataset& dataset, const CheckOptions& options) {
  CheckReport report;
  report.cases = dataset.cases.size();
  if (dataset.cases.empty()) report.problems.push_back({dataset.manifest, "no cases; expected at least one"});
  for (const CaseFiles& c : dataset.cases) {
    bool complete = true;
    Channels image;
    std::vector<fs::path> channel_files;
    for (const fs::path& f : c.images) {
      if (!fs::exists(on_disk(f))) {
        report.problems.push_back({f, "file not found (image of case '" + c.id + "')"});
        complete = false;
        continue;
      }
      try {
        Channels part = read_case_image(dataset, f);
        for (auto& v : part) {
          image.push_back(std::move(v));
          channel_files.push_back(f);
        }
      } catch (const Error& e) {
        report.problems.push_back({f, without_path(e.what(), on_disk(f))});
        complete = false;
      }
    }
    std::optional<Volume> label;
    if (!c.label) {
      report.problems.push_back({c.images.empty() ? dataset.manifest : c.images.front(),
                                 "case '" + c.id + "' has no label; expected a label map"});
    } else if (!fs::exists(*c.label)) {
      report.problems.push_back({*c.label, "file not found (label of case '" + c.id + "')"});
    } else {
      try {
        label = read_case_label(dataset, *c.label);
      } catch (const Error& e) {
        // An HDF5 case holds its image and label in one file: a file that cannot be opened at
        // all is one problem, not two.
        const Problem p{*c.label, without_path(e.what(), *c.label)};
        const bool repeated = std::any_of(report.problems.begin(), report.problems.end(), [&p](const Problem& q) {
          return q.file == p.file && q.message == p.message;
        });
        if (!repeated) report.problems.push_back(p);
      }
    }
    if (label) {
      const torch::Tensor u = std::get<0>(torch::_unique(label->data.to(torch::kInt64).flatten(), true, false));
      for (std::int64_t i = 0; i < u.numel(); ++i) report.label_values.insert(u[i].item<std::int64_t>());
    }
    if (!complete && image.empty()) continue;
    for (auto& p : check_case(dataset, c, image, channel_files, label ? &*label : nullptr, options))
      report.problems.push_back(std::move(p));
  }
  return report;
}

}  // namespace voxfit::io
