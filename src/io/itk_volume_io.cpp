#include <itkGDCMImageIO.h>
#include <itkGDCMImageIOFactory.h>
#include <itkGDCMSeriesFileNames.h>
#include <itkImage.h>
#include <itkImageIOFactory.h>
#include <itkImageSeriesReader.h>
#include <itkMetaDataObject.h>
#include <itkMetaImageIOFactory.h>
#include <itkNiftiImageIOFactory.h>
#include <itkNrrdImageIOFactory.h>
#include <nifti1_io.h>

#include <algorithm>
#include <atomic>
#include <cstring>
#include <mutex>
#include <sstream>

#include <unistd.h>

#include "itk_bridge.h"
#include "nifti_integrity.h"
#include "voxfit/core/atomic_file.h"
#include "voxfit/core/error.h"
#include "voxfit/core/units.h"
#include "voxfit/io/volume_io.h"

namespace voxfit::io {

namespace {

// ITK_USE_FILE is not included, so no factory is registered implicitly; the order here decides
// which IO wins when two could read a file (NIfTI before the others).
void register_itk_io() {
  static std::once_flag once;
  std::call_once(once, [] {
    itk::NiftiImageIOFactory::RegisterOneFactory();
    itk::MetaImageIOFactory::RegisterOneFactory();
    itk::NrrdImageIOFactory::RegisterOneFactory();
    itk::GDCMImageIOFactory::RegisterOneFactory();
    // ITK warnings are multi-line text on stderr; what matters of them (a DICOM series with a
    // missing slice) voxfit turns into its own one-line errors.
    itk::Object::GlobalWarningDisplayOff();
    // nifti1_io prints "** ERROR: ..." lines for every bad header; ITK's exception says it once.
    nifti_set_debug_level(0);
  });
}

PixelType pixel_type_of(itk::IOComponentEnum c, const fs::path& path) {
  using C = itk::IOComponentEnum;
  switch (c) {
    case C::UCHAR:
      return PixelType::UInt8;
    case C::CHAR:
      return PixelType::Int8;
    case C::USHORT:
      return PixelType::UInt16;
    case C::SHORT:
      return PixelType::Int16;
    case C::UINT:
      return PixelType::UInt32;
    case C::INT:
      return PixelType::Int32;
    case C::ULONG:
    case C::ULONGLONG:
      return PixelType::UInt64;
    case C::LONG:
    case C::LONGLONG:
      return PixelType::Int64;
    case C::FLOAT:
      return PixelType::Float32;
    case C::DOUBLE:
      return PixelType::Float64;
    default:
      throw IoError(path.string() + ": unsupported voxel type " + itk::ImageIOBase::GetComponentTypeAsString(c) +
                    " (expected an integer or float32/float64 type)");
  }
}

itk::IOComponentEnum component_of(PixelType t) {
  using C = itk::IOComponentEnum;
  switch (t) {
    case PixelType::UInt8:
      return C::UCHAR;
    case PixelType::Int8:
      return C::CHAR;
    case PixelType::UInt16:
      return C::USHORT;
    case PixelType::Int16:
      return C::SHORT;
    case PixelType::UInt32:
      return C::UINT;
    case PixelType::Int32:
      return C::INT;
    case PixelType::UInt64:
      return C::ULONGLONG;
    case PixelType::Int64:
      return C::LONGLONG;
    case PixelType::Float32:
      return C::FLOAT;
    case PixelType::Float64:
      return C::DOUBLE;
  }
  return C::FLOAT;
}

std::size_t component_bytes(PixelType t) {
  switch (t) {
    case PixelType::UInt8:
    case PixelType::Int8:
      return 1;
    case PixelType::UInt16:
    case PixelType::Int16:
      return 2;
    case PixelType::UInt32:
    case PixelType::Int32:
    case PixelType::Float32:
      return 4;
    default:
      return 8;
  }
}

// Turns a buffer of the file's voxel type into a tensor of tensor_dtype(type); LibTorch has no
// uint16/uint32/uint64, so those widen.
torch::Tensor buffer_to_tensor(const char* buffer, std::int64_t count, PixelType type) {
  torch::Tensor t = torch::empty({count}, torch::TensorOptions().dtype(tensor_dtype(type)));
  const auto widen = [&](auto src_tag, auto dst_tag) {
    using S = decltype(src_tag);
    using D = decltype(dst_tag);
    const S* src = reinterpret_cast<const S*>(buffer);
    D* dst = t.data_ptr<D>();
    for (std::int64_t i = 0; i < count; ++i) dst[i] = static_cast<D>(src[i]);
  };
  switch (type) {
    case PixelType::UInt16:
      widen(std::uint16_t{}, std::int32_t{});
      break;
    case PixelType::UInt32:
      widen(std::uint32_t{}, std::int64_t{});
      break;
    case PixelType::UInt64:
      widen(std::uint64_t{}, std::int64_t{});
      break;
    default:
      std::memcpy(t.data_ptr(), buffer, static_cast<std::size_t>(count) * component_bytes(type));
  }
  return t;
}

// The inverse: a contiguous buffer of the file's voxel type. Float data bound for an integer
// type is rounded, then saturated to the type's range.
std::vector<char> tensor_to_buffer(const torch::Tensor& data, PixelType type) {
  torch::Tensor t = data.contiguous();
  if (t.is_floating_point() && !is_floating(type)) t = t.round();
  const auto narrow = [&](auto dst_tag, double lo, double hi) {
    using D = decltype(dst_tag);
    torch::Tensor v = t.to(torch::kFloat64).clamp(lo, hi).contiguous();
    std::vector<char> out(static_cast<std::size_t>(v.numel()) * sizeof(D));
    D* dst = reinterpret_cast<D*>(out.data());
    const double* src = v.data_ptr<double>();
    for (std::int64_t i = 0; i < v.numel(); ++i) dst[i] = static_cast<D>(src[i]);
    return out;
  };
  switch (type) {
    case PixelType::UInt16:
      return narrow(std::uint16_t{}, 0, 65535);
    case PixelType::UInt32:
      return narrow(std::uint32_t{}, 0, 4294967295.0);
    case PixelType::UInt64: {
      torch::Tensor v = t.to(torch::kInt64).clamp_min(0).contiguous();
      std::vector<char> out(static_cast<std::size_t>(v.numel()) * 8);
      std::memcpy(out.data(), v.data_ptr(), out.size());
      return out;
    }
    default: {
      torch::Tensor v = t.to(tensor_dtype(type)).contiguous();
      std::vector<char> out(static_cast<std::size_t>(v.numel()) * component_bytes(type));
      std::memcpy(out.data(), v.data_ptr(), out.size());
      return out;
    }
  }
}

std::string format_name(const itk::ImageIOBase* io) {
  const std::string n = io->GetNameOfClass();
  if (n == "NiftiImageIO") return "NIfTI";
  if (n == "MetaImageIO") return "MetaImage";
  if (n == "NrrdImageIO") return "NRRD";
  if (n == "GDCMImageIO") return "DICOM";
  return n;
}

ImageInfo info_of(itk::ImageIOBase* io, const fs::path& path) {
  ImageInfo info;
  info.dimension = io->GetNumberOfDimensions();
  for (unsigned i = 0; i < info.dimension; ++i) info.size.push_back(io->GetDimensions(i));
  info.components = io->GetNumberOfComponents();
  info.pixel_type = pixel_type_of(io->GetComponentType(), path);
  info.format = format_name(io);
  const unsigned n = std::min(3u, info.dimension);
  for (unsigned c = 0; c < n; ++c) {
    info.geometry.spacing[c] = io->GetSpacing(c);
    info.geometry.origin[c] = io->GetOrigin(c);
    const std::vector<double> axis = io->GetDirection(c);
    for (unsigned r = 0; r < n && r < axis.size(); ++r) info.geometry.direction[r * 3 + c] = axis[r];
  }
  return info;
}

itk::ImageIOBase::Pointer open_for_read(const fs::path& path) {
  register_itk_io();
  if (!fs::exists(path)) throw IoError(path.string() + ": file not found");
  itk::ImageIOBase::Pointer io = itk::ImageIOFactory::CreateImageIO(path.c_str(), itk::IOFileModeEnum::ReadMode);
  if (!io)
    throw IoError(path.string() +
                  ": not a readable image (expected NIfTI .nii/.nii.gz, MetaImage .mha/.mhd, "
                  "NRRD .nrrd/.nhdr or a DICOM series folder)");
  const std::string ext = volume_extension(path);
  if (ext == ".nii" || ext == ".nii.gz") check_nifti_header(path);
  io->SetFileName(path.string());
  io->ReadImageInformation();
  return io;
}

std::pair<fs::path, std::string> split_series(const fs::path& path) {
  const std::string s = path.string();
  const auto hash = s.rfind('#');
  if (hash != std::string::npos && fs::is_directory(s.substr(0, hash))) return {s.substr(0, hash), s.substr(hash + 1)};
  return {path, ""};
}

const DicomSeries& pick_series(const std::vector<DicomSeries>& all, const fs::path& dir, const std::string& uid) {
  if (all.empty()) throw IoError(dir.string() + ": no DICOM series in this folder");
  if (uid.empty()) {
    if (all.size() == 1) return all.front();
    std::string uids;
    for (const auto& s : all) uids += (uids.empty() ? "" : ", ") + s.uid;
    throw IoError(dir.string() + ": holds " + std::to_string(all.size()) +
                  " DICOM series; pick one as FOLDER#UID (series: " + uids + ")");
  }
  for (const auto& s : all)
    if (s.uid == uid) return s;
  throw IoError(dir.string() + ": no DICOM series with UID " + uid);
}

template <typename F>
auto itk_guard(const fs::path& path, F&& f) -> decltype(f()) {
  try {
    return f();
  } catch (const itk::ExceptionObject& e) {
    std::string d = e.GetDescription();
    d.erase(std::remove(d.begin(), d.end(), '\n'), d.end());
    throw IoError(path.string() + ": " + d);
  }
}

// A temporary folder beside the target: the writer produces its files there under their final
// names (so a detached header such as .mhd still names its data file correctly), then each file
// is renamed into place, the header last.
class StagingDir {
 public:
  explicit StagingDir(const fs::path& target_dir) {
    static std::atomic<unsigned> counter{0};
    dir_ = target_dir / (".voxfit-write-" + std::to_string(::getpid()) + "-" + std::to_string(counter++));
    fs::create_directories(dir_);
  }
  ~StagingDir() {
    std::error_code ec;
    remove_tree(dir_, ec);
  }
  const fs::path& path() const { return dir_; }

 private:
  fs::path dir_;
};

}  // namespace

std::int64_t ImageInfo::channels() const {
  std::int64_t c = components;
  for (unsigned i = 3; i < dimension; ++i) c *= size[i];
  return c;
}

std::array<std::int64_t, 3> ImageInfo::size3() const {
  std::array<std::int64_t, 3> s{1, 1, 1};
  for (unsigned i = 0; i < 3 && i < size.size(); ++i) s[i] = size[i];
  return s;
}

std::string volume_extension(const fs::path& path) {
  std::string name = path.filename().string();
  std::transform(name.begin(), name.end(), name.begin(), ::tolower);
  if (name.size() > 7 && name.compare(name.size() - 7, 7, ".nii.gz") == 0) return ".nii.gz";
  std::string ext = path.extension().string();
  std::transform(ext.begin(), ext.end(), ext.begin(), ::tolower);
  return ext;
}

bool is_volume_file(const fs::path& path) {
  const std::string e = volume_extension(path);
  return e == ".nii" || e == ".nii.gz" || e == ".mha" || e == ".mhd" || e == ".nrrd" || e == ".nhdr";
}

std::vector<DicomSeries> list_dicom_series(const fs::path& dir) {
  register_itk_io();
  if (!fs::is_directory(dir)) throw IoError(dir.string() + ": not a folder (expected a DICOM series folder)");
  return itk_guard(dir, [&] {
    auto names = itk::GDCMSeriesFileNames::New();
    names->SetUseSeriesDetails(true);
    names->SetGlobalWarningDisplay(false);
    names->SetDirectory(dir.string());
    std::vector<DicomSeries> out;
    for (const std::string& uid : names->GetSeriesUIDs()) {
      DicomSeries s;
      s.files = names->GetFileNames(uid);
      // With series details on, GDCM's key is the UID plus more tags; report the UID itself.
      auto gdcm = itk::GDCMImageIO::New();
      gdcm->SetFileName(s.files.front());
      gdcm->ReadImageInformation();
      std::string series_uid;
      gdcm->GetValueFromTag("0020|000e", series_uid);
      while (!series_uid.empty() && (series_uid.back() == ' ' || series_uid.back() == '\0')) series_uid.pop_back();
      s.uid = series_uid.empty() ? uid : series_uid;
      out.push_back(std::move(s));
    }
    return out;
  });
}

Volume read_dicom_series(const fs::path& dir, const std::string& series_uid) {
  const auto all = list_dicom_series(dir);
  const DicomSeries& series = pick_series(all, dir, series_uid);
  return itk_guard(dir, [&] {
    using Image = itk::Image<float, 3>;
    auto gdcm = itk::GDCMImageIO::New();
    auto reader = itk::ImageSeriesReader<Image>::New();
    reader->SetImageIO(gdcm);
    reader->SetFileNames(series.files);
    reader->Update();
    // ITK records how far slice positions stray from even spacing; a gap means a lost slice.
    double deviation = 0;
    const double dz = reader->GetOutput()->GetSpacing()[2];
    if (itk::ExposeMetaData<double>(reader->GetOutput()->GetMetaDataDictionary(), "ITK_non_uniform_sampling_deviation",
                                    deviation) &&
        deviation > 0.01 * dz)
      throw IoError(dir.string() + ": the " + std::to_string(series.files.size()) +
                    " slices are not evenly spaced (off by up to " + std::to_string(deviation) +
                    " mm at a spacing of " + std::to_string(dz) + " mm); a slice is missing or from another scan");
    Volume v = from_itk_image(reader->GetOutput());
    v.pixel_type = pixel_type_of(gdcm->GetComponentType(), dir);
    if (!is_floating(v.pixel_type)) v.data = v.data.round().to(tensor_dtype(v.pixel_type));
    return v;
  });
}

ImageInfo read_image_info(const fs::path& spec) {
  // Not a structured binding: C++17 lambdas cannot capture those (clang refuses; the fuzz build).
  const auto split = split_series(spec);
  const fs::path& path = split.first;
  const std::string& uid = split.second;
  if (fs::is_directory(path)) {
    const auto all = list_dicom_series(path);
    const DicomSeries& series = pick_series(all, path, uid);
    return itk_guard(path, [&] {
      auto io = open_for_read(series.files.front());
      ImageInfo info = info_of(io.GetPointer(), path);
      info.dimension = 3;
      info.size = {info.size.at(0), info.size.size() > 1 ? info.size[1] : 1,
                   static_cast<std::int64_t>(series.files.size())};
      return info;
    });
  }
  return itk_guard(path, [&] {
    auto io = open_for_read(path);
    return info_of(io.GetPointer(), path);
  });
}

Channels read_channels(const fs::path& spec) {
  const auto [path, uid] = split_series(spec);
  if (fs::is_directory(path)) return {read_dicom_series(path, uid)};
  return itk_guard(path, [&, p = path] {
    auto io = open_for_read(p);
    const ImageInfo info = info_of(io.GetPointer(), p);
    if (info.dimension < 3 || info.dimension > 4) {
      throw IoError(p.string() + ": expected a 3D image, found a " + std::to_string(info.dimension) + "D image of " +
                    shape_text(info.size));
    }
    itk::ImageIORegion region(info.dimension);
    for (unsigned i = 0; i < info.dimension; ++i) {
      region.SetIndex(i, 0);
      region.SetSize(i, static_cast<itk::SizeValueType>(info.size[i]));
    }
    io->SetIORegion(region);
    const bool nifti = info.format == "NIfTI";
    const std::string ext = volume_extension(p);
    if (nifti && (ext == ".nii.gz" || ext == ".nii")) check_nifti_length(p, io->GetImageSizeInBytes());
    std::vector<char> buffer;
    try {
      buffer.resize(io->GetImageSizeInBytes());
    } catch (const std::bad_alloc&) {
      throw IoError(p.string() + ": its header declares " + std::to_string(io->GetImageSizeInBytes()) +
                    " bytes of voxels, more than this machine can hold (a corrupt header?)");
    }
    // A gzipped NIfTI is inflated once: by voxfit where ITK would only copy the stored voxels
    // (then no pass is needed to put back the NaN / Inf that nifti1_io zeroes), else by ITK and
    // once more by voxfit to check its length and restore those values.
    const bool gz = nifti && ext == ".nii.gz";
    const bool raw =
        gz && info.components == 1 && read_nifti_gz_voxels(p, buffer.size(), io->GetComponentSize(), buffer.data());
    if (!raw) io->Read(buffer.data());
    const auto s = info.size3();
    const std::int64_t voxels = s[0] * s[1] * s[2];
    const std::int64_t channels = info.channels();
    torch::Tensor all = buffer_to_tensor(buffer.data(), voxels * channels, info.pixel_type);
    const bool floating = is_floating(info.pixel_type);
    if (gz && !raw)
      verify_nifti_gz(p, floating ? &all : nullptr);
    else if (nifti && !gz && floating)
      restore_nifti_nonfinite(p, all);
    // A vector image interleaves its components per voxel; a 4D file stacks whole volumes.
    torch::Tensor stacked = info.components > 1 ? all.view({s[2], s[1], s[0], channels}).permute({3, 0, 1, 2})
                                                : all.view({channels, s[2], s[1], s[0]});
    Channels out;
    for (std::int64_t c = 0; c < channels; ++c) {
      Volume v;
      v.data = stacked[c].contiguous();
      v.geometry = info.geometry;
      v.pixel_type = info.pixel_type;
      out.push_back(std::move(v));
    }
    return out;
  });
}

Volume read_volume(const fs::path& path) {
  Channels c = read_channels(path);
  if (c.size() != 1)
    throw IoError(path.string() + ": expected one 3D volume, found " + std::to_string(c.size()) + " channels");
  return std::move(c.front());
}

void write_volume(const fs::path& path, const Volume& volume, bool compress) {
  register_itk_io();
  if (!volume.data.defined() || volume.data.dim() != 3) throw IoError(path.string() + ": can only write a 3D volume");
  if (!is_volume_file(path))
    throw IoError(path.string() + ": unknown file ending (expected .nii, .nii.gz, .mha, .mhd, .nrrd or .nhdr)");
  const fs::path dir = path.parent_path().empty() ? fs::path(".") : path.parent_path();
  if (!fs::is_directory(dir)) throw IoError(path.string() + ": folder does not exist");
  itk_guard(path, [&] {
    StagingDir staging(dir);
    const fs::path temp = staging.path() / path.filename();
    itk::ImageIOBase::Pointer io = itk::ImageIOFactory::CreateImageIO(temp.c_str(), itk::IOFileModeEnum::WriteMode);
    if (!io) throw IoError(path.string() + ": no ITK writer for this file ending");
    const auto size = volume.size();
    io->SetNumberOfDimensions(3);
    itk::ImageIORegion region(3);
    for (unsigned c = 0; c < 3; ++c) {
      io->SetDimensions(c, static_cast<unsigned>(size[c]));
      io->SetSpacing(c, volume.geometry.spacing[c]);
      io->SetOrigin(c, volume.geometry.origin[c]);
      std::vector<double> axis(3);
      for (unsigned r = 0; r < 3; ++r) axis[r] = volume.geometry.direction[r * 3 + c];
      io->SetDirection(c, axis);
      region.SetIndex(c, 0);
      region.SetSize(c, static_cast<itk::SizeValueType>(size[c]));
    }
    io->SetPixelType(itk::IOPixelEnum::SCALAR);
    io->SetNumberOfComponents(1);
    io->SetComponentType(component_of(volume.pixel_type));
    io->SetUseCompression(compress);
    io->SetFileName(temp.string());
    io->SetIORegion(region);
    const std::vector<char> buffer = tensor_to_buffer(volume.data, volume.pixel_type);
    io->Write(buffer.data());
    // Data files first, the named file last: a reader never finds a header without its data.
    for (const auto& entry : fs::directory_iterator(staging.path()))
      if (entry.path().filename() != path.filename()) rename_durable(entry.path(), dir / entry.path().filename());
    rename_durable(temp, path);
    return 0;
  });
}

void write_dicom_series(const fs::path& dir, const Volume& volume, const std::string& series_uid) {
  register_itk_io();
  fs::create_directories(dir);
  itk_guard(dir, [&] {
    const auto size = volume.size();
    const torch::Tensor slices = volume.data.round().clamp(-32768, 32767).to(torch::kInt16).contiguous();
    std::ostringstream iop;
    iop.precision(10);
    for (int c = 0; c < 2; ++c)
      for (int r = 0; r < 3; ++r) iop << (c || r ? "\\" : "") << volume.geometry.direction[r * 3 + c];
    for (std::int64_t z = 0; z < size[2]; ++z) {
      auto io = itk::GDCMImageIO::New();
      io->KeepOriginalUIDOn();
      const auto p = volume.geometry.index_to_point({0.0, 0.0, static_cast<double>(z)});
      std::ostringstream ipp, spacing;
      ipp.precision(10);
      spacing.precision(10);
      ipp << p[0] << "\\" << p[1] << "\\" << p[2];
      spacing << volume.geometry.spacing[1] << "\\" << volume.geometry.spacing[0];
      itk::MetaDataDictionary& dict = io->GetMetaDataDictionary();
      itk::EncapsulateMetaData<std::string>(dict, "0008|0060", "CT");
      itk::EncapsulateMetaData<std::string>(dict, "0020|000e", series_uid);
      itk::EncapsulateMetaData<std::string>(dict, "0020|000d", series_uid + ".1");
      itk::EncapsulateMetaData<std::string>(dict, "0008|0018", series_uid + ".2." + std::to_string(z + 1));
      itk::EncapsulateMetaData<std::string>(dict, "0020|0013", std::to_string(z + 1));
      itk::EncapsulateMetaData<std::string>(dict, "0020|0032", ipp.str());
      itk::EncapsulateMetaData<std::string>(dict, "0020|0037", iop.str());
      itk::EncapsulateMetaData<std::string>(dict, "0028|0030", spacing.str());
      itk::EncapsulateMetaData<std::string>(dict, "0018|0050", std::to_string(volume.geometry.spacing[2]));
      // A 3D image of one slice, so GDCM takes the slice's full 3D position from the origin.
      io->SetNumberOfDimensions(3);
      itk::ImageIORegion region(3);
      for (unsigned c = 0; c < 3; ++c) {
        io->SetDimensions(c, c < 2 ? static_cast<unsigned>(size[c]) : 1u);
        io->SetSpacing(c, volume.geometry.spacing[c]);
        io->SetOrigin(c, p[c]);
        std::vector<double> axis(3);
        for (unsigned r = 0; r < 3; ++r) axis[r] = volume.geometry.direction[r * 3 + c];
        io->SetDirection(c, axis);
        region.SetIndex(c, 0);
        region.SetSize(c, c < 2 ? static_cast<itk::SizeValueType>(size[c]) : 1u);
      }
      io->SetPixelType(itk::IOPixelEnum::SCALAR);
      io->SetComponentType(itk::IOComponentEnum::SHORT);
      io->SetNumberOfComponents(1);
      char name[32];
      std::snprintf(name, sizeof name, "IMG%04lld.dcm", static_cast<long long>(z));
      io->SetFileName((dir / name).string());
      io->SetIORegion(region);
      io->Write(slices[z].data_ptr());
    }
    return 0;
  });
}

}  // namespace voxfit::io
