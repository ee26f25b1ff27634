#include "voxfit/io/h5_file.h"

#include <H5Cpp.h>
#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <map>
#include <mutex>
#include <new>

#include "voxfit/core/atomic_file.h"
#include "voxfit/core/error.h"
#include "voxfit/core/isolated.h"
#include "voxfit/core/units.h"

namespace voxfit::io {

namespace {

std::recursive_mutex& h5_mutex() {
  static std::recursive_mutex m;
  return m;
}

// Errors become IoErrors; HDF5's own stack dump on stderr would only repeat them. A thread-safe
// HDF5 keeps that setting per thread, and loader threads call HDF5 too.
std::unique_lock<std::recursive_mutex> h5_lock() {
  std::unique_lock<std::recursive_mutex> lock(h5_mutex());
  thread_local const bool quiet = [] {
    H5::Exception::dontPrint();
    return true;
  }();
  (void)quiet;
  return lock;
}

const H5::PredType& mem_type(torch::ScalarType t, const std::string& where) {
  switch (t) {
    case torch::kUInt8:
      return H5::PredType::NATIVE_UINT8;
    case torch::kInt8:
      return H5::PredType::NATIVE_INT8;
    case torch::kInt16:
      return H5::PredType::NATIVE_INT16;
    case torch::kInt32:
      return H5::PredType::NATIVE_INT32;
    case torch::kInt64:
      return H5::PredType::NATIVE_INT64;
    case torch::kFloat32:
      return H5::PredType::NATIVE_FLOAT;
    case torch::kFloat64:
      return H5::PredType::NATIVE_DOUBLE;
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
      case 1:
        return is_signed ? torch::kInt8 : torch::kUInt8;
      case 2:
        return is_signed ? torch::kInt16 : torch::kInt32;
      case 4:
        return is_signed ? torch::kInt32 : torch::kInt64;
      default:
        return torch::kInt64;
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

// Where a dataset's bytes lie in the file, for datasets stored raw (no filter) in the native
// type: box reads then copy straight from a read-only mapping of the file, without HDF5 and its
// global lock, so the loader's threads read in parallel (nnU-Net reads its unpacked .npy cases
// through memory maps for the same reason). Other datasets go through HDF5.
struct DirectLayout {
  torch::ScalarType dtype = torch::kFloat32;
  std::vector<std::int64_t> dims, chunk;  // chunk == dims for contiguous storage
  std::vector<std::int64_t> grid;         // chunks per axis
  std::vector<std::uint64_t> offsets;     // file offset of each chunk, row-major over the grid
};

namespace {

std::optional<torch::ScalarType> native_dtype(hid_t type) {
  const std::pair<hid_t, torch::ScalarType> natives[] = {
      {H5T_NATIVE_FLOAT, torch::kFloat32}, {H5T_NATIVE_DOUBLE, torch::kFloat64}, {H5T_NATIVE_INT16, torch::kInt16},
      {H5T_NATIVE_INT32, torch::kInt32},   {H5T_NATIVE_INT64, torch::kInt64},    {H5T_NATIVE_INT8, torch::kInt8},
      {H5T_NATIVE_UINT8, torch::kUInt8}};
  for (const auto& [h5, t] : natives)
    if (H5Tequal(type, h5) > 0) return t;
  return std::nullopt;
}

// Under the HDF5 lock. nullopt when the dataset must be read through HDF5.
std::optional<DirectLayout> direct_layout(const H5::DataSet& ds, std::uint64_t file_size) {
  const hid_t id = ds.getId();
  const H5::DSetCreatPropList props = ds.getCreatePlist();
  if (H5Pget_nfilters(props.getId()) != 0) return std::nullopt;
  const H5::DataType type = ds.getDataType();
  const auto dtype = native_dtype(type.getId());
  if (!dtype) return std::nullopt;
  DirectLayout l;
  l.dtype = *dtype;
  l.dims = dims_of(ds);
  const std::size_t rank = l.dims.size();
  const std::uint64_t elem = static_cast<std::uint64_t>(torch::elementSize(l.dtype));
  const H5D_layout_t layout = props.getLayout();
  if (layout == H5D_CONTIGUOUS) {
    const haddr_t at = H5Dget_offset(id);
    if (at == HADDR_UNDEF) return std::nullopt;
    l.chunk = l.dims;
    l.grid.assign(rank, 1);
    l.offsets = {at};
  } else if (layout == H5D_CHUNKED) {
    std::vector<hsize_t> c(rank);
    if (props.getChunk(static_cast<int>(rank), c.data()) != static_cast<int>(rank)) return std::nullopt;
    l.chunk.assign(c.begin(), c.end());
    std::int64_t total = 1;
    for (std::size_t i = 0; i < rank; ++i) {
      l.grid.push_back((l.dims[i] + l.chunk[i] - 1) / l.chunk[i]);
      total *= l.grid.back();
    }
    // By coordinate: HDF5 1.10's chunk count is 0 for the implicit index of early-allocated chunks.
    l.offsets.assign(static_cast<std::size_t>(total), 0);
    std::vector<hsize_t> coords(rank);
    for (std::int64_t flat = 0; flat < total; ++flat) {
      std::int64_t rest = flat;
      for (std::size_t i = rank; i-- > 0;) {
        coords[i] = static_cast<hsize_t>((rest % l.grid[i]) * l.chunk[i]);
        rest /= l.grid[i];
      }
      unsigned mask = 0;
      haddr_t at = HADDR_UNDEF;
      hsize_t bytes = 0;
      if (H5Dget_chunk_info_by_coord(id, coords.data(), &mask, &at, &bytes) < 0 || at == HADDR_UNDEF)
        return std::nullopt;  // an unwritten chunk (fill values): HDF5 knows what to return
      l.offsets[static_cast<std::size_t>(flat)] = at;
    }
  } else {
    return std::nullopt;
  }
  std::uint64_t span = elem;
  for (auto c : l.chunk) span *= static_cast<std::uint64_t>(c);
  for (auto at : l.offsets)
    if (at == 0 || at + span > file_size) return std::nullopt;  // a chunk outside the file: let HDF5 say why
  return l;
}

// Copies box [start, start + count) of a dataset laid out as `l` in `base` into `out` (row-major).
void copy_box(const DirectLayout& l, const char* base, const std::vector<std::int64_t>& start,
              const std::vector<std::int64_t>& count, char* out) {
  const std::size_t rank = l.dims.size();
  const std::size_t elem = torch::elementSize(l.dtype);
  std::vector<std::int64_t> first(rank), last(rank), g(rank);
  for (std::size_t i = 0; i < rank; ++i) {
    first[i] = start[i] / l.chunk[i];
    last[i] = (start[i] + count[i] - 1) / l.chunk[i];
    g[i] = first[i];
  }
  std::vector<std::int64_t> lo(rank), hi(rank), row(rank);
  while (true) {
    std::int64_t flat = 0;
    for (std::size_t i = 0; i < rank; ++i) {
      flat = flat * l.grid[i] + g[i];
      lo[i] = std::max(start[i], g[i] * l.chunk[i]);
      hi[i] = std::min(start[i] + count[i], (g[i] + 1) * l.chunk[i]);
    }
    const char* chunk = base + l.offsets[static_cast<std::size_t>(flat)];
    // Every row (fixed indices on all axes but the last) of the box inside this chunk.
    row = lo;
    const std::size_t run = static_cast<std::size_t>(hi[rank - 1] - lo[rank - 1]) * elem;
    while (true) {
      std::int64_t src = 0, dst = 0;
      for (std::size_t i = 0; i < rank; ++i) {
        src = src * l.chunk[i] + (row[i] - g[i] * l.chunk[i]);
        dst = dst * count[i] + (row[i] - start[i]);
      }
      std::memcpy(out + static_cast<std::size_t>(dst) * elem, chunk + static_cast<std::size_t>(src) * elem, run);
      std::size_t a = rank - 1;
      while (a-- > 0) {
        if (++row[a] < hi[a]) break;
        row[a] = lo[a];
      }
      if (a == static_cast<std::size_t>(-1)) break;
    }
    std::size_t a = rank;
    while (a-- > 0) {
      if (++g[a] <= last[a]) break;
      g[a] = first[a];
    }
    if (a == static_cast<std::size_t>(-1)) break;
  }
}

// A corrupt file can declare any shape. Before anything is allocated, the bytes it declares must
// fit in 63 bits and in what the file can hold: the file itself for unfiltered data, at most 1032
// times it for filtered (gzip's largest ratio).
void check_declared_size(const H5::DataSet& ds, const std::vector<std::int64_t>& dims, const fs::path& file,
                         const std::string& where) {
  const std::string shape = shape_text(dims);
  const std::uint64_t stored = ds.getDataType().getSize();
  // Elements, capped so that even 8-byte elements stay within 63 bits.
  constexpr std::uint64_t kMaxElements = static_cast<std::uint64_t>(std::numeric_limits<std::int64_t>::max()) / 8;
  std::uint64_t elements = 1;
  for (auto d : dims) {
    if (d < 0 || (d > 0 && elements > kMaxElements / static_cast<std::uint64_t>(d)))
      throw IoError(where + ": declares an impossible shape " + shape + " (a corrupt file?)");
    elements *= static_cast<std::uint64_t>(d);
  }
  std::error_code ec;
  const std::uint64_t file_bytes = fs::file_size(file, ec);
  if (ec) return;
  const bool filtered = ds.getCreatePlist().getNfilters() > 0;
  const std::uint64_t limit = (filtered ? file_bytes * 1032 : file_bytes) + (1u << 20);
  if (stored > 0 && elements > limit / stored)
    throw IoError(where + ": declares a " + shape + " dataset, more data than the " + std::to_string(file_bytes) +
                  "-byte file can hold (a corrupt file?)");
}

}  // namespace

struct H5Reader::Impl {
  H5::H5File file;
  // The read-only mapping of the whole file and the direct layouts found so far (nullopt: read
  // through HDF5). Guarded by the HDF5 lock; the mapping itself is read without it.
  const char* map = nullptr;
  std::uint64_t map_size = 0;
  std::map<std::string, std::optional<DirectLayout>> layouts;

  ~Impl() {
    if (map) ::munmap(const_cast<char*>(map), map_size);
  }
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
  // Without a mapping every read goes through HDF5, which is correct, only slower.
  const int fd = ::open(file.c_str(), O_RDONLY | O_CLOEXEC);
  struct stat st {};
  if (fd >= 0 && ::fstat(fd, &st) == 0 && st.st_size > 0) {
    void* m = ::mmap(nullptr, static_cast<std::size_t>(st.st_size), PROT_READ, MAP_SHARED, fd, 0);
    if (m != MAP_FAILED) {
      impl_->map = static_cast<const char*>(m);
      impl_->map_size = static_cast<std::uint64_t>(st.st_size);
    }
  }
  if (fd >= 0) ::close(fd);
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
    const torch::ScalarType dtype = dtype_of(ds, where);
    check_declared_size(ds, dims, path_, where);
    torch::Tensor out = torch::empty(dims, torch::TensorOptions().dtype(dtype));
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
  const auto check_box = [&](const std::vector<std::int64_t>& dims) {
    if (start.size() != dims.size() || count.size() != dims.size())
      throw IoError(where + ": box of rank " + std::to_string(start.size()) + " for a dataset of rank " +
                    std::to_string(dims.size()));
    for (std::size_t i = 0; i < dims.size(); ++i)
      if (start[i] < 0 || count[i] < 0 || start[i] + count[i] > dims[i])
        throw IoError(where + ": box axis " + std::to_string(i) + " [" + std::to_string(start[i]) + ", " +
                      std::to_string(start[i] + count[i]) + ") outside the dataset's 0.." + std::to_string(dims[i]));
    if (!out.is_contiguous() || out.sizes().vec() != count)
      throw IoError(where + ": box destination must be contiguous with the box's shape");
  };
  try {
    auto found = impl_->layouts.find(dataset);
    if (found == impl_->layouts.end()) {
      const H5::DataSet ds = impl_->file.openDataSet(dataset);
      found = impl_->layouts.emplace(dataset, impl_->map ? direct_layout(ds, impl_->map_size) : std::nullopt).first;
    }
    if (found->second && found->second->dtype == out.scalar_type()) {
      const DirectLayout& direct = *found->second;  // map entries stay put while the reader lives
      check_box(direct.dims);
      lock.unlock();
      if (out.numel() > 0) copy_box(direct, impl_->map, start, count, static_cast<char*>(out.data_ptr()));
      return;
    }
    const H5::DataSet ds = impl_->file.openDataSet(dataset);
    check_box(dims_of(ds));
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

// The file is built in memory (HDF5's core driver without a backing store) and written to disk by
// write_file_atomic at commit(): HDF5 1.10 crashes (SIGSEGV in H5F__close) closing a file whose
// flush failed on a full disk, so HDF5 itself never writes to the disk.
struct H5Writer::Impl {
  H5::H5File file;
};

H5Writer::H5Writer(const fs::path& file) : path_(file) {
  auto lock = h5_lock();
  impl_ = std::make_unique<Impl>();
  try {
    H5::FileAccPropList access;
    if (H5Pset_fapl_core(access.getId(), 1u << 20, /*backing_store=*/0) < 0)
      throw IoError(file.string() + ": cannot set up an in-memory HDF5 file");
    impl_->file = H5::H5File(file.string() + ".in-memory", H5F_ACC_TRUNC, H5::FileCreatPropList::DEFAULT, access);
  } catch (const H5::Exception& e) {
    throw IoError(file.string() + ": cannot create HDF5 file (" + describe(e) + ")");
  }
}

H5Writer::~H5Writer() {
  auto lock = h5_lock();
  try {
    impl_->file.close();
  } catch (const H5::Exception&) {
    // Only memory is abandoned.
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
  std::string image;
  {
    auto lock = h5_lock();
    try {
      impl_->file.flush(H5F_SCOPE_GLOBAL);
      const ssize_t size = H5Fget_file_image(impl_->file.getId(), nullptr, 0);
      if (size < 0) throw IoError(path_.string() + ": cannot finish HDF5 file (no file image)");
      image.resize(static_cast<std::size_t>(size));
      if (H5Fget_file_image(impl_->file.getId(), image.data(), image.size()) != size)
        throw IoError(path_.string() + ": cannot finish HDF5 file (file image changed size)");
      impl_->file.close();
    } catch (const H5::Exception& e) {
      throw IoError(path_.string() + ": cannot finish HDF5 file (" + describe(e) + ")");
    }
  }
  write_file_atomic(path_, image);
}

Channels read_h5_channels(const fs::path& file, const std::string& dataset) {
  const H5Reader r(file);
  const std::string where = file.string() + ":" + dataset;
  const torch::Tensor data = r.read(dataset);
  if (data.dim() != 3 && data.dim() != 4) {
    throw IoError(where + ": expected a 3D [D, H, W] or 4D [C, D, H, W] dataset, found " + std::to_string(data.dim()) +
                  "D (" + shape_text(data.sizes()) + ")");
  }
  const Geometry g = r.geometry(dataset).value_or(Geometry{});
  const auto stored = r.pixel_type(dataset);
  Channels out;
  const torch::Tensor stacked = data.dim() == 3 ? data.unsqueeze(0) : data;
  for (std::int64_t c = 0; c < stacked.size(0); ++c) {
    Volume v;
    v.data = stacked[c].contiguous();
    v.geometry = g;
    v.pixel_type = stored.value_or(
        v.data.is_floating_point() ? (v.data.scalar_type() == torch::kFloat64 ? PixelType::Float64 : PixelType::Float32)
        : v.data.scalar_type() == torch::kUInt8 ? PixelType::UInt8
        : v.data.scalar_type() == torch::kInt8  ? PixelType::Int8
        : v.data.scalar_type() == torch::kInt16 ? PixelType::Int16
        : v.data.scalar_type() == torch::kInt32 ? PixelType::Int32
                                                : PixelType::Int64);
    out.push_back(std::move(v));
  }
  return out;
}

void survive_h5_read(const fs::path& file, const std::function<void()>& read, double timeout_s) {
  const char* trust = std::getenv("VOXFIT_TRUST_HDF5");
  if (trust != nullptr && std::strcmp(trust, "1") == 0) return;
  // The lock is held across the fork: no other thread is inside HDF5, so the child's copy of the
  // library is in a consistent state. The child's inherited lock belongs to the parent's copy of it;
  // it starts with a fresh one.
  core::survive_in_child(
      file.string() + ": not a readable HDF5 volume (the HDF5 library ", read, timeout_s,
      [] { return std::make_shared<std::unique_lock<std::recursive_mutex>>(h5_lock()); },
      [] { new (&h5_mutex()) std::recursive_mutex(); });
}

void survive_h5_case(const fs::path& file, const H5Names& names) {
  // The verdict per version of a file: "" survived, else the error (a case's image and label are
  // one file, and prepare reads each case twice).
  static std::mutex mutex;
  static std::map<std::string, std::string> verdicts;
  std::error_code size_ec, time_ec;
  const auto size = fs::file_size(file, size_ec);
  const auto mtime = fs::last_write_time(file, time_ec).time_since_epoch().count();
  const bool known = !size_ec && !time_ec;
  const std::string key = fs::absolute(file).lexically_normal().string() + "|" + std::to_string(size) + "|" +
                          std::to_string(mtime) + "|" + names.image + "|" + names.label;
  if (known) {
    const std::lock_guard<std::mutex> lock(mutex);
    const auto it = verdicts.find(key);
    if (it != verdicts.end()) {
      if (it->second.empty()) return;
      throw IoError(it->second);
    }
  }
  std::string verdict;
  try {
    survive_h5_read(file, [&] {
      try {
        (void)read_h5_channels(file, names.image);
      } catch (const Error&) {
      }
      (void)read_h5_volume(file, names.label);
    });
  } catch (const IoError& e) {
    verdict = e.what();
  }
  if (known) {
    const std::lock_guard<std::mutex> lock(mutex);
    verdicts[key] = verdict;
  }
  if (!verdict.empty()) throw IoError(verdict);
}

Volume read_h5_volume(const fs::path& file, const std::string& dataset) {
  Channels c = read_h5_channels(file, dataset);
  if (c.size() != 1)
    throw IoError(file.string() + ":" + dataset + ": expected one 3D volume, found " + std::to_string(c.size()) +
                  " channels");
  return std::move(c.front());
}

void write_h5_case(const fs::path& file, const Channels& image, const Volume* label, const H5Names& names) {
  if (image.empty()) throw IoError(file.string() + ": a case needs at least one image channel");
  for (std::size_t c = 1; c < image.size(); ++c) {
    const std::string d = grid_difference(image[0], image[c]);
    if (!d.empty())
      throw DataError(file.string() + ": channel " + std::to_string(c) + " is on another grid than channel 0 (" + d +
                      ")");
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
