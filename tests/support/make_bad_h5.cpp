// Writes a corpus of corrupted HDF5 case files (each meant to hold "image" [16, 12, 10] float32
// and "label" uint8) into a folder, one file per way a file can be broken:
//   truncated_superblock.h5  the file cut inside its superblock
//   corrupt_btree.h5         the chunk index's B-tree nodes claim 65535 entries and point nowhere
//   bad_filter.h5            "image" needs a filter (id 300) that no reader has registered
//   scalar_dataspace.h5      "image" has a scalar dataspace
//   rank5.h5                 "image" has rank 5
//   zero_byte_chunks.h5      "image" is deflate-compressed and every chunk is stored with 0 bytes
//   link_loop.h5             "image" is a soft link to itself, "label" a soft-link cycle of two
// usage: voxfit_make_bad_h5 DIR      (the HDF5 C API only: the suite's own generator, not voxfit)
#include <hdf5.h>

#include <cstdio>
#include <cstring>
#include <fstream>
#include <iterator>
#include <string>
#include <vector>

namespace {

const hsize_t kDims[3] = {16, 12, 10};
const hsize_t kChunk[3] = {8, 6, 5};

void check(bool ok, const std::string& what) {
  if (!ok) {
    std::fprintf(stderr, "make_bad_h5: %s failed\n", what.c_str());
    std::exit(1);
  }
}

hid_t create(const std::string& path) {
  const hid_t f = H5Fcreate(path.c_str(), H5F_ACC_TRUNC, H5P_DEFAULT, H5P_DEFAULT);
  check(f >= 0, "create " + path);
  return f;
}

// A [16, 12, 10] dataset, chunked and deflated when `dcpl` says so.
void write_dataset(hid_t file, const char* name, hid_t type, const void* data, hid_t dcpl = H5P_DEFAULT) {
  const hid_t space = H5Screate_simple(3, kDims, nullptr);
  const hid_t ds = H5Dcreate2(file, name, type, space, H5P_DEFAULT, dcpl, H5P_DEFAULT);
  check(ds >= 0, std::string("dataset ") + name);
  if (data) check(H5Dwrite(ds, type, H5S_ALL, H5S_ALL, H5P_DEFAULT, data) >= 0, std::string("write ") + name);
  H5Dclose(ds);
  H5Sclose(space);
}

std::vector<float> image_values() {
  std::vector<float> v(16 * 12 * 10);
  for (std::size_t i = 0; i < v.size(); ++i) v[i] = static_cast<float>((i * 7919) % 1000) / 10.0f;
  return v;
}

std::vector<unsigned char> label_values() {
  std::vector<unsigned char> v(16 * 12 * 10);
  for (std::size_t i = 0; i < v.size(); ++i) v[i] = static_cast<unsigned char>(i % 3);
  return v;
}

hid_t deflate_chunks() {
  const hid_t dcpl = H5Pcreate(H5P_DATASET_CREATE);
  H5Pset_chunk(dcpl, 3, kChunk);
  H5Pset_deflate(dcpl, 4);
  return dcpl;
}

void write_label(hid_t f) {
  const auto label = label_values();
  write_dataset(f, "label", H5T_NATIVE_UCHAR, label.data());
}

std::vector<char> slurp(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}

void spit(const std::string& path, const std::vector<char>& bytes) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
  check(static_cast<bool>(out), "rewrite " + path);
}

void good_case(const std::string& path, bool chunked) {
  const hid_t f = create(path);
  const auto image = image_values();
  const hid_t dcpl = chunked ? deflate_chunks() : H5P_DEFAULT;
  write_dataset(f, "image", H5T_NATIVE_FLOAT, image.data(), dcpl);
  if (chunked) H5Pclose(dcpl);
  write_label(f);
  H5Fclose(f);
}

size_t pass_through(unsigned int, size_t, const unsigned int[], size_t nbytes, size_t*, void**) { return nbytes; }

}  // namespace

int main(int argc, char** argv) {
  if (argc != 2) {
    std::fprintf(stderr, "usage: voxfit_make_bad_h5 DIR\n");
    return 2;
  }
  const std::string dir = argv[1];
  H5Eset_auto2(H5E_DEFAULT, nullptr, nullptr);

  {  // cut inside the superblock (48 bytes of a version-0 superblock's 96)
    const std::string p = dir + "/truncated_superblock.h5";
    good_case(p, false);
    auto bytes = slurp(p);
    bytes.resize(48);
    spit(p, bytes);
  }
  {  // every chunk B-tree node ("TREE", node type 1) claims 65535 entries and garbage children
    const std::string p = dir + "/corrupt_btree.h5";
    good_case(p, true);
    auto bytes = slurp(p);
    int nodes = 0;
    for (std::size_t i = 0; i + 24 < bytes.size(); ++i) {
      if (std::memcmp(&bytes[i], "TREE", 4) != 0 || bytes[i + 4] != 1) continue;
      bytes[i + 6] = bytes[i + 7] = '\xff';
      for (std::size_t k = i + 24; k < std::min(bytes.size(), i + 24 + 256); ++k)
        bytes[k] = static_cast<char>(0xA5 ^ k);
      ++nodes;
    }
    check(nodes > 0, "find a chunk B-tree node");
    spit(p, bytes);
  }
  {  // a filter this process registers while writing, which no reader has
    const H5Z_class2_t filter = {
        H5Z_CLASS_T_VERS, static_cast<H5Z_filter_t>(300), 1, 1, "voxfit-test-only", nullptr, nullptr, pass_through};
    check(H5Zregister(&filter) >= 0, "register filter 300");
    const hid_t f = create(dir + "/bad_filter.h5");
    const hid_t dcpl = H5Pcreate(H5P_DATASET_CREATE);
    H5Pset_chunk(dcpl, 3, kChunk);
    check(H5Pset_filter(dcpl, 300, H5Z_FLAG_MANDATORY, 0, nullptr) >= 0, "set filter 300");
    const auto image = image_values();
    write_dataset(f, "image", H5T_NATIVE_FLOAT, image.data(), dcpl);
    H5Pclose(dcpl);
    write_label(f);
    H5Fclose(f);
    H5Zunregister(static_cast<H5Z_filter_t>(300));
  }
  {  // a scalar "image"
    const hid_t f = create(dir + "/scalar_dataspace.h5");
    const hid_t space = H5Screate(H5S_SCALAR);
    const hid_t ds = H5Dcreate2(f, "image", H5T_NATIVE_FLOAT, space, H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT);
    const float one = 1.0f;
    check(ds >= 0 && H5Dwrite(ds, H5T_NATIVE_FLOAT, H5S_ALL, H5S_ALL, H5P_DEFAULT, &one) >= 0, "scalar image");
    H5Dclose(ds);
    H5Sclose(space);
    write_label(f);
    H5Fclose(f);
  }
  {  // rank 5
    const hid_t f = create(dir + "/rank5.h5");
    const hsize_t dims[5] = {1, 2, 16, 12, 10};
    const hid_t space = H5Screate_simple(5, dims, nullptr);
    const hid_t ds = H5Dcreate2(f, "image", H5T_NATIVE_FLOAT, space, H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT);
    std::vector<float> v(2 * 16 * 12 * 10, 1.0f);
    check(ds >= 0 && H5Dwrite(ds, H5T_NATIVE_FLOAT, H5S_ALL, H5S_ALL, H5P_DEFAULT, v.data()) >= 0, "rank-5 image");
    H5Dclose(ds);
    H5Sclose(space);
    write_label(f);
    H5Fclose(f);
  }
  {  // deflated chunks stored with no bytes at all
    const hid_t f = create(dir + "/zero_byte_chunks.h5");
    const hid_t dcpl = deflate_chunks();
    H5Pset_alloc_time(dcpl, H5D_ALLOC_TIME_INCR);
    write_dataset(f, "image", H5T_NATIVE_FLOAT, nullptr, dcpl);
    H5Pclose(dcpl);
    const hid_t ds = H5Dopen2(f, "image", H5P_DEFAULT);
    const char nothing[1] = {0};
    int written = 0;
    for (hsize_t z = 0; z < kDims[0]; z += kChunk[0])
      for (hsize_t y = 0; y < kDims[1]; y += kChunk[1])
        for (hsize_t x = 0; x < kDims[2]; x += kChunk[2]) {
          const hsize_t offset[3] = {z, y, x};
          if (H5Dwrite_chunk(ds, H5P_DEFAULT, 0, offset, 0, nothing) >= 0) ++written;
        }
    // Where HDF5 refuses an empty chunk, store one zero byte instead: still no deflate stream.
    if (written == 0)
      for (hsize_t z = 0; z < kDims[0]; z += kChunk[0])
        for (hsize_t y = 0; y < kDims[1]; y += kChunk[1])
          for (hsize_t x = 0; x < kDims[2]; x += kChunk[2]) {
            const hsize_t offset[3] = {z, y, x};
            check(H5Dwrite_chunk(ds, H5P_DEFAULT, 0, offset, 1, nothing) >= 0, "write an empty chunk");
          }
    H5Dclose(ds);
    write_label(f);
    H5Fclose(f);
  }
  {  // soft links in circles
    const hid_t f = create(dir + "/link_loop.h5");
    check(H5Lcreate_soft("/image", f, "image", H5P_DEFAULT, H5P_DEFAULT) >= 0, "self link");
    check(H5Lcreate_soft("/loop_b", f, "label", H5P_DEFAULT, H5P_DEFAULT) >= 0, "link a");
    check(H5Lcreate_soft("/label", f, "loop_b", H5P_DEFAULT, H5P_DEFAULT) >= 0, "link b");
    H5Fclose(f);
  }
  return 0;
}
