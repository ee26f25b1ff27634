#pragma once
// What the reliability tests share: running voxfit as a child process (to kill it, or to limit the
// size of the files it may write), the checks every failure must pass, and builders for a corpus of
// broken inputs written into the test's temp folder.
#include <fcntl.h>
#include <signal.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>
#include <zlib.h>

#include <chrono>
#include <cstring>
#include <fstream>
#include <functional>
#include <optional>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "io/io_test_util.h"
#include "support/test_support.h"
#include "voxfit/io/volume_io.h"

namespace voxfit::test {

inline std::string read_file(const fs::path& p) {
  std::ifstream in(p, std::ios::binary);
  return std::string((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
}

inline std::size_t count_lines(const std::string& s) {
  std::size_t n = 0;
  for (char c : s) n += c == '\n';
  return n;
}

/// A voxfit process started with fork/exec: its pid, and files holding its stdout and stderr.
struct Child {
  pid_t pid = -1;
  fs::path out, err;
};

struct SpawnOptions {
  /// RLIMIT_FSIZE for the child: a write past this many bytes fails with EFBIG (SIGXFSZ is
  /// ignored), as on a full disk.
  std::optional<rlim_t> max_file_bytes;
};

inline Child spawn_voxfit(const std::vector<std::string>& args, const fs::path& log_base, const SpawnOptions& o = {}) {
  Child c;
  c.out = log_base.string() + ".out";
  c.err = log_base.string() + ".err";
  std::vector<std::string> argv_s{voxfit_binary().string()};
  argv_s.insert(argv_s.end(), args.begin(), args.end());
  std::vector<char*> argv;
  for (auto& a : argv_s) argv.push_back(a.data());
  argv.push_back(nullptr);
  c.pid = ::fork();
  if (c.pid == 0) {
    const int out = ::open(c.out.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
    const int err = ::open(c.err.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
    const int in = ::open("/dev/null", O_RDONLY);
    if (out < 0 || err < 0 || in < 0) ::_exit(120);
    ::dup2(in, 0);
    ::dup2(out, 1);
    ::dup2(err, 2);
    if (o.max_file_bytes) {
      ::signal(SIGXFSZ, SIG_IGN);  // stays ignored across exec
      const rlimit lim{*o.max_file_bytes, *o.max_file_bytes};
      if (::setrlimit(RLIMIT_FSIZE, &lim) != 0) ::_exit(121);
    }
    ::execv(argv[0], argv.data());
    ::_exit(122);
  }
  return c;
}

/// Waits for the child; exit_code is 128 + signal for a killed one, as a shell reports it.
inline RunResult wait_child(const Child& c) {
  int status = 0;
  while (::waitpid(c.pid, &status, 0) < 0 && errno == EINTR) {
  }
  RunResult r;
  r.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
  r.out = read_file(c.out);
  r.err = read_file(c.err);
  return r;
}

inline RunResult run_child(const std::vector<std::string>& args, const fs::path& log_base, const SpawnOptions& o = {}) {
  return wait_child(spawn_voxfit(args, log_base, o));
}

/// Files under `dir` (recursively) that a writer leaves only when it died or failed mid-way:
/// voxfit's temp files (".NAME.tmpPID_N") and staging folders (".voxfit-write-*").
inline std::vector<std::string> partial_files(const fs::path& dir) {
  std::vector<std::string> out;
  if (!fs::exists(dir)) return out;
  for (const auto& e : fs::recursive_directory_iterator(dir)) {
    const std::string n = e.path().filename().string();
    if (n.find(".tmp") != std::string::npos || n.rfind(".voxfit-write-", 0) == 0) out.push_back(e.path().string());
  }
  return out;
}

/// Regular files under `dir`, recursively (empty if it does not exist).
inline std::vector<std::string> files_under(const fs::path& dir) {
  std::vector<std::string> out;
  if (!fs::exists(dir)) return out;
  for (const auto& e : fs::recursive_directory_iterator(dir))
    if (e.is_regular_file()) out.push_back(e.path().string());
  return out;
}

/// The checks every refused input must pass: a non-zero exit that is not a signal or an abort,
/// exactly one line on stderr starting "voxfit: error:", naming everything in `names`.
inline ::testing::AssertionResult clean_failure(const RunResult& r, const std::vector<std::string>& names,
                                                std::optional<int> exit_code = std::nullopt) {
  const auto fail = [&](const std::string& why) {
    return ::testing::AssertionFailure() << why << "\n  exit " << r.exit_code << "\n  stderr: " << r.err
                                         << "\n  stdout (tail): "
                                         << r.out.substr(r.out.size() > 600 ? r.out.size() - 600 : 0);
  };
  if (r.exit_code == 0) return fail("exit 0 for a bad input");
  if (r.exit_code >= 128) return fail("killed by signal " + std::to_string(r.exit_code - 128));
  if (exit_code && r.exit_code != *exit_code) return fail("exit code, expected " + std::to_string(*exit_code));
  if (count_lines(r.err) != 1 || r.err.back() != '\n') return fail("stderr is not exactly one line");
  if (r.err.rfind("voxfit: error: ", 0) != 0) return fail("stderr does not start with 'voxfit: error: '");
  for (const auto& n : names)
    if (r.err.find(n) == std::string::npos) return fail("stderr does not name '" + n + "'");
  return ::testing::AssertionSuccess();
}

// ---- NIfTI-1 header surgery (little-endian, single file, vox_offset 352) ----
constexpr std::size_t kNiiDim = 40;     // short dim[8]
constexpr std::size_t kNiiPixdim = 76;  // float pixdim[8]

inline std::string gunzip(const fs::path& p) {
  gzFile f = gzopen(p.c_str(), "rb");
  std::string out;
  char buf[1 << 16];
  int n;
  while ((n = gzread(f, buf, sizeof buf)) > 0) out.append(buf, static_cast<std::size_t>(n));
  gzclose(f);
  return out;
}

inline void gzip_to(const fs::path& p, const std::string& bytes) {
  gzFile f = gzopen(p.c_str(), "wb");
  gzwrite(f, bytes.data(), static_cast<unsigned>(bytes.size()));
  gzclose(f);
}

/// The bytes of `v` as a plain .nii file (written through voxfit's writer).
inline std::string nii_bytes(const Volume& v, const fs::path& scratch) {
  io::write_volume(scratch, v, false);
  const std::string b = read_file(scratch);
  fs::remove(scratch);
  return b;
}

template <typename T>
void poke(std::string& bytes, std::size_t offset, T value) {
  std::memcpy(bytes.data() + offset, &value, sizeof value);
}

/// A small CT-like volume: a body of ~40 HU in -1000 air, int16 or float32.
inline Volume small_ct(PixelType type = PixelType::Int16, std::array<std::int64_t, 3> size = {24, 20, 16}) {
  Volume v;
  v.pixel_type = type;
  torch::Tensor t = torch::full({size[2], size[1], size[0]}, -1000.0);
  t.slice(0, 2, size[2] - 2).slice(1, 3, size[1] - 3).slice(2, 3, size[0] - 3).fill_(40.0);
  t += torch::arange(size[0]).to(torch::kFloat32).view({1, 1, size[0]});
  v.data = t.to(tensor_dtype(type)).contiguous();
  v.geometry.spacing = {1.5, 1.5, 2.0};
  return v;
}

/// Its label map: classes 1 and 2 in two boxes inside the body.
inline Volume small_label(std::array<std::int64_t, 3> size = {24, 20, 16}) {
  Volume v;
  v.pixel_type = PixelType::UInt8;
  v.data = torch::zeros({size[2], size[1], size[0]}, torch::kUInt8);
  v.data.slice(0, 4, 10).slice(1, 5, 10).slice(2, 5, 12).fill_(1);
  v.data.slice(0, 6, 12).slice(1, 10, 15).slice(2, 12, 18).fill_(2);
  v.geometry.spacing = {1.5, 1.5, 2.0};
  return v;
}

/// An MSD dataset of one case (imagesTr/c0.nii.gz, labelsTr/c0.nii.gz, labels 0..2 declared) made of
/// small_ct and small_label; tests then replace one of its files with a broken one.
inline fs::path small_msd_dataset(const fs::path& root, const std::string& image = "./imagesTr/c0.nii.gz",
                                  const std::string& label = "./labelsTr/c0.nii.gz") {
  fs::create_directories(root / "imagesTr");
  fs::create_directories(root / "labelsTr");
  io::write_volume(root / "imagesTr" / "c0.nii.gz", small_ct());
  io::write_volume(root / "labelsTr" / "c0.nii.gz", small_label());
  write_msd_manifest(root, {{image, label}}, {{"0", "background"}, {"1", "a"}, {"2", "b"}});
  return root;
}

}  // namespace voxfit::test

namespace voxfit::test {

/// small_msd_dataset prepared once per test process by `voxfit data prepare` (one case of about
/// 24 x 20 x 16 voxels): quick to train on.
/// A folder shared by every test process of one build (CTest runs each test in a process of its
/// own): made once by `make` into a private folder that is then renamed into place, so a process
/// that loses the race drops its copy, and reused while the voxfit binary is unchanged.
inline fs::path shared_fixture(const std::string& name, const std::function<void(const fs::path&)>& make) {
  const auto built = fs::last_write_time(voxfit_binary()).time_since_epoch().count();
  const fs::path dir = fs::temp_directory_path() / ("voxfit_reliability_" + name + "_" + std::to_string(built));
  if (fs::exists(dir / ".complete")) return dir;
  const fs::path mine = dir.string() + ".tmp" + std::to_string(::getpid());
  remove_tree(mine);
  fs::create_directories(mine);
  make(mine);
  write_text(mine / ".complete", "");
  std::error_code ec;
  fs::rename(mine, dir, ec);
  if (ec) remove_tree(mine, ec);
  return dir;
}

/// small_msd_dataset prepared by `voxfit data prepare` (one case of about 24 x 20 x 16 voxels):
/// quick to train on.
inline fs::path small_cache() {
  static const fs::path cache = shared_fixture("cache",
                                               [](const fs::path& root) {
                                                 small_msd_dataset(root / "ds");
                                                 const auto r =
                                                     run_voxfit("data prepare -q '" + (root / "ds").string() +
                                                                "' -o '" + (root / "cache").string() + "'");
                                                 ASSERT_EQ(r.exit_code, 0) << r.out << r.err;
                                               }) /
                                "cache";
  return cache;
}

/// `voxfit train` arguments for a tiny 3D UNet on small_cache() on the CPU.
inline std::vector<std::string> tiny_train_args(const fs::path& run, int steps, const std::string& features = "4",
                                                const std::string& max_features = "8") {
  return {"train",
          "--device",
          "cpu",
          "--threads",
          "1",
          "--dataset",
          small_cache().string(),
          "--model",
          "unet3d",
          "--stages",
          "3",
          "--base-features",
          features,
          "--max-features",
          max_features,
          "--patch",
          "16,16,16",
          "--batch",
          "1",
          "--steps",
          std::to_string(steps),
          "--loader-threads",
          "1",
          "--no-augment",
          "--output",
          run.string()};
}

/// `voxfit sweep` of a tiny 3D UNet on small_cache() on the CPU, one point per budget, into `out`.
inline std::vector<std::string> tiny_sweep_args(const fs::path& out, const std::string& budgets) {
  return {"sweep",
          "--device",
          "cpu",
          "--threads",
          "1",
          "--dataset",
          small_cache().string(),
          "--models",
          "unet3d",
          "--patches",
          "16",
          "--stages",
          "3",
          "--base-features",
          "4",
          "--max-features",
          "8",
          "--budgets",
          budgets,
          "--warmup-steps",
          "0",
          "--timed-steps",
          "1",
          "--output",
          out.string()};
}

inline std::string join_args(const std::vector<std::string>& args) {
  std::string s;
  for (const auto& a : args) s += (s.empty() ? "'" : " '") + a + "'";
  return s;
}

}  // namespace voxfit::test
