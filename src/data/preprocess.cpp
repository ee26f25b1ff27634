#include "voxfit/data/preprocess.h"

#include <ATen/CPUGeneratorImpl.h>
#include <torch/torch.h>

#include <algorithm>
#include <cctype>
#include <cmath>
#include <cstdio>
#include <set>
#include <sstream>

#include "voxfit/core/atomic_file.h"
#include "voxfit/core/error.h"
#include "voxfit/core/units.h"
#include "voxfit/io/dataset_check.h"
#include "voxfit/io/h5_file.h"
#include "voxfit/io/resample.h"

namespace voxfit::data {

namespace {

using Size3 = std::array<std::int64_t, 3>;
constexpr const char* kCaseFormat = "voxfit-case-1";

// FNV-1a: a stable 64-bit hash of the text that describes inputs and settings.
std::string hash_hex(const std::string& text) {
  std::uint64_t h = 1469598103934665603ull;
  for (unsigned char c : text) {
    h ^= c;
    h *= 1099511628211ull;
  }
  char buf[17];
  std::snprintf(buf, sizeof buf, "%016llx", static_cast<unsigned long long>(h));
  return buf;
}

// Path, size and modification time: a changed, replaced or touched input changes its stamp.
void stamp_file(std::ostringstream& out, const fs::path& p) {
  std::error_code ec;
  const auto size = fs::file_size(p, ec);
  const auto mtime = fs::last_write_time(p, ec);
  out << p.string() << '|' << (ec ? 0 : size) << '|'
      << (ec ? 0 : static_cast<long long>(mtime.time_since_epoch().count())) << '\n';
}

void stamp_input(std::ostringstream& out, const fs::path& spec) {
  const std::string s = spec.string();
  const auto hash = s.rfind('#');
  const fs::path p =
      hash != std::string::npos && fs::is_directory(s.substr(0, hash)) ? fs::path(s.substr(0, hash)) : spec;
  if (fs::is_directory(p)) {
    std::vector<fs::path> files;
    for (const auto& e : fs::directory_iterator(p))
      if (e.is_regular_file()) files.push_back(e.path());
    std::sort(files.begin(), files.end());
    out << s << '\n';
    for (const auto& f : files) stamp_file(out, f);
  } else {
    stamp_file(out, p);
  }
}

std::string case_inputs(const io::CaseFiles& c) {
  std::ostringstream out;
  out << "case " << c.id << '\n';
  for (const auto& f : c.images) stamp_input(out, f);
  if (c.label) stamp_input(out, *c.label);
  return out.str();
}

std::string settings_text(const PrepareOptions& o) {
  std::ostringstream out;
  out.precision(17);
  out << kCaseFormat << " spacing=";
  if (o.spacing)
    out << (*o.spacing)[0] << ',' << (*o.spacing)[1] << ',' << (*o.spacing)[2];
  else
    out << "median";
  out << " norm=" << (o.normalisation ? to_string(*o.normalisation) : std::string("auto"))
      << " fg=" << o.foreground_samples_per_class << " isamples=" << o.intensity_samples_per_case
      << " chunk=" << o.chunk << " gzip=" << o.gzip_level << " seed=" << o.seed << '\n';
  return out.str();
}

// What a case file depends on beyond its own inputs.
std::string plan_parameters(const Plan& p) {
  std::ostringstream out;
  out.precision(17);
  out << "spacing " << p.target_spacing[0] << ',' << p.target_spacing[1] << ',' << p.target_spacing[2];
  for (const auto& n : p.normalisation)
    out << " norm " << to_string(n.scheme) << ' ' << n.lower << ' ' << n.upper << ' ' << n.mean << ' ' << n.std;
  out << " values";
  for (auto v : p.label_values) out << ' ' << v;
  out << " fg " << p.foreground_samples_per_class << '\n';
  return out.str();
}

std::string lower(std::string s) {
  std::transform(s.begin(), s.end(), s.begin(), [](unsigned char c) { return std::tolower(c); });
  return s;
}

at::Generator generator(std::uint64_t seed, const std::string& salt) {
  return at::make_generator<at::CPUGeneratorImpl>(seed ^ std::stoull(hash_hex(salt), nullptr, 16));
}

// Bounding box (x, y, z) of voxels that are non-zero in any channel; the whole grid if none is.
std::pair<Size3, Size3> nonzero_box(const Channels& channels) {
  torch::Tensor any = channels[0].data != 0;
  for (std::size_t c = 1; c < channels.size(); ++c) any = any | (channels[c].data != 0);
  const Size3 full = channels[0].size();
  if (!any.any().item<bool>()) return {{0, 0, 0}, full};
  Size3 begin{}, size{};
  for (int axis = 0; axis < 3; ++axis) {
    // Tensor dim 2 - axis holds ITK axis `axis`.
    const int dim = 2 - axis;
    std::vector<std::int64_t> others;
    for (int d = 0; d < 3; ++d)
      if (d != dim) others.push_back(d);
    const torch::Tensor hit = any.any(others[1]).any(others[0]);
    const torch::Tensor idx = torch::nonzero(hit).flatten();
    begin[axis] = idx.min().item<std::int64_t>();
    size[axis] = idx.max().item<std::int64_t>() - begin[axis] + 1;
  }
  return {begin, size};
}

torch::Tensor normalise(const torch::Tensor& data, const ChannelNormalisation& n) {
  torch::Tensor x = data.to(torch::kFloat32);
  if (n.scheme == Normalisation::CT) {
    const double std = std::max(n.std, 1e-8);
    return (x.clamp(n.lower, n.upper) - n.mean) / std;
  }
  const torch::Tensor mask = x != 0;
  const std::int64_t count = mask.sum().item<std::int64_t>();
  if (count == 0) return x;
  const torch::Tensor values = x.masked_select(mask).to(torch::kFloat64);
  const double mean = values.mean().item<double>();
  const double std = count > 1 ? values.std().item<double>() : 0.0;
  return torch::where(mask, (x - mean) / std::max(std, 1e-8), torch::zeros_like(x));
}

bool same_spacing(const std::array<double, 3>& a, const std::array<double, 3>& b) {
  for (int i = 0; i < 3; ++i)
    if (std::abs(a[i] - b[i]) > 1e-6 * std::max(std::abs(a[i]), std::abs(b[i]))) return false;
  return true;
}

struct Resampled {
  torch::Tensor image;  // [C, D, H, W] float32
  Volume label;         // class indices (when a label was given)
  Geometry geometry;
};

// Crop, normalise, resample: the steps shared by training cases and new images.
Resampled preprocess_volumes(const Plan& plan, const Channels& channels, const Volume* class_map, Size3* crop_begin,
                             Size3* crop_size) {
  auto [begin, size] =
      plan.crop_to_nonzero ? nonzero_box(channels) : std::pair<Size3, Size3>{{0, 0, 0}, channels[0].size()};
  if (crop_begin) *crop_begin = begin;
  if (crop_size) *crop_size = size;
  Resampled out;
  const Volume first = crop(channels[0], begin, size);
  Geometry target = first.geometry;
  target.spacing = plan.target_spacing;
  const bool resample = !same_spacing(first.geometry.spacing, plan.target_spacing);
  const Size3 target_size = resample ? io::resampled_size(size, first.geometry.spacing, plan.target_spacing) : size;
  std::vector<torch::Tensor> parts;
  for (std::size_t c = 0; c < channels.size(); ++c) {
    Volume v = crop(channels[c], begin, size);
    v.data = normalise(v.data, plan.normalisation.at(c));
    v.pixel_type = PixelType::Float32;
    if (resample) v = io::resample_to_grid(v, target_size, target, io::Interpolation::Linear);
    parts.push_back(v.data);
  }
  out.image = torch::stack(parts).contiguous();
  out.geometry = resample ? target : first.geometry;
  if (class_map != nullptr) {
    Volume l = crop(*class_map, begin, size);
    out.label = resample ? io::resample_to_grid(l, target_size, target, io::Interpolation::Nearest) : l;
  }
  return out;
}

// Moves a volume that lies on a flipped or transposed copy of the reference grid (which the checks
// accept) onto the reference grid; nearest sampling at coinciding centres changes no value.
Volume align_to(const Volume& v, const Volume& reference) {
  if (grid_difference(reference, v).empty()) return v;
  return io::resample_to_grid(v, reference.size(), reference.geometry, io::Interpolation::Nearest);
}

void align_case(Channels& image, Volume* label) {
  for (std::size_t c = 1; c < image.size(); ++c) image[c] = align_to(image[c], image[0]);
  if (label != nullptr) *label = align_to(*label, image[0]);
}

// Dataset label values -> class indices; values the plan does not know are a DataError.
Volume to_class_map(const Plan& plan, const Volume& label, const std::string& where) {
  const torch::Tensor values = torch::tensor(plan.label_values, torch::kInt64);
  const torch::Tensor l = label.data.to(torch::kInt64).contiguous();
  torch::Tensor idx = torch::searchsorted(values, l).clamp_max(values.size(0) - 1);
  const torch::Tensor known = values.index_select(0, idx.flatten()).view_as(l) == l;
  if (!known.all().item<bool>()) {
    const torch::Tensor bad = std::get<0>(torch::_unique(l.masked_select(~known), true, false));
    throw DataError(where + ": label value " + std::to_string(bad[0].item<std::int64_t>()) +
                    " is not one of the plan's classes");
  }
  Volume out = label;
  out.data = idx.to(torch::kInt16);
  out.pixel_type = PixelType::Int16;
  return out;
}

// Up to `per_class` (z, y, x) voxels of each foreground class, uniformly sampled; CSR offsets.
std::pair<torch::Tensor, std::vector<std::int64_t>> foreground_locations(const torch::Tensor& classes, int k,
                                                                         std::int64_t per_class, at::Generator gen) {
  std::vector<torch::Tensor> parts;
  std::vector<std::int64_t> offsets{0, 0};
  for (int c = 1; c < k; ++c) {
    torch::Tensor loc = torch::nonzero(classes == c);
    if (loc.size(0) > per_class) {
      const torch::Tensor pick =
          std::get<0>(torch::randperm(loc.size(0), gen, torch::kLong).slice(0, 0, per_class).sort());
      loc = loc.index_select(0, pick);
    }
    parts.push_back(loc.to(torch::kInt32));
    offsets.push_back(offsets.back() + loc.size(0));
  }
  torch::Tensor all = parts.empty() ? torch::zeros({0, 3}, torch::kInt32) : torch::cat(parts);
  return {all.contiguous(), offsets};
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  const std::size_t n = v.size();
  return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

void write_case(const Plan& plan, const PlanCase& pc, const Resampled& r, const std::string& fingerprint,
                const PrepareOptions& o) {
  const int k = plan.num_classes();
  io::H5Writer w(plan.case_file(pc.id));
  const std::int64_t ch = o.chunk;
  w.write("image", r.image, {{1, ch, ch, ch}, o.gzip_level});
  w.set_geometry("image", r.geometry);
  const torch::Tensor label = r.label.data.to(k > 255 ? torch::kInt16 : torch::kUInt8);
  w.write("label", label, {{ch, ch, ch}, o.gzip_level});
  w.set_geometry("label", r.geometry);
  auto [loc, offsets] =
      foreground_locations(r.label.data, k, plan.foreground_samples_per_class, generator(o.seed, "fg " + pc.id));
  w.write("fg_locations", loc);
  w.write("fg_offsets", torch::tensor(offsets, torch::kInt64));
  w.set_attribute("/", "case_id", pc.id);
  w.set_attribute("/", "fingerprint", fingerprint);
  w.commit();
}

}  // namespace

namespace {

// A case's line in its pass: "[3/40] case_003".
std::string counted(const io::Dataset& dataset, const io::CaseFiles& c) {
  const auto i = static_cast<std::size_t>(&c - dataset.cases.data()) + 1;
  return "[" + std::to_string(i) + "/" + std::to_string(dataset.cases.size()) + "] " + c.id;
}

// Is channel `ch` (named `name`) normalised as CT under these options?
bool is_ct(const PrepareOptions& o, const std::string& name) {
  return o.normalisation ? *o.normalisation == Normalisation::CT : lower(name) == "ct";
}

CtIntensity ct_intensity(const std::vector<torch::Tensor>& samples) {
  const torch::Tensor all = std::get<0>(torch::cat(samples).sort());
  const auto at = [&](double q) {
    const auto i = static_cast<std::int64_t>(std::llround(q * static_cast<double>(all.numel() - 1)));
    return all[i].item<double>();
  };
  return {at(0.005), at(0.995), all.mean().item<double>(), all.numel() > 1 ? all.std().item<double>() : 1.0};
}

}  // namespace

DatasetFingerprint fingerprint_dataset(const io::Dataset& dataset, const PrepareOptions& o) {
  DatasetFingerprint f;
  std::vector<std::vector<torch::Tensor>> ct_samples;  // [channel][case]
  std::vector<io::Problem> problems;
  for (const auto& c : dataset.cases) {
    Channels image;
    std::vector<fs::path> files;
    std::optional<Volume> label;
    try {
      for (const auto& file : c.images) {
        Channels part = io::read_case_image(dataset, file);
        for (auto& v : part) {
          image.push_back(std::move(v));
          files.push_back(file);
        }
      }
      if (!c.label)
        throw DataError((c.images.empty() ? c.id : c.images.front().string()) + ": case '" + c.id +
                        "' has no label; expected a label map");
      label = io::read_case_label(dataset, *c.label);
    } catch (const Error& e) {
      problems.push_back({fs::path(), e.what()});
      continue;
    }
    auto found = io::check_case(dataset, c, image, files, &*label, o.check);
    if (f.channels == 0) f.channels = image.size();
    if (image.size() != f.channels)
      found.push_back({files.front(), "case '" + c.id + "' has " + std::to_string(image.size()) +
                                          " channels, other cases " + std::to_string(f.channels)});
    if (!found.empty()) {
      problems.insert(problems.end(), found.begin(), found.end());
      continue;
    }
    align_case(image, &*label);
    f.case_ids.push_back(c.id);
    f.spacings.push_back(image[0].geometry.spacing);
    const torch::Tensor u = std::get<0>(torch::_unique(label->data.to(torch::kInt64).flatten(), true, false));
    for (std::int64_t i = 0; i < u.numel(); ++i) f.label_values.insert(u[i].item<std::int64_t>());
    ct_samples.resize(f.channels);
    const torch::Tensor fg = label->data != 0;
    for (std::size_t ch = 0; ch < f.channels; ++ch) {
      if (!is_ct(o, ch < dataset.channel_names.size() ? dataset.channel_names[ch] : "")) continue;
      torch::Tensor v = image[ch].data.to(torch::kFloat64).masked_select(fg);
      if (v.numel() > o.intensity_samples_per_case)
        v = v.index_select(0, torch::randperm(v.numel(), generator(o.seed, "ct " + c.id), torch::kLong)
                                  .slice(0, 0, o.intensity_samples_per_case));
      ct_samples[ch].push_back(v);
    }
    if (o.progress) o.progress(counted(dataset, c) + ": checked");
  }
  if (!problems.empty()) {
    std::string msg = dataset.manifest.string() + ": " + std::to_string(problems.size()) +
                      " problem(s), run 'voxfit data check' for all of them; first: ";
    const auto& p = problems.front();
    msg += p.file.empty() ? p.message : io::format_problem(p);
    throw DataError(msg);
  }
  f.ct.resize(f.channels);
  for (std::size_t ch = 0; ch < f.channels; ++ch)
    if (!ct_samples[ch].empty()) f.ct[ch] = ct_intensity(ct_samples[ch]);
  return f;
}

nlohmann::json to_json(const DatasetFingerprint& f) {
  nlohmann::json cases = nlohmann::json::array();
  for (std::size_t i = 0; i < f.case_ids.size(); ++i)
    cases.push_back({{"id", f.case_ids[i]}, {"spacing_xyz_mm", f.spacings[i]}});
  nlohmann::json ct = nlohmann::json::array();
  for (const auto& c : f.ct)
    ct.push_back(c ? nlohmann::json{{"percentile_00_5", c->lower},
                                    {"percentile_99_5", c->upper},
                                    {"mean", c->mean},
                                    {"std", c->std}}
                   : nlohmann::json());
  return {
      {"channels", f.channels}, {"cases", cases}, {"label_values", f.label_values}, {"foreground_intensity_ct", ct}};
}

Plan plan_dataset(const io::Dataset& dataset, const DatasetFingerprint& f, const PrepareOptions& o,
                  const fs::path& cache_dir) {
  Plan plan;
  plan.cache_dir = cache_dir;
  plan.dataset_name = dataset.name;
  plan.foreground_samples_per_class = o.foreground_samples_per_class;
  plan.channel_names = dataset.channel_names;
  if (plan.channel_names.size() != f.channels) {
    plan.channel_names.clear();
    for (std::size_t ch = 0; ch < f.channels; ++ch) plan.channel_names.push_back("channel" + std::to_string(ch));
  }
  for (std::size_t ch = 0; ch < f.channels; ++ch) {
    ChannelNormalisation n;
    n.scheme = is_ct(o, plan.channel_names[ch]) ? Normalisation::CT : Normalisation::ZScore;
    if (n.scheme == Normalisation::CT) {
      if (!f.ct[ch]) throw DataError(dataset.manifest.string() + ": no foreground voxels for CT statistics");
      n.lower = f.ct[ch]->lower;
      n.upper = f.ct[ch]->upper;
      n.mean = f.ct[ch]->mean;
      n.std = f.ct[ch]->std;
    }
    plan.normalisation.push_back(n);
  }
  for (int axis = 0; axis < 3; ++axis) {
    std::vector<double> s;
    for (const auto& sp : f.spacings) s.push_back(sp[axis]);
    plan.median_spacing[axis] = median(s);
  }
  plan.target_spacing = o.spacing ? *o.spacing : plan.median_spacing;
  std::set<std::int64_t> values = f.label_values;
  for (const auto& [v, name] : dataset.labels) values.insert(v);
  values.insert(0);
  for (std::int64_t v : values) {
    plan.label_values.push_back(v);
    const auto it = dataset.labels.find(v);
    plan.class_names.push_back(it != dataset.labels.end() ? it->second
                                                          : (v == 0 ? "background" : "label_" + std::to_string(v)));
  }
  return plan;
}

void write_cases(const io::Dataset& dataset, Plan& plan, const PrepareOptions& o, PrepareResult& result) {
  fs::create_directories(plan.cache_dir / "cases");
  const std::string params = plan_parameters(plan) + settings_text(o);
  for (const auto& c : dataset.cases) {
    PlanCase pc;
    pc.id = c.id;
    for (const auto& f : c.images) pc.source_images.push_back(f.string());
    pc.source_label = c.label->string();
    const std::string case_fp = hash_hex(case_inputs(c) + params);
    const fs::path file = plan.case_file(c.id);
    if (!o.force && fs::exists(file)) {
      try {
        const io::H5Reader r(file);
        if (r.string_attribute("/", "fingerprint") == case_fp) {
          const auto shape = r.shape("label");
          pc.shape = {shape.at(0), shape.at(1), shape.at(2)};
          plan.cases.push_back(std::move(pc));
          ++result.cases_reused;
          if (o.progress) o.progress(counted(dataset, c) + ": reused");
          continue;
        }
      } catch (const Error&) {
        // Unreadable: rewritten below.
      }
    }
    Channels image = io::read_case_channels(dataset, c);
    Volume label = io::read_case_label(dataset, *c.label);
    align_case(image, &label);
    const Volume classes = to_class_map(plan, label, c.label->string());
    const Resampled r = preprocess_volumes(plan, image, &classes, nullptr, nullptr);
    pc.shape = {r.image.size(1), r.image.size(2), r.image.size(3)};
    write_case(plan, pc, r, case_fp, o);
    if (o.progress) o.progress(counted(dataset, c) + ": written " + shape_text(pc.shape) + " (D x H x W)");
    plan.cases.push_back(std::move(pc));
    ++result.cases_written;
  }
  std::set<std::string> keep;
  for (const auto& c : plan.cases) keep.insert(c.id + ".h5");
  for (const auto& e : fs::directory_iterator(plan.cache_dir / "cases"))
    if (e.path().extension() == ".h5" && !keep.count(e.path().filename().string())) fs::remove(e.path());
}

PrepareResult prepare_dataset(const io::Dataset& dataset, const fs::path& cache_dir, const PrepareOptions& o) {
  if (o.spacing)
    for (double s : *o.spacing)
      if (!(s > 0)) throw ConfigError("spacing: expected three positive numbers (mm)");
  if (o.chunk < 1) throw ConfigError("chunk: expected a positive voxel count");
  if (dataset.cases.empty()) throw DataError(dataset.manifest.string() + ": no cases to prepare");

  std::ostringstream inputs;
  inputs << settings_text(o);
  stamp_input(inputs, dataset.manifest);
  if (dataset.splits) stamp_input(inputs, dataset.splits->file);
  for (const auto& c : dataset.cases) inputs << case_inputs(c);
  const std::string fingerprint = hash_hex(inputs.str());

  PrepareResult result;
  if (!o.force && fs::exists(cache_dir / "plan.json")) {
    try {
      Plan old = load_plan(cache_dir);
      bool complete = old.fingerprint == fingerprint;
      for (const auto& c : old.cases) complete = complete && fs::exists(old.case_file(c.id));
      if (complete) {
        result.plan = std::move(old);
        result.up_to_date = true;
        result.cases_reused = result.plan.cases.size();
        if (o.progress) o.progress("cache is up to date (" + std::to_string(result.cases_reused) + " cases)");
        return result;
      }
    } catch (const Error&) {
      // An unreadable old plan is simply rebuilt.
    }
  }
  // nnU-Net's stages, each with its output on disk: the cases, then fingerprint.json and plan.json
  // (plan.json last: its presence with this fingerprint is what makes the cache up to date).
  const DatasetFingerprint f = fingerprint_dataset(dataset, o);
  Plan plan = plan_dataset(dataset, f, o, cache_dir);
  plan.fingerprint = fingerprint;
  if (dataset.splits) {
    DeclaredSplits declared{dataset.splits->source, dataset.splits->file.string(), {}};
    for (const auto& fold : dataset.splits->folds) declared.folds.push_back({fold.train, fold.validation});
    plan.declared_splits = std::move(declared);
  }
  write_cases(dataset, plan, o, result);
  // The survey and the plan go to disk once every case is in place: a prepare that fails midway
  // (a full disk) leaves the earlier cache's files as they were.
  write_file_atomic(cache_dir / "fingerprint.json", to_json(f).dump(2) + "\n");
  save_plan(plan);
  result.plan = std::move(plan);
  return result;
}

PreprocessedCase read_case(const Plan& plan, const std::string& id) {
  const io::H5Reader r(plan.case_file(id));
  PreprocessedCase c;
  c.id = id;
  c.image = r.read("image").to(torch::kFloat32);
  c.label = r.read("label").to(torch::kInt64);
  c.geometry = r.geometry("image").value_or(Geometry{});
  if (c.image.dim() != 4 || c.label.dim() != 3 || c.image.sizes().slice(1) != c.label.sizes())
    throw IoError(plan.case_file(id).string() + ": expected image [C, D, H, W] and label [D, H, W] on one grid");
  return c;
}

InferenceInput preprocess_for_inference(const Plan& plan, const Channels& channels) {
  if (static_cast<int>(channels.size()) != plan.channels())
    throw DataError("the image has " + std::to_string(channels.size()) + " channels, the plan expects " +
                    std::to_string(plan.channels()));
  // The checks training images get (grids, spacing, NaN/Inf): a bad input is refused, not segmented
  // into garbage.
  const auto problems = io::check_case(io::Dataset{}, io::CaseFiles{}, channels, {}, nullptr);
  if (!problems.empty()) throw DataError(problems.front().message);
  Channels aligned = channels;
  align_case(aligned, nullptr);
  InferenceInput in;
  in.original_size = channels[0].size();
  in.original_geometry = channels[0].geometry;
  const Resampled r = preprocess_volumes(plan, aligned, nullptr, &in.crop_begin, &in.crop_size);
  in.image = r.image;
  in.geometry = r.geometry;
  return in;
}

Volume restore_prediction(const Plan& plan, const InferenceInput& input, const torch::Tensor& class_map) {
  const torch::Tensor cm = class_map.to(torch::kCPU).to(torch::kInt64).contiguous();
  if (cm.dim() != 3 || cm.size(0) != input.image.size(1) || cm.size(1) != input.image.size(2) ||
      cm.size(2) != input.image.size(3))
    throw DataError("prediction shape " + std::string(c10::str(cm.sizes())) +
                    " does not match the preprocessed image's grid " + c10::str(input.image.sizes().slice(1)));
  Volume pred;
  pred.data = cm;
  pred.geometry = input.geometry;
  pred.pixel_type = PixelType::Int64;
  Geometry cropped = input.original_geometry;
  cropped.origin = input.original_geometry.index_to_point({static_cast<double>(input.crop_begin[0]),
                                                           static_cast<double>(input.crop_begin[1]),
                                                           static_cast<double>(input.crop_begin[2])});
  const Size3 pred_size = pred.size();
  const bool same =
      pred_size == input.crop_size && grid_difference(pred_size, input.geometry, input.crop_size, cropped).empty();
  const Volume back = same ? pred : io::resample_to_grid(pred, input.crop_size, cropped, io::Interpolation::Nearest);
  const torch::Tensor values = torch::tensor(plan.label_values, torch::kInt64);
  const torch::Tensor mapped =
      values.index_select(0, back.data.to(torch::kInt64).clamp(0, values.size(0) - 1).flatten()).view_as(back.data);
  const std::int64_t lo = values.min().item<std::int64_t>(), hi = values.max().item<std::int64_t>();
  Volume out;
  out.pixel_type =
      lo >= 0 && hi <= 255 ? PixelType::UInt8 : (lo >= -32768 && hi <= 32767 ? PixelType::Int16 : PixelType::Int32);
  out.geometry = input.original_geometry;
  const Size3 full = input.original_size;
  out.data = torch::zeros({full[2], full[1], full[0]}, torch::TensorOptions().dtype(tensor_dtype(out.pixel_type)));
  const Size3 b = input.crop_begin, s = input.crop_size;
  out.data.slice(0, b[2], b[2] + s[2]).slice(1, b[1], b[1] + s[1]).slice(2, b[0], b[0] + s[0]).copy_(mapped);
  return out;
}

}  // namespace voxfit::data
