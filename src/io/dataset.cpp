#include "voxfit/io/dataset.h"

#include <nlohmann/json.hpp>

#include <algorithm>
#include <cstdio>
#include <fstream>
#include <set>

#include "voxfit/core/error.h"
#include "voxfit/core/units.h"
#include "voxfit/io/volume_io.h"

namespace voxfit::io {

namespace {

using json = nlohmann::json;

bool is_h5_file(const fs::path& p) {
  const std::string e = p.extension().string();
  return e == ".h5" || e == ".hdf5" || e == ".H5";
}

// "case_01.nii.gz" -> "case_01"; a DICOM folder keeps its name.
std::string stem_of(const fs::path& p) {
  std::string name = p.filename().string();
  if (name.empty()) name = p.parent_path().filename().string();
  if (is_volume_file(p)) return name.substr(0, name.size() - volume_extension(p).size());
  if (is_h5_file(p)) return p.stem().string();
  const auto hash = name.find('#');
  return hash == std::string::npos ? name : name.substr(0, hash);
}

json parse_manifest(const fs::path& manifest) {
  std::ifstream in(manifest);
  if (!in) throw IoError(manifest.string() + ": cannot open");
  try {
    return json::parse(in);
  } catch (const json::exception& e) {
    throw ConfigError(manifest.string() + ": not valid JSON (" + e.what() + ")");
  }
}

fs::path resolve(const fs::path& root, const std::string& entry) {
  const fs::path p(entry);
  return (p.is_absolute() ? p : root / p).lexically_normal();
}

std::vector<std::string> channel_list(const json& j, const char* key, const fs::path& manifest) {
  std::vector<std::string> out;
  if (!j.contains(key)) return out;
  const json& m = j.at(key);
  if (!m.is_object()) throw ConfigError(manifest.string() + ": '" + key + "' must be an object {\"0\": \"CT\", ...}");
  std::map<int, std::string> byindex;
  for (const auto& [k, v] : m.items()) {
    int index = -1;
    try {
      index = std::stoi(k);
    } catch (const std::exception&) {
    }
    if (index < 0 || !v.is_string())
      throw ConfigError(manifest.string() + ": '" + key + "' entry '" + k + "' must map a channel index to a name");
    byindex[index] = v.get<std::string>();
  }
  int expect = 0;
  for (const auto& [i, name] : byindex) {
    if (i != expect++)
      throw ConfigError(manifest.string() + ": '" + key + "' must number channels 0, 1, 2, ... without gaps");
    out.push_back(name);
  }
  return out;
}

void unique_ids(std::vector<CaseFiles>& cases) {
  std::map<std::string, int> seen;
  for (auto& c : cases) {
    const int n = seen[c.id]++;
    if (n > 0) c.id += "_" + std::to_string(n);
  }
}

// The {image, label} entries of an MSD list: "training", or a MONAI datalist's "validation".
std::vector<CaseFiles> msd_cases(const json& j, const char* key, const Dataset& d) {
  const json& list = j.at(key);
  if (!list.is_array()) throw ConfigError(d.manifest.string() + ": '" + key + "' must be a list of {image, label}");
  std::vector<CaseFiles> out;
  for (std::size_t i = 0; i < list.size(); ++i) {
    const json& e = list[i];
    const std::string where = d.manifest.string() + ": " + key + "[" + std::to_string(i) + "]";
    if (!e.is_object() || !e.contains("image"))
      throw ConfigError(where + ": expected an object with 'image' (and 'label')");
    CaseFiles c;
    const json& image = e["image"];
    if (image.is_string()) {
      c.images.push_back(resolve(d.root, image.get<std::string>()));
    } else if (image.is_array() && !image.empty()) {
      for (const auto& s : image) {
        if (!s.is_string()) throw ConfigError(where + ": 'image' list entries must be paths");
        c.images.push_back(resolve(d.root, s.get<std::string>()));
      }
    } else {
      throw ConfigError(where + ": 'image' must be a path or a list of paths");
    }
    if (e.contains("label")) {
      if (!e["label"].is_string()) throw ConfigError(where + ": 'label' must be a path");
      c.label = resolve(d.root, e["label"].get<std::string>());
    }
    c.id = stem_of(c.label ? *c.label : c.images.front());
    out.push_back(std::move(c));
  }
  return out;
}

Dataset load_msd(const json& j, Dataset d) {
  d.layout = DatasetLayout::Msd;
  d.channel_names = channel_list(j, "modality", d.manifest);
  if (j.contains("labels")) {
    if (!j["labels"].is_object())
      throw ConfigError(d.manifest.string() + ": 'labels' must be an object {\"0\": \"background\", ...}");
    for (const auto& [k, v] : j["labels"].items()) {
      const auto value = to_integer(k);
      if (!value) throw ConfigError(d.manifest.string() + ": 'labels' key '" + k + "' must be an integer label value");
      d.labels[*value] = v.is_string() ? v.get<std::string>() : v.dump();
    }
  }
  std::vector<CaseFiles> training = msd_cases(j, "training", d);
  std::vector<CaseFiles> validation;
  if (j.contains("validation")) validation = msd_cases(j, "validation", d);
  d.cases = std::move(training);
  const std::size_t n_train = d.cases.size();
  for (auto& c : validation) d.cases.push_back(std::move(c));
  unique_ids(d.cases);
  if (n_train < d.cases.size()) {
    DeclaredFold fold;
    for (std::size_t i = 0; i < d.cases.size(); ++i)
      (i < n_train ? fold.train : fold.validation).push_back(d.cases[i].id);
    d.splits = DeclaredSplits{"validation list", d.manifest, {std::move(fold)}};
  }
  return d;
}

Dataset load_nnunet(const json& j, Dataset d) {
  d.layout = DatasetLayout::NnUNetV2;
  d.channel_names = channel_list(j, "channel_names", d.manifest);
  if (d.channel_names.empty())
    throw ConfigError(d.manifest.string() + ": 'channel_names' is required ({\"0\": \"CT\"})");
  if (!j.contains("file_ending") || !j["file_ending"].is_string())
    throw ConfigError(d.manifest.string() + ": 'file_ending' is required (e.g. \".nii.gz\")");
  const std::string ending = j["file_ending"].get<std::string>();
  if (j.contains("labels")) {
    if (!j["labels"].is_object())
      throw ConfigError(d.manifest.string() + ": 'labels' must be an object {\"background\": 0, ...}");
    for (const auto& [name, v] : j["labels"].items()) {
      if (!v.is_number_integer())
        throw ConfigError(d.manifest.string() + ": label '" + name +
                          "' must be one integer value (region-based labels are not supported)");
      d.labels[v.get<std::int64_t>()] = name;
    }
  }
  const fs::path images = d.root / "imagesTr", labels = d.root / "labelsTr";
  const auto ends_with = [&](const std::string& s) {
    return s.size() > ending.size() && s.compare(s.size() - ending.size(), ending.size(), ending) == 0;
  };
  std::set<std::string> ids;
  if (fs::is_directory(labels))
    for (const auto& e : fs::directory_iterator(labels)) {
      const std::string n = e.path().filename().string();
      if (ends_with(n)) ids.insert(n.substr(0, n.size() - ending.size()));
    }
  if (fs::is_directory(images))
    for (const auto& e : fs::directory_iterator(images)) {
      const std::string n = e.path().filename().string();
      // CASE_0000.ext: the channel suffix is '_' and four digits.
      if (!ends_with(n) || n.size() < ending.size() + 5) continue;
      const std::string base = n.substr(0, n.size() - ending.size());
      const std::string suffix = base.substr(base.size() - 5);
      if (suffix[0] == '_' && std::all_of(suffix.begin() + 1, suffix.end(), ::isdigit))
        ids.insert(base.substr(0, base.size() - 5));
    }
  if (ids.empty())
    throw IoError(d.root.string() + ": no cases in imagesTr/ or labelsTr/ (expected CASE_0000" + ending + " and CASE" +
                  ending + ")");
  for (const std::string& id : ids) {
    CaseFiles c;
    c.id = id;
    for (std::size_t ch = 0; ch < d.channel_names.size(); ++ch) {
      char suffix[32];
      std::snprintf(suffix, sizeof suffix, "_%04zu", ch);
      c.images.push_back(images / (id + suffix + ending));
    }
    c.label = labels / (id + ending);
    d.cases.push_back(std::move(c));
  }
  return d;
}

std::vector<fs::path> list_files(const fs::path& dir, bool (*keep)(const fs::path&)) {
  std::vector<fs::path> out;
  for (const auto& e : fs::directory_iterator(dir))
    if (e.is_regular_file() && keep(e.path())) out.push_back(e.path());
  std::sort(out.begin(), out.end());
  return out;
}

Dataset load_folder(Dataset d) {
  d.layout = DatasetLayout::Folder;
  d.name = d.root.filename().string();
  for (const auto& [img_dir, lbl_dir] :
       {std::pair<const char*, const char*>{"images", "labels"}, {"imagesTr", "labelsTr"}}) {
    const fs::path images = d.root / img_dir, labels = d.root / lbl_dir;
    if (!fs::is_directory(images) || !fs::is_directory(labels)) continue;
    std::map<std::string, fs::path> label_by_stem;
    for (const auto& p : list_files(labels, is_volume_file)) label_by_stem[stem_of(p)] = p;
    for (const auto& p : list_files(images, is_volume_file)) {
      CaseFiles c;
      c.id = stem_of(p);
      c.images = {p};
      const auto it = label_by_stem.find(c.id);
      c.label = it != label_by_stem.end() ? it->second : labels / p.filename();
      d.cases.push_back(std::move(c));
    }
    if (!d.cases.empty()) return d;
  }
  const auto volumes = list_files(d.root, is_volume_file);
  std::map<std::string, fs::path> labels;
  std::vector<fs::path> images;
  for (const auto& p : volumes) {
    const std::string s = stem_of(p);
    bool is_label = false;
    for (const std::string suffix : {"_label", "_seg"})
      if (s.size() > suffix.size() && s.compare(s.size() - suffix.size(), suffix.size(), suffix) == 0) {
        labels[s.substr(0, s.size() - suffix.size())] = p;
        is_label = true;
      }
    if (!is_label) images.push_back(p);
  }
  for (const auto& p : images) {
    CaseFiles c;
    c.id = stem_of(p);
    c.images = {p};
    const auto it = labels.find(c.id);
    c.label = it != labels.end() ? it->second : d.root / (c.id + "_label" + volume_extension(p));
    d.cases.push_back(std::move(c));
  }
  if (!d.cases.empty()) return d;
  for (const auto& p : list_files(d.root, is_h5_file)) {
    CaseFiles c;
    c.id = stem_of(p);
    c.images = {p};
    c.label = p;
    d.cases.push_back(std::move(c));
  }
  if (!d.cases.empty()) {
    d.layout = DatasetLayout::Hdf5Folder;
    return d;
  }
  throw IoError(d.root.string() +
                ": no dataset found (expected dataset.json, images/ + labels/, NAME.nii.gz + "
                "NAME_label.nii.gz pairs, or HDF5 case files)");
}

}  // namespace

std::string to_string(DatasetLayout layout) {
  switch (layout) {
    case DatasetLayout::Msd:
      return "MSD";
    case DatasetLayout::NnUNetV2:
      return "nnU-Net v2";
    case DatasetLayout::Folder:
      return "folder";
    case DatasetLayout::Hdf5Folder:
      return "HDF5 folder";
  }
  return "unknown";
}

namespace {

Dataset load_layout(const fs::path& path, const DatasetOptions& options) {
  Dataset d;
  d.h5_names = options.h5_names;
  if (!fs::exists(path)) throw IoError(path.string() + ": dataset not found");
  if (fs::is_regular_file(path)) {
    d.manifest = path;
    d.root = path.parent_path().empty() ? fs::path(".") : path.parent_path();
  } else {
    d.root = path;
    d.manifest = path / "dataset.json";
    if (!fs::exists(d.manifest)) {
      d.manifest = path;
      return load_folder(std::move(d));
    }
  }
  const json j = parse_manifest(d.manifest);
  if (!j.is_object()) throw ConfigError(d.manifest.string() + ": expected a JSON object");
  if (j.contains("name") && !j["name"].is_string())
    throw ConfigError(d.manifest.string() + ": 'name' must be a string");
  d.name = j.value("name", d.root.filename().string());
  try {
    if (j.contains("training")) return load_msd(j, std::move(d));
    if (j.contains("channel_names") || j.contains("file_ending")) return load_nnunet(j, std::move(d));
  } catch (const json::exception& e) {
    throw ConfigError(d.manifest.string() + ": " + e.what());
  }
  throw ConfigError(d.manifest.string() +
                    ": neither an MSD manifest ('training') nor an nnU-Net v2 one ('channel_names', "
                    "'file_ending')");
}

std::vector<std::string> id_list(const json& j, const fs::path& file, const std::string& where) {
  if (!j.is_array()) throw ConfigError(file.string() + ": " + where + ": expected a list of case ids");
  std::vector<std::string> out;
  for (const auto& id : j) {
    if (!id.is_string())
      throw ConfigError(file.string() + ": " + where + ": case ids must be strings, got " + id.dump());
    out.push_back(id.get<std::string>());
  }
  return out;
}

}  // namespace

Dataset load_dataset(const fs::path& path, const DatasetOptions& options) {
  Dataset d = load_layout(path, options);
  const fs::path splits_final = d.root / "splits_final.json";
  if (!d.splits && fs::is_regular_file(splits_final)) {
    std::vector<std::string> ids;
    for (const auto& c : d.cases) ids.push_back(c.id);
    d.splits = read_splits_final(splits_final, ids);
  }
  return d;
}

DeclaredSplits read_splits_final(const fs::path& file, const std::vector<std::string>& case_ids) {
  const json j = parse_manifest(file);
  if (!j.is_array() || j.empty())
    throw ConfigError(file.string() + ": expected a list of folds [{\"train\": [ids], \"val\": [ids]}, ...]");
  const std::set<std::string> known(case_ids.begin(), case_ids.end());
  DeclaredSplits out{"splits_final.json", file, {}};
  for (std::size_t k = 0; k < j.size(); ++k) {
    const std::string where = "fold " + std::to_string(k);
    if (!j[k].is_object() || !j[k].contains("train") || !j[k].contains("val"))
      throw ConfigError(file.string() + ": " + where + ": expected an object with 'train' and 'val' lists");
    DeclaredFold fold{id_list(j[k]["train"], file, where + " 'train'"), id_list(j[k]["val"], file, where + " 'val'")};
    for (const auto* ids : {&fold.train, &fold.validation})
      for (const auto& id : *ids)
        if (!known.count(id))
          throw ConfigError(file.string() + ": " + where + ": case '" + id + "' is not a case of the dataset (" +
                            std::to_string(known.size()) + " cases, e.g. '" +
                            (known.empty() ? std::string() : *known.begin()) + "')");
    out.folds.push_back(std::move(fold));
  }
  return out;
}

std::vector<CaseFiles> image_folder_cases(const fs::path& folder) {
  const auto files = list_files(folder, is_volume_file);
  // CASE_NNNN: the channel number of each file of CASE (nnU-Net's naming).
  std::map<std::string, std::map<int, fs::path>> channels;
  const auto channel_of = [](const std::string& stem) {
    if (stem.size() < 6 || stem[stem.size() - 5] != '_') return -1;
    const std::string digits = stem.substr(stem.size() - 4);
    return std::all_of(digits.begin(), digits.end(), ::isdigit) ? std::stoi(digits) : -1;
  };
  for (const auto& f : files) {
    const std::string stem = stem_of(f);
    const int ch = channel_of(stem);
    if (ch >= 0) channels[stem.substr(0, stem.size() - 5)][ch] = f;
  }
  std::vector<CaseFiles> out;
  for (const auto& f : files) {
    const std::string stem = stem_of(f);
    const int ch = channel_of(stem);
    const std::string base = ch >= 0 ? stem.substr(0, stem.size() - 5) : stem;
    if (ch < 0 || !channels[base].count(0)) {
      out.push_back(CaseFiles{stem, {f}, std::nullopt});
      continue;
    }
    if (ch != 0) continue;  // the case is made at its _0000 file
    CaseFiles c{base, {}, std::nullopt};
    int expect = 0;
    for (const auto& [n, file] : channels[base]) {
      if (n != expect) {
        char missing[16];
        std::snprintf(missing, sizeof missing, "_%04d", expect);
        throw DataError(file.string() + ": case '" + base + "' has no channel " + std::to_string(expect) + " (" + base +
                        missing + volume_extension(file) + ")");
      }
      c.images.push_back(file);
      ++expect;
    }
    out.push_back(std::move(c));
  }
  return out;
}

Channels read_case_image(const Dataset& dataset, const fs::path& image) {
  if (is_h5_file(image)) {
    survive_h5_case(image, dataset.h5_names);
    return read_h5_channels(image, dataset.h5_names.image);
  }
  return read_channels(image);
}

Volume read_case_label(const Dataset& dataset, const fs::path& label) {
  if (is_h5_file(label)) {
    survive_h5_case(label, dataset.h5_names);
    return read_h5_volume(label, dataset.h5_names.label);
  }
  return read_volume(label);
}

Channels read_case_channels(const Dataset& dataset, const CaseFiles& c) {
  Channels out;
  for (const auto& image : c.images) {
    Channels part = read_case_image(dataset, image);
    for (auto& v : part) out.push_back(std::move(v));
  }
  return out;
}

}  // namespace voxfit::io
