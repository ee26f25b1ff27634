#include "nifti_integrity.h"

#include <zlib.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <fstream>
#include <vector>

#include "voxfit/core/error.h"

namespace voxfit::io {

namespace {

// NIfTI-1 header fields (little-endian files; a byte-swapped header is left to ITK alone).
constexpr int kHeaderSize = 348;
constexpr int kDimOffset = 40;
constexpr int kDatatypeOffset = 70;
constexpr int kPixdimOffset = 76;
constexpr int kQformCodeOffset = 252;
constexpr int kSformCodeOffset = 254;
constexpr int kQuaternOffset = 256;  // quatern_b, c, d, qoffset_x, y, z
constexpr int kSrowOffset = 280;     // srow_x[4], srow_y[4], srow_z[4]
constexpr int kMagicOffset = 344;
constexpr int kVoxOffsetOffset = 108;
constexpr short kFloat32 = 16;
constexpr short kFloat64 = 64;

// The largest header + extensions a NIfTI file puts before its voxels that we accept.
constexpr std::uint64_t kMaxHeaderBytes = 1u << 20;

class GzFile {
 public:
  explicit GzFile(const std::filesystem::path& p) : f_(gzopen(p.c_str(), "rb")) {}
  ~GzFile() {
    if (f_) gzclose(f_);
  }
  GzFile(const GzFile&) = delete;
  GzFile& operator=(const GzFile&) = delete;
  explicit operator bool() const { return f_ != nullptr; }
  // Reads up to n bytes; returns how many arrived (fewer at a premature end or an error).
  std::size_t read(void* buf, std::size_t n) {
    std::size_t got = 0;
    while (got < n) {
      const unsigned want = static_cast<unsigned>(std::min<std::size_t>(n - got, 1u << 30));
      const int r = gzread(f_, static_cast<char*>(buf) + got, want);
      if (r <= 0) break;
      got += static_cast<std::size_t>(r);
    }
    return got;
  }
  // Why a read stopped early: empty at a clean end of the data, "truncated" for a stream cut
  // short (zlib's Z_BUF_ERROR), else zlib's own message (which zlib prefixes with the path).
  std::string error() {
    int code = Z_OK;
    const char* msg = gzerror(f_, &code);
    if (code == Z_OK || code == Z_STREAM_END) return "";
    if (code == Z_BUF_ERROR) return "truncated";
    std::string m = msg ? msg : "zlib error";
    const auto colon = m.rfind(": ");
    return colon == std::string::npos ? m : m.substr(colon + 2);
  }

 private:
  gzFile f_;
};

}  // namespace

void check_nifti_length(const std::filesystem::path& path, std::uint64_t voxel_bytes) {
  std::error_code ec;
  const std::uint64_t file_bytes = std::filesystem::file_size(path, ec);
  if (ec) throw IoError(path.string() + ": cannot read its size: " + ec.message());
  std::ifstream in(path, std::ios::binary);
  unsigned char magic[2] = {0, 0};
  in.read(reinterpret_cast<char*>(magic), 2);
  if (!in || magic[0] != 0x1f || magic[1] != 0x8b) {
    // nifti1_io zero-fills what a plain file lacks, so a short file would read as valid zeros.
    if (file_bytes < kHeaderSize + voxel_bytes)
      throw IoError(path.string() + ": truncated NIfTI file or lying header (" + std::to_string(file_bytes) +
                    " bytes, the header declares " + std::to_string(voxel_bytes) + " bytes of voxels)");
    return;
  }
  // Deflate cannot shrink data more than 1032:1, so a header declaring more voxels than that lies.
  if (voxel_bytes / 1032 > file_bytes + kMaxHeaderBytes)
    throw IoError(path.string() + ": corrupt NIfTI header: it declares " + std::to_string(voxel_bytes) +
                  " bytes of voxels, more than " + std::to_string(file_bytes) + " gzip bytes can hold");
  // The exact length is checked by the pass that inflates the file (read_nifti_gz_voxels or
  // verify_nifti_gz): the gzip trailer holds the length of the last member only, and a file of
  // several members (pigz --independent, bgzip, concatenated writers) is a valid .nii.gz.
}

void check_nifti_header(const std::filesystem::path& path) {
  GzFile f(path);
  if (!f) return;
  char header[kHeaderSize];
  if (f.read(header, kHeaderSize) != kHeaderSize) return;  // ITK names what is wrong with it
  // Only NIfTI-1 single files; anything else is left to ITK.
  if (std::memcmp(header + kMagicOffset, "n+1", 4) != 0 && std::memcmp(header + kMagicOffset, "ni1", 4) != 0) return;
  // nifti1_io's rule: a dim[0] outside 0..7 means the header is byte-swapped.
  std::int16_t dim0 = 0;
  std::memcpy(&dim0, header + kDimOffset, 2);
  const bool swapped = dim0 < 0 || dim0 > 7;
  const auto i16 = [&](int offset) {
    std::uint16_t v;
    std::memcpy(&v, header + offset, 2);
    return static_cast<std::int16_t>(swapped ? __builtin_bswap16(v) : v);
  };
  const auto i32 = [&](int offset) {
    std::uint32_t v;
    std::memcpy(&v, header + offset, 4);
    return static_cast<std::int32_t>(swapped ? __builtin_bswap32(v) : v);
  };
  const auto f32 = [&](int offset) {
    std::uint32_t v;
    std::memcpy(&v, header + offset, 4);
    if (swapped) v = __builtin_bswap32(v);
    float out;
    std::memcpy(&out, &v, 4);
    return out;
  };
  // What nifti1_io would reject with its own lines on stderr, refused here in one line instead.
  const auto bad = [&](const std::string& field, long long v, const std::string& expected) {
    throw IoError(path.string() + ": header field " + field + " is " + std::to_string(v) + "; expected " + expected);
  };
  if (i32(0) != kHeaderSize) bad("sizeof_hdr", i32(0), "348 (a NIfTI-1 header)");
  const int dims = i16(kDimOffset);
  if (dims < 1 || dims > 7) bad("dim[0]", dims, "1..7 axes");
  for (int a = 1; a <= dims; ++a)
    if (i16(kDimOffset + 2 * a) <= 0) bad("dim[" + std::to_string(a) + "]", i16(kDimOffset + 2 * a), "a positive size");
  if (const int t = i16(kDatatypeOffset); t == 0 || t == 1)
    bad("datatype", t, "a voxel type code (e.g. 4 int16, 16 float32)");
  const auto fail = [&](const std::string& field, float v, const std::string& expected) {
    throw IoError(path.string() + ": header field " + field + " is " + std::to_string(v) + "; expected " + expected);
  };
  static const char* kAxes[] = {"x", "y", "z"};
  for (int a = 1; a <= 3 && a <= dims; ++a)
    if (const float v = f32(kPixdimOffset + 4 * a); !(std::isfinite(v) && v > 0))
      fail("pixdim[" + std::to_string(a) + "] (" + kAxes[a - 1] + " spacing)", v, "a positive voxel size in mm");
  if (i16(kQformCodeOffset) > 0)
    for (int k = 0; k < 6; ++k)
      if (const float v = f32(kQuaternOffset + 4 * k); !std::isfinite(v))
        fail(std::string(k < 3 ? "quatern_" : "qoffset_") + "bcdxyz"[k], v, "a finite number (qform_code > 0)");
  if (i16(kSformCodeOffset) > 0)
    for (int k = 0; k < 12; ++k)
      if (const float v = f32(kSrowOffset + 4 * k); !std::isfinite(v))
        fail(std::string("srow_") + "xyz"[k / 4] + "[" + std::to_string(k % 4) + "]", v,
             "a finite number (sform_code > 0)");
  if (const float v = f32(kPixdimOffset); !std::isfinite(v)) fail("pixdim[0] (qfac)", v, "-1 or 1");
}

namespace {

struct RawHeader {
  bool swapped = false;
  std::int16_t dims = 0, datatype = 0, bitpix = 0;
  std::int16_t dim[8] = {};
  std::int16_t intent = 0;
  float vox_offset = 0, slope = 0, inter = 0;
  bool single_file = false;
};

constexpr int kBitpixOffset = 72;
constexpr int kSclSlopeOffset = 112;
constexpr int kIntentCodeOffset = 68;

RawHeader parse_header(const char* h) {
  RawHeader r;
  std::int16_t dim0;
  std::memcpy(&dim0, h + kDimOffset, 2);
  r.swapped = dim0 < 0 || dim0 > 7;
  const auto i16 = [&](int o) {
    std::uint16_t v;
    std::memcpy(&v, h + o, 2);
    return static_cast<std::int16_t>(r.swapped ? __builtin_bswap16(v) : v);
  };
  const auto f32 = [&](int o) {
    std::uint32_t v;
    std::memcpy(&v, h + o, 4);
    if (r.swapped) v = __builtin_bswap32(v);
    float f;
    std::memcpy(&f, &v, 4);
    return f;
  };
  r.dims = i16(kDimOffset);
  for (int a = 0; a < 8; ++a) r.dim[a] = i16(kDimOffset + 2 * a);
  r.datatype = i16(kDatatypeOffset);
  r.bitpix = i16(kBitpixOffset);
  r.intent = i16(kIntentCodeOffset);
  r.vox_offset = f32(kVoxOffsetOffset);
  r.slope = f32(kSclSlopeOffset);
  r.inter = f32(kSclSlopeOffset + 4);
  r.single_file = std::memcmp(h + kMagicOffset, "n+1", 4) == 0;
  return r;
}

// NIfTI datatype codes whose voxels ITK's reader hands back as stored (one scalar component).
bool plain_scalar_type(std::int16_t t) {
  switch (t) {
    case 2:
    case 4:
    case 8:
    case 16:
    case 64:
    case 256:
    case 512:
    case 768:
    case 1024:
    case 1280:
      return true;
    default:
      return false;
  }
}

// Reads exactly n bytes of the inflated stream, or says why not in an IoError naming the file.
void inflate_exactly(GzFile& f, void* out, std::size_t n, const std::filesystem::path& path, std::uint64_t expected) {
  const std::size_t got = f.read(out, n);
  if (got == n) return;
  const std::string why = f.error();
  if (!why.empty() && why != "truncated") throw IoError(path.string() + ": corrupt gzip data (" + why + ")");
  throw IoError(path.string() + ": truncated gzip data (the file ends before the header and the " +
                std::to_string(expected) + " bytes of voxels it declares)");
}

// Reads to the end of the stream, so that zlib checks the CRC and length of every member.
void inflate_to_end(GzFile& f, const std::filesystem::path& path) {
  std::vector<char> rest(1u << 16);
  while (f.read(rest.data(), rest.size()) == rest.size()) {
  }
  const std::string why = f.error();
  if (why == "truncated") throw IoError(path.string() + ": truncated gzip data (its last member has no end)");
  if (!why.empty()) throw IoError(path.string() + ": corrupt gzip data (" + why + ")");
}

}  // namespace

bool read_nifti_gz_voxels(const std::filesystem::path& path, std::uint64_t voxel_bytes, std::size_t component_bytes,
                          char* out) {
  GzFile f(path);
  if (!f) return false;
  char header[kHeaderSize];
  if (f.read(header, kHeaderSize) != kHeaderSize) return false;
  const RawHeader h = parse_header(header);
  const bool unscaled = h.slope == 0.0f || (h.slope == 1.0f && h.inter == 0.0f);
  std::uint64_t voxels = 1;
  for (int a = 1; a <= h.dims && a <= 7; ++a) voxels *= static_cast<std::uint64_t>(std::max<std::int16_t>(h.dim[a], 0));
  // What ITK's NiftiImageIO::Read does beyond copying the stored voxels (rescaling, vector and
  // RGB voxels, Analyze and two-file layouts) stays with ITK.
  if (!h.single_file || !unscaled || !plain_scalar_type(h.datatype) || h.dims < 3 || h.dims > 4 ||
      h.bitpix != static_cast<std::int16_t>(8 * component_bytes) || voxels * component_bytes != voxel_bytes ||
      h.intent != 0 || !(h.vox_offset >= kHeaderSize && h.vox_offset <= kMaxHeaderBytes) ||
      h.vox_offset != static_cast<float>(static_cast<std::uint64_t>(h.vox_offset)))
    return false;
  std::vector<char> extensions(static_cast<std::size_t>(h.vox_offset) - kHeaderSize);
  inflate_exactly(f, extensions.data(), extensions.size(), path, voxel_bytes);
  inflate_exactly(f, out, static_cast<std::size_t>(voxel_bytes), path, voxel_bytes);
  inflate_to_end(f, path);
  if (h.swapped && component_bytes > 1) {
    for (std::uint64_t i = 0; i < voxel_bytes; i += component_bytes) std::reverse(out + i, out + i + component_bytes);
  }
  return true;
}

std::int64_t verify_nifti_gz(const std::filesystem::path& path, torch::Tensor* values) {
  GzFile f(path);
  if (!f) throw IoError(path.string() + ": cannot open");
  char header[kHeaderSize];
  if (f.read(header, kHeaderSize) != kHeaderSize)
    throw IoError(path.string() + ": truncated gzip data (no complete NIfTI header)");
  const RawHeader h = parse_header(header);
  // The stored voxels (ITK's buffer can differ: a scaled integer file reads as float).
  std::uint64_t voxel_bytes = std::max<std::int16_t>(h.bitpix, 0) / 8;
  for (int a = 1; a <= h.dims && a <= 7; ++a)
    voxel_bytes *= static_cast<std::uint64_t>(std::max<std::int16_t>(h.dim[a], 0));
  if (!(h.vox_offset >= kHeaderSize && h.vox_offset <= kMaxHeaderBytes)) {
    inflate_to_end(f, path);
    return 0;
  }
  std::vector<char> extensions(static_cast<std::size_t>(h.vox_offset) - kHeaderSize);
  inflate_exactly(f, extensions.data(), extensions.size(), path, voxel_bytes);
  const bool restore = values != nullptr && !h.swapped &&
                       ((h.datatype == kFloat32 && values->scalar_type() == torch::kFloat32) ||
                        (h.datatype == kFloat64 && values->scalar_type() == torch::kFloat64));
  const std::size_t item = !restore ? 1 : h.datatype == kFloat32 ? 4 : 8;
  const std::int64_t n = restore ? values->numel() : 0;
  std::vector<char> chunk(std::size_t{1} << 22);
  std::uint64_t left = voxel_bytes, done = 0;
  std::int64_t bad = 0;
  while (left > 0) {
    const std::size_t count = static_cast<std::size_t>(std::min<std::uint64_t>(left, chunk.size()));
    inflate_exactly(f, chunk.data(), count, path, voxel_bytes);
    if (restore)
      for (std::size_t i = 0; i + item <= count; i += item) {
        const std::int64_t at = static_cast<std::int64_t>((done + i) / item);
        if (at >= n) break;
        if (item == 4) {
          float v;
          std::memcpy(&v, chunk.data() + i, 4);
          if (std::isfinite(v)) continue;
          values->data_ptr<float>()[at] = v;
        } else {
          double v;
          std::memcpy(&v, chunk.data() + i, 8);
          if (std::isfinite(v)) continue;
          values->data_ptr<double>()[at] = v;
        }
        ++bad;
      }
    done += count;
    left -= count;
  }
  inflate_to_end(f, path);
  return bad;
}

std::int64_t restore_nifti_nonfinite(const std::filesystem::path& path, torch::Tensor& values) {
  GzFile f(path);
  if (!f) throw IoError(path.string() + ": cannot open");
  char header[kHeaderSize];
  if (f.read(header, kHeaderSize) != kHeaderSize) throw IoError(path.string() + ": truncated NIfTI header");
  std::int32_t sizeof_hdr = 0;
  std::memcpy(&sizeof_hdr, header, 4);
  short datatype = 0;
  std::memcpy(&datatype, header + kDatatypeOffset, 2);
  float vox_offset = 0;
  std::memcpy(&vox_offset, header + kVoxOffsetOffset, 4);
  const bool f32 = datatype == kFloat32 && values.scalar_type() == torch::kFloat32;
  const bool f64 = datatype == kFloat64 && values.scalar_type() == torch::kFloat64;
  // NaN or absurd offsets are left to ITK's verdict rather than cast to a size.
  if (sizeof_hdr != kHeaderSize || !(f32 || f64) || !(vox_offset >= kHeaderSize && vox_offset <= kMaxHeaderBytes))
    return 0;
  std::vector<char> skip(static_cast<std::size_t>(vox_offset) - kHeaderSize);
  if (f.read(skip.data(), skip.size()) != skip.size()) throw IoError(path.string() + ": truncated NIfTI file");
  const std::size_t item = f32 ? 4 : 8;
  const std::int64_t n = values.numel();
  std::vector<char> chunk(item * (1u << 20));
  std::int64_t done = 0, bad = 0;
  while (done < n) {
    const std::int64_t count = std::min<std::int64_t>(n - done, 1 << 20);
    if (f.read(chunk.data(), static_cast<std::size_t>(count) * item) != static_cast<std::size_t>(count) * item)
      throw IoError(path.string() + ": truncated NIfTI voxel data (expected " + std::to_string(n) + " voxels)");
    for (std::int64_t i = 0; i < count; ++i) {
      if (f32) {
        float v;
        std::memcpy(&v, chunk.data() + i * 4, 4);
        if (!std::isfinite(v)) {
          values.data_ptr<float>()[done + i] = v;
          ++bad;
        }
      } else {
        double v;
        std::memcpy(&v, chunk.data() + i * 8, 8);
        if (!std::isfinite(v)) {
          values.data_ptr<double>()[done + i] = v;
          ++bad;
        }
      }
    }
    done += count;
  }
  return bad;
}

}  // namespace voxfit::io
