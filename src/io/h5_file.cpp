#include "voxfit/io/h5_file.h"

#include <H5Cpp.h>

#include <mutex>

#include "voxfit/core/atomic_file.h"
#include "voxfit/core/error.h"

namespace voxfit::io {

namespace {

std::recursive_mutex& h5_mutex() {
  static std::recursive_mutex m;
  return m;
}

// Errors become IoErrors; HDF5's own stack dump on stderr would only repeat them.
std::unique_lock<std::recursive_mutex> h5_lock() {
  std::unique_lock<std::recursive_mutex> lock(h5_mutex());
  static const bool quiet = [] {
    H5::Exception::dontPrint();
    return true;
  }();
  (void)quiet;
  return lock;
}

const H5::PredType& mem_type(torch::ScalarType t, const std::string& where) {
  switch (t) {
    case torch::kUInt8: return H5::PredType::NATIVE_UINT8;
    case torch::kInt8: return H5::PredType::NATIVE_INT8;
    case torch::kInt16: return H5::PredType::NATIVE_INT16;
    case torch::kInt32: return H5::PredType::NATIVE_INT32;
    case torch::kInt64: return H5::PredType::NATIVE_INT64;
    case torch::kFloat32: return H5::PredType::NATIVE_FLOAT;
    case torch::kFloat64: return H5::PredType::NATIVE_DOUBLE;
    default:
      throw IoError(where + ": cannot store dtype " + std::string(c10::toString(t)) +
                    " (expected uint8, int8, int16, int32, int64, float32 or float64)");
  }
}

torch::ScalarType dtype_of(const H5::DataSet& ds, const std::string& where) {
  const H5T_class_t cls = ds.getTypeClass();
  if (cls == H5T_FLOAT) return ds.getFloatType().getSize() <= 4 ? torch::kFloat32 : torch::kFloat64;
  if (cls == H5T_INTEGER) {
    const H5::IntType it = ds.getIntType();
    const bool is_signed = it.getSign() != H5T_SGN_NONE;
    switch (it.getSize()) {
      case 1: return is_signed ? torch::kInt8 : torch::kUInt8;
      case 2: return is_signed ? torch::kInt16 : torch::kInt32;
      case 4: return is_signed ? torch::kInt32 : torch::kInt64;
      default: return torch::kInt64;
    }
  }
  throw IoError(where + ": not a numeric dataset (expected integers or floats)");
}

std::string describe(const H5::Exception& e) {
  std::string d = e.getDetailMsg();
  return d.empty() ? std::string("HDF5 error") : d;
}

bool link_exists(const H5::H5File& file, const std::string& name) {
  return H5Lexists(file.getId(), name.c_str(), H5P_DEFAULT) > 0;
}

std::vector<std::int64_t> dims_of(const H5::DataSet& ds) {
  const H5::DataSpace space = ds.getSpace();
  const int rank = space.getSimpleExtentNdims();
  std::vector<hsize_t> d(static_cast<std::size_t>(rank));
  space.getSimpleExtentDims(d.data());
  return {d.begin(), d.end()};
}

void write_string_attribute(H5::H5Object& obj, const std::string& name, const std::string& value) {
  if (obj.attrExists(name)) obj.removeAttr(name);
  const H5::StrType type(H5::PredType::C_S1, H5T_VARIABLE);
  H5::Attribute a = obj.createAttribute(name, type, H5::DataSpace(H5S_SCALAR));
  a.write(type, value);
}

void write_double_attribute(H5::H5Object& obj, const std::string& name, const std::vector<double>& v) {
  if (obj.attrExists(name)) obj.removeAttr(name);
  const hsize_t n = v.size();
  H5::Attribute a = obj.createAttribute(name, H5::PredType::NATIVE_DOUBLE, H5::DataSpace(1, &n));
  a.write(H5::PredType::NATIVE_DOUBLE, v.data());
}

// Calls f on the file's root group ("/") or on a dataset (H5Object's destructor is protected,
// so the object lives here rather than behind a pointer).
template <typename F>
auto with_object(const H5::H5File& file, const std::string& name, F&& f) {
  if (name == "/" || name.empty()) {
    H5::Group g = file.openGroup("/");
    return f(static_cast<H5::H5Object&>(g));
  }
  H5::DataSet ds = file.openDataSet(name);
  return f(static_cast<H5::H5Object&>(ds));
}

}  // namespace

struct H5Reader::Impl {
  H5::H5File file;
};

H5Reader::H5Reader(const fs::path& file, std::size_t chunk_cache_bytes) : path_(file), impl_(std::make_unique<Impl>()) {
  auto lock = h5_lock();
  if (!fs::exists(file)) throw IoError(file.string() + ": file not found");
  try {
    H5::FileAccPropList access;
    // A prime slot count well above the chunks the cache can hold keeps hash collisions rare.
    access.setCache(0, 12421, chunk_cache_bytes, 0.75);
    impl_->file.openFile(file.string(), H5F_ACC_RDONLY, access);
  } catch (const H5::Exception& e) {
    throw IoError(file.string() + ": not a readable HDF5 file (" + describe(e) + ")");
  }
}

H5Reader::~H5Reader() {
  auto lock = h5_lock();
  impl_.reset();
}

bool H5Reader::has(const std::string& dataset) const {
  auto lock = h5_lock();
  return link_exists(impl_->file, dataset);
}

std::vector<std::int64_t> H5Reader::shape(const std::string& dataset) const {
  auto lock = h5_lock();
  const std::string where = path_.string() + ":" + dataset;
  if (!link_exists(impl_->file, dataset)) throw IoError(where + ": no such dataset");
  try {
    return dims_of(impl_->file.openDataSet(dataset));
  } catch (const H5::Exception& e) {
    throw IoError(where + ": " + describe(e));
  }
}

torch::Tensor H5Reader::read(const std::string& dataset) const {
  auto lock = h5_lock();
  const std::string where = path_.string() + ":" + dataset;
  if (!link_exists(impl_->file, dataset)) throw IoError(where + ": no such dataset");
  try {
    const H5::DataSet ds = impl_->file.openDataSet(dataset);
    const auto dims = dims_of(ds);
    torch::Tensor out = torch::empty(dims, torch::TensorOptions().dtype(dtype_of(ds, where)));
    if (out.numel() > 0) ds.read(out.data_ptr(), mem_type(out.scalar_type(), where));
    return out;
  } catch (const H5::Exception& e) {
    throw IoError(where + ": " + describe(e));
  }
}

torch::Tensor H5Reader::read_box(const std::string& dataset, const std::vector<std::int64_t>& start,
                                 const std::vector<std::int64_t>& count) const {
  auto lock = h5_lock();
  const std::string where = path_.string() + ":" + dataset;
  if (!link_exists(impl_->file, dataset)) throw IoError(where + ": no such dataset");
  torch::ScalarType dtype;
  try {
    dtype = dtype_of(impl_->file.openDataSet(dataset), where);
  } catch (const H5::Exception& e) {
    throw IoError(where + ": " + describe(e));
  }
  torch::Tensor out = torch::empty(count, torch::TensorOptions().dtype(dtype));
  read_box_into(dataset, start, count, out);
  return out;
}

void H5Reader::read_box_into(const std::string& dataset, const std::vector<std::int64_t>& start,
                             const std::vector<std::int64_t>& count, torch::Tensor& out) const {
  auto lock = h5_lock();
  const std::string where = path_.string() + ":" + dataset;
  if (!link_exists(impl_->file, dataset)) throw IoError(where + ": no such dataset");
  try {
    const H5::DataSet ds = impl_->file.openDataSet(dataset);
    const auto dims = dims_of(ds);
    if (start.size() != dims.size() || count.size() != dims.size())
      throw IoError(where + ": box of rank " + std::to_string(start.size()) + " for a dataset of rank " +
                    std::to_string(dims.size()));
    for (std::size_t i = 0; i < dims.size(); ++i)
      if (start[i] < 0 || count[i] < 0 || start[i] + count[i] > dims[i])
        throw IoError(where + ": box axis " + std::to_string(i) + " [" + std::to_string(start[i]) + ", " +
                      std::to_string(start[i] + count[i]) + ") outside the dataset's 0.." +
                      std::to_string(dims[i]));
    if (!out.is_contiguous() || out.sizes().vec() != count)
      throw IoError(where + ": box destination must be contiguous with the box's shape");
    if (out.numel() == 0) return;
    H5::DataSpace file_space = ds.getSpace();
    const std::vector<hsize_t> st(start.begin(), start.end()), cnt(count.begin(), count.end());
    file_space.selectHyperslab(H5S_SELECT_SET, cnt.data(), st.data());
    const H5::DataSpace mem_space(static_cast<int>(cnt.size()), cnt.data());
    ds.read(out.data_ptr(), mem_type(out.scalar_type(), where), mem_space, file_space);
  } catch (const H5::Exception& e) {
    throw IoError(where + ": " + describe(e));
  }
}

std::optional<std::vector<double>> H5Reader::double_attribute(const std::string& object,
                                                              const std::string& name) const {
  auto lock = h5_lock();
  const std::string where = path_.string() + ":" + object;
  try {
    if (object != "/" && !link_exists(impl_->file, object)) return std::nullopt;
    return with_object(impl_->file, object, [&](H5::H5Object& obj) -> std::optional<std::vector<double>> {
      if (!obj.attrExists(name)) return std::nullopt;
      const H5::Attribute a = obj.openAttribute(name);
      if (a.getTypeClass() != H5T_FLOAT && a.getTypeClass() != H5T_INTEGER)
        throw IoError(where + ": attribute '" + name + "' is not numeric");
      std::vector<double> v(static_cast<std::size_t>(a.getSpace().getSimpleExtentNpoints()));
      a.read(H5::PredType::NATIVE_DOUBLE, v.data());
      return v;
    });
  } catch (const H5::Exception& e) {
    throw IoError(where + ": attribute '" + name + "': " + describe(e));
  }
}

std::optional<std::string> H5Reader::string_attribute(const std::string& object, const std::string& name) const {
  auto lock = h5_lock();
  const std::string where = path_.string() + ":" + object;
  try {
    if (object != "/" && !link_exists(impl_->file, object)) return std::nullopt;
    return with_object(impl_->file, object, [&](H5::H5Object& obj) -> std::optional<std::string> {
      if (!obj.attrExists(name)) return std::nullopt;
      const H5::Attribute a = obj.openAttribute(name);
      if (a.getTypeClass() != H5T_STRING) throw IoError(where + ": attribute '" + name + "' is not a string");
      std::string value;
      a.read(a.getStrType(), value);
      return value;
    });
  } catch (const H5::Exception& e) {
    throw IoError(where + ": attribute '" + name + "': " + describe(e));
  }
}

std::optional<Geometry> H5Reader::geometry(const std::string& dataset) const {
  const std::string where = path_.string() + ":" + dataset;
  const auto spacing = double_attribute(dataset, "spacing");
  const auto origin = double_attribute(dataset, "origin");
  const auto direction = double_attribute(dataset, "direction");
  if (!spacing && !origin && !direction) return std::nullopt;
  Geometry g;
  if (spacing) {
    if (spacing->size() != 3) throw IoError(where + ": attribute 'spacing' must hold 3 numbers (x, y, z)");
    std::copy(spacing->begin(), spacing->end(), g.spacing.begin());
  }
  if (origin) {
    if (origin->size() != 3) throw IoError(where + ": attribute 'origin' must hold 3 numbers (x, y, z)");
    std::copy(origin->begin(), origin->end(), g.origin.begin());
  }
  if (direction) {
    if (direction->size() != 9) throw IoError(where + ": attribute 'direction' must hold 9 numbers (row-major 3x3)");
    std::copy(direction->begin(), direction->end(), g.direction.begin());
  }
  return g;
}

std::optional<PixelType> H5Reader::pixel_type(const std::string& dataset) const {
  const auto s = string_attribute(dataset, "pixel_type");
  if (!s) return std::nullopt;
  return pixel_type_from_string(*s, path_.string() + ":" + dataset);
}

struct H5Writer::Impl {
  explicit Impl(const fs::path& p) : atomic(p) {}
  AtomicPath atomic;
  H5::H5File file;
};

H5Writer::H5Writer(const fs::path& file) : path_(file) {
  auto lock = h5_lock();
  impl_ = std::make_unique<Impl>(file);
  try {
    impl_->file = H5::H5File(impl_->atomic.temp().string(), H5F_ACC_TRUNC);
  } catch (const H5::Exception& e) {
    throw IoError(file.string() + ": cannot create HDF5 file (" + describe(e) + ")");
  }
}

H5Writer::~H5Writer() {
  auto lock = h5_lock();
  try {
    impl_->file.close();
  } catch (const H5::Exception&) {
    // The file is being abandoned; AtomicPath removes it.
  }
  impl_.reset();
}

void H5Writer::write(const std::string& dataset, const torch::Tensor& data, const H5DatasetOptions& options) {
  auto lock = h5_lock();
  const std::string where = path_.string() + ":" + dataset;
  const torch::Tensor t = data.cpu().contiguous();
  const H5::PredType& type = mem_type(t.scalar_type(), where);
  try {
    const std::vector<hsize_t> dims(t.sizes().begin(), t.sizes().end());
    const H5::DataSpace space(static_cast<int>(dims.size()), dims.data());
    H5::DSetCreatPropList props;
    if (!options.chunk.empty() && t.numel() > 0) {
      if (options.chunk.size() != dims.size())
        throw IoError(where + ": chunk rank " + std::to_string(options.chunk.size()) +
                      " differs from the data's rank " + std::to_string(dims.size()));
      std::vector<hsize_t> chunk(dims.size());
      for (std::size_t i = 0; i < dims.size(); ++i)
        chunk[i] = std::max<hsize_t>(1, std::min<hsize_t>(dims[i], static_cast<hsize_t>(options.chunk[i])));
      props.setChunk(static_cast<int>(chunk.size()), chunk.data());
      if (options.gzip_level > 0) props.setDeflate(static_cast<unsigned>(std::min(9, options.gzip_level)));
    }
    H5::DataSet ds = impl_->file.createDataSet(dataset, type, space, props);
    if (t.numel() > 0) ds.write(t.data_ptr(), type);
  } catch (const H5::Exception& e) {
    throw IoError(where + ": cannot write (" + describe(e) + ")");
  }
}

void H5Writer::set_geometry(const std::string& dataset, const Geometry& g) {
  set_attribute(dataset, "spacing", std::vector<double>(g.spacing.begin(), g.spacing.end()));
  set_attribute(dataset, "origin", std::vector<double>(g.origin.begin(), g.origin.end()));
  set_attribute(dataset, "direction", std::vector<double>(g.direction.begin(), g.direction.end()));
}

void H5Writer::set_attribute(const std::string& object, const std::string& name, const std::string& value) {
  auto lock = h5_lock();
  try {
    with_object(impl_->file, object, [&](H5::H5Object& obj) {
      write_string_attribute(obj, name, value);
      return 0;
    });
  } catch (const H5::Exception& e) {
    throw IoError(path_.string() + ":" + object + ": cannot write attribute '" + name + "' (" + describe(e) + ")");
  }
}

void H5Writer::set_attribute(const std::string& object, const std::string& name, const std::vector<double>& value) {
  auto lock = h5_lock();
  try {
    with_object(impl_->file, object, [&](H5::H5Object& obj) {
      write_double_attribute(obj, name, value);
      return 0;
    });
  } catch (const H5::Exception& e) {
    throw IoError(path_.string() + ":" + object + ": cannot write attribute '" + name + "' (" + describe(e) + ")");
  }
}

void H5Writer::commit() {
  auto lock = h5_lock();
  try {
    impl_->file.close();
  } catch (const H5::Exception& e) {
    throw IoError(path_.string() + ": cannot finish HDF5 file (" + describe(e) + ")");
  }
  impl_->atomic.commit();
}

Channels read_h5_channels(const fs::path& file, const std::string& dataset) {
  const H5Reader r(file);
  const std::string where = file.string() + ":" + dataset;
  const torch::Tensor data = r.read(dataset);
  if (data.dim() != 3 && data.dim() != 4) {
    std::string dims;
    for (auto s : data.sizes()) dims += (dims.empty() ? "" : "x") + std::to_string(s);
    throw IoError(where + ": expected a 3D [D, H, W] or 4D [C, D, H, W] dataset, found " +
                  std::to_string(data.dim()) + "D (" + dims + ")");
  }
  const Geometry g = r.geometry(dataset).value_or(Geometry{});
  const auto stored = r.pixel_type(dataset);
  Channels out;
  const torch::Tensor stacked = data.dim() == 3 ? data.unsqueeze(0) : data;
  for (std::int64_t c = 0; c < stacked.size(0); ++c) {
    Volume v;
    v.data = stacked[c].contiguous();
    v.geometry = g;
    v.pixel_type = stored.value_or(v.data.is_floating_point()
                                       ? (v.data.scalar_type() == torch::kFloat64 ? PixelType::Float64
                                                                                  : PixelType::Float32)
                                   : v.data.scalar_type() == torch::kUInt8 ? PixelType::UInt8
                                   : v.data.scalar_type() == torch::kInt8  ? PixelType::Int8
                                   : v.data.scalar_type() == torch::kInt16 ? PixelType::Int16
                                   : v.data.scalar_type() == torch::kInt32 ? PixelType::Int32
                                                                           : PixelType::Int64);
    out.push_back(std::move(v));
  }
  return out;
}

Volume read_h5_volume(const fs::path& file, const std::string& dataset) {
  Channels c = read_h5_channels(file, dataset);
  if (c.size() != 1)
    throw IoError(file.string() + ":" + dataset + ": expected one 3D volume, found " +
                  std::to_string(c.size()) + " channels");
  return std::move(c.front());
}

void write_h5_case(const fs::path& file, const Channels& image, const Volume* label, const H5Names& names) {
  if (image.empty()) throw IoError(file.string() + ": a case needs at least one image channel");
  for (std::size_t c = 1; c < image.size(); ++c) {
    const std::string d = grid_difference(image[0], image[c]);
    if (!d.empty())
      throw DataError(file.string() + ": channel " + std::to_string(c) + " is on another grid than channel 0 (" + d + ")");
  }
  std::vector<torch::Tensor> parts;
  for (const auto& v : image) parts.push_back(v.data.to(tensor_dtype(image[0].pixel_type)));
  H5Writer w(file);
  w.write(names.image, torch::stack(parts));
  w.set_geometry(names.image, image[0].geometry);
  w.set_attribute(names.image, "pixel_type", to_string(image[0].pixel_type));
  if (label != nullptr) {
    w.write(names.label, label->data);
    w.set_geometry(names.label, label->geometry);
    w.set_attribute(names.label, "pixel_type", to_string(label->pixel_type));
  }
  w.commit();
}

}  // namespace voxfit::io
