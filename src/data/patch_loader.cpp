#include "voxfit/data/patch_loader.h"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <condition_variable>
#include <cstring>
#include <exception>
#include <list>
#include <map>
#include <mutex>
#include <random>
#include <thread>

#include "voxfit/core/error.h"
#include "voxfit/core/host_memory.h"
#include "voxfit/core/runtime.h"
#include "voxfit/io/h5_file.h"

namespace voxfit::data {

namespace {

using Clock = std::chrono::steady_clock;
using Shape3 = std::array<std::int64_t, 3>;

std::uint64_t splitmix64(std::uint64_t x) {
  x += 0x9e3779b97f4a7c15ull;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
  return x ^ (x >> 31);
}

// The loader's own random source: the same draws on every platform for the uniform parts
// (std::uniform_*_distribution is implementation-defined).
struct Rng {
  explicit Rng(std::uint64_t seed) : engine(seed) {}
  std::mt19937_64 engine;
  double uniform() { return static_cast<double>(engine() >> 11) * 0x1.0p-53; }
  double uniform(double lo, double hi) { return lo + (hi - lo) * uniform(); }
  std::int64_t below(std::int64_t n) { return static_cast<std::int64_t>(engine() % static_cast<std::uint64_t>(n)); }
  bool chance(double p) { return p > 0 && uniform() < p; }
};

// Mirrors a [D, H, W] block along one axis (0 = D) in place.
template <typename T>
void flip_axis(T* data, const Shape3& s, int axis) {
  const std::int64_t D = s[0], H = s[1], W = s[2];
  if (axis == 2) {
    for (std::int64_t r = 0; r < D * H; ++r) std::reverse(data + r * W, data + (r + 1) * W);
  } else if (axis == 1) {
    for (std::int64_t z = 0; z < D; ++z)
      for (std::int64_t y = 0; y < H / 2; ++y)
        std::swap_ranges(data + (z * H + y) * W, data + (z * H + y + 1) * W, data + (z * H + H - 1 - y) * W);
  } else {
    for (std::int64_t z = 0; z < D / 2; ++z)
      std::swap_ranges(data + z * H * W, data + (z + 1) * H * W, data + (D - 1 - z) * H * W);
  }
}

void augment_channel(float* x, std::int64_t n, const AugmentOptions& a, Rng& rng) {
  if (rng.chance(a.scale_probability)) {
    const float f = static_cast<float>(rng.uniform(a.scale_range[0], a.scale_range[1]));
    for (std::int64_t i = 0; i < n; ++i) x[i] *= f;
  }
  if (rng.chance(a.shift_probability)) {
    const float d = static_cast<float>(rng.uniform(a.shift_range[0], a.shift_range[1]));
    for (std::int64_t i = 0; i < n; ++i) x[i] += d;
  }
  if (rng.chance(a.gamma_probability)) {
    const double g = rng.uniform(a.gamma_range[0], a.gamma_range[1]);
    double sum = 0, sq = 0;
    float lo = x[0], hi = x[0];
    for (std::int64_t i = 0; i < n; ++i) {
      sum += x[i];
      sq += static_cast<double>(x[i]) * x[i];
      lo = std::min(lo, x[i]);
      hi = std::max(hi, x[i]);
    }
    const double mean = sum / n, std = std::sqrt(std::max(0.0, sq / n - mean * mean));
    const double range = static_cast<double>(hi) - lo + 1e-7;
    double sum2 = 0, sq2 = 0;
    for (std::int64_t i = 0; i < n; ++i) {
      const double v = std::pow((x[i] - lo) / range, g) * range + lo;
      x[i] = static_cast<float>(v);
      sum2 += v;
      sq2 += v * v;
    }
    // nnU-Net keeps the patch's mean and standard deviation through the gamma change.
    const double mean2 = sum2 / n, std2 = std::sqrt(std::max(0.0, sq2 / n - mean2 * mean2));
    const double k = std / std::max(std2, 1e-8);
    for (std::int64_t i = 0; i < n; ++i) x[i] = static_cast<float>((x[i] - mean2) * k + mean);
  }
  if (rng.chance(a.noise_probability)) {
    const double sigma = std::sqrt(rng.uniform(0.0, a.noise_variance));
    std::normal_distribution<float> noise(0.0f, static_cast<float>(sigma));
    for (std::int64_t i = 0; i < n; ++i) x[i] += noise(rng.engine);
  }
}

}  // namespace

std::shared_ptr<const CacheIndex> CacheIndex::load(const Plan& plan, const std::vector<std::string>& case_ids) {
  auto index = std::shared_ptr<CacheIndex>(new CacheIndex());
  index->plan_ = plan;
  const std::vector<std::string> ids = case_ids.empty() ? plan.case_ids() : case_ids;
  if (ids.empty()) throw DataError(plan.cache_dir.string() + ": no cases to load patches from");
  const auto known = plan.case_ids();
  for (const std::string& id : ids) {
    if (std::find(known.begin(), known.end(), id) == known.end())
      throw DataError(plan.cache_dir.string() + ": case '" + id + "' is not in plan.json");
    Case c;
    c.id = id;
    c.file = plan.case_file(id);
    const io::H5Reader r(c.file);
    const auto shape = r.shape("image");
    if (shape.size() != 4 || r.shape("label") != std::vector<std::int64_t>(shape.begin() + 1, shape.end()))
      throw IoError(c.file.string() + ": expected image [C, D, H, W] and label [D, H, W] on one grid");
    std::copy(shape.begin(), shape.end(), c.shape.begin());
    // voxfit data prepare writes uint8 or int16; anything else is converted by HDF5 to int16.
    if (r.read_box("label", {0, 0, 0}, {1, 1, 1}).scalar_type() == torch::kUInt8) c.label_dtype = torch::kUInt8;
    c.fg_locations = r.read("fg_locations").to(torch::kInt32).contiguous();
    const torch::Tensor off = r.read("fg_offsets").to(torch::kInt64);
    c.fg_offsets.assign(off.data_ptr<std::int64_t>(), off.data_ptr<std::int64_t>() + off.numel());
    if (static_cast<int>(c.fg_offsets.size()) != plan.num_classes() + 1 || c.fg_offsets.back() != c.fg_locations.size(0))
      throw IoError(c.file.string() + ": fg_offsets does not match " + std::to_string(plan.num_classes()) +
                    " classes and fg_locations");
    for (int k = 1; k < plan.num_classes(); ++k)
      if (c.fg_offsets[k + 1] > c.fg_offsets[k]) c.present_classes.push_back(k);
    index->cases_.push_back(std::move(c));
  }
  return index;
}

struct PatchLoader::State {
  std::shared_ptr<const CacheIndex> index;
  LoaderOptions opt;
  int depth = 1;
  bool pinned = false;

  std::mutex m;
  std::condition_variable work_cv, ready_cv;
  std::int64_t next_to_make = 0, next_to_hand = 0;
  std::map<std::int64_t, Batch> ready;
  std::exception_ptr error;
  std::atomic<bool> stop{false};  // written under m; also read between patches, without it
  LoaderStats stats;
  std::vector<std::thread> workers;

  std::mutex files_m;
  std::list<std::pair<std::size_t, std::shared_ptr<io::H5Reader>>> open_files;  // most recent first

  std::shared_ptr<io::H5Reader> reader(std::size_t case_index) {
    std::lock_guard<std::mutex> lock(files_m);
    for (auto it = open_files.begin(); it != open_files.end(); ++it)
      if (it->first == case_index) {
        open_files.splice(open_files.begin(), open_files, it);
        return it->second;
      }
    auto r = std::make_shared<io::H5Reader>(index->cases()[case_index].file);
    open_files.emplace_front(case_index, r);
    while (open_files.size() > std::max<std::size_t>(1, opt.open_files)) open_files.pop_back();
    return r;
  }

  struct Counts {
    std::int64_t oversampled = 0, foreground = 0;
  };

  // One patch into slot b of the batch; returns whether it holds foreground.
  bool make_patch(Batch& batch, std::int64_t b, Rng& rng, Counts& counts, torch::Tensor& scratch_image,
                  torch::Tensor& scratch_label) {
    const auto& cases = index->cases();
    const std::size_t ci = static_cast<std::size_t>(rng.below(static_cast<std::int64_t>(cases.size())));
    const CacheIndex::Case& c = cases[ci];
    const Shape3 s{c.shape[1], c.shape[2], c.shape[3]};
    const Shape3& p = opt.patch;
    const std::int64_t C = c.shape[0];
    Shape3 lb{}, ub{}, start{};
    for (int a = 0; a < 3; ++a) {
      // Volumes smaller than the patch are centred in it; larger ones keep the patch inside.
      const std::int64_t pad = std::max<std::int64_t>(0, p[a] - s[a]);
      lb[a] = -pad / 2;
      ub[a] = s[a] + pad / 2 + pad % 2 - p[a];
    }
    const bool oversample = !c.present_classes.empty() && rng.chance(opt.oversample_foreground);
    if (oversample) {
      const int k = c.present_classes[static_cast<std::size_t>(rng.below(static_cast<std::int64_t>(c.present_classes.size())))];
      const std::int64_t row = c.fg_offsets[k] + rng.below(c.fg_offsets[k + 1] - c.fg_offsets[k]);
      const std::int32_t* loc = c.fg_locations.data_ptr<std::int32_t>() + row * 3;
      for (int a = 0; a < 3; ++a) start[a] = std::clamp<std::int64_t>(loc[a] - p[a] / 2, lb[a], ub[a]);
      ++counts.oversampled;
    } else {
      for (int a = 0; a < 3; ++a) start[a] = lb[a] + rng.below(ub[a] - lb[a] + 1);
    }
    Shape3 i0{}, n{};
    bool inside = true;
    for (int a = 0; a < 3; ++a) {
      i0[a] = std::max<std::int64_t>(0, start[a]);
      n[a] = std::min(start[a] + p[a], s[a]) - i0[a];
      inside = inside && start[a] >= 0 && start[a] + p[a] <= s[a];
    }
    const auto file = reader(ci);
    torch::Tensor img_slot = batch.image[b];
    float* img = img_slot.data_ptr<float>();
    std::int64_t* lbl = batch.label[b].data_ptr<std::int64_t>();
    const std::int64_t voxels = p[0] * p[1] * p[2];
    if (inside) {
      file->read_box_into("image", {0, i0[0], i0[1], i0[2]}, {C, n[0], n[1], n[2]}, img_slot);
    } else {
      std::fill(img, img + C * voxels, 0.0f);
      scratch_image = torch::empty({C, n[0], n[1], n[2]}, torch::kFloat32);
      file->read_box_into("image", {0, i0[0], i0[1], i0[2]}, {C, n[0], n[1], n[2]}, scratch_image);
      const float* src = scratch_image.data_ptr<float>();
      for (std::int64_t ch = 0; ch < C; ++ch)
        for (std::int64_t z = 0; z < n[0]; ++z)
          for (std::int64_t y = 0; y < n[1]; ++y)
            std::memcpy(img + ((ch * p[0] + z + i0[0] - start[0]) * p[1] + y + i0[1] - start[1]) * p[2] + i0[2] - start[2],
                        src + ((ch * n[0] + z) * n[1] + y) * n[2], static_cast<std::size_t>(n[2]) * sizeof(float));
    }
    scratch_label = torch::empty({n[0], n[1], n[2]}, c.label_dtype);
    file->read_box_into("label", {i0[0], i0[1], i0[2]}, {n[0], n[1], n[2]}, scratch_label);
    if (!inside) std::fill(lbl, lbl + voxels, 0);
    bool foreground = false;
    const auto copy_label = [&](const auto* lsrc) {
      for (std::int64_t z = 0; z < n[0]; ++z)
        for (std::int64_t y = 0; y < n[1]; ++y) {
          std::int64_t* dst = lbl + ((z + i0[0] - start[0]) * p[1] + y + i0[1] - start[1]) * p[2] + i0[2] - start[2];
          const auto* src = lsrc + (z * n[1] + y) * n[2];
          for (std::int64_t x = 0; x < n[2]; ++x) {
            dst[x] = src[x];
            foreground = foreground || src[x] != 0;
          }
        }
    };
    if (c.label_dtype == torch::kUInt8)
      copy_label(scratch_label.data_ptr<std::uint8_t>());
    else
      copy_label(scratch_label.data_ptr<std::int16_t>());
    const AugmentOptions& a = opt.augment;
    if (a.enabled) {
      if (a.flip_probability > 0)
        for (int axis = 0; axis < 3; ++axis)
          if (rng.chance(a.flip_probability)) {
            for (std::int64_t ch = 0; ch < C; ++ch) flip_axis(img + ch * voxels, p, axis);
            flip_axis(lbl, p, axis);
          }
      if (a.intensity)
        for (std::int64_t ch = 0; ch < C; ++ch) augment_channel(img + ch * voxels, voxels, a, rng);
    }
    counts.foreground += foreground;
    return foreground;
  }

  Batch make_batch(std::int64_t index_in_stream, Counts& counts) {
    const std::uint64_t batch_seed = splitmix64(opt.seed ^ splitmix64(static_cast<std::uint64_t>(index_in_stream)));
    const std::int64_t C = index->cases().front().shape[0];
    const auto& p = opt.patch;
    Batch batch;
    const auto options = [&](torch::ScalarType t) {
      return torch::TensorOptions().dtype(t).pinned_memory(pinned);
    };
    batch.image = torch::empty({opt.batch_size, C, p[0], p[1], p[2]}, options(torch::kFloat32));
    batch.label = torch::empty({opt.batch_size, 1, p[0], p[1], p[2]}, options(torch::kInt64));
    torch::Tensor scratch_image, scratch_label;
    for (std::int64_t b = 0; b < opt.batch_size; ++b) {
      // A loader being destroyed does not finish a batch nobody will take (a search probe draws one
      // batch, and its loader would otherwise wait for a second one before it can go).
      if (stop.load(std::memory_order_relaxed)) return {};
      const auto in_global_batch = static_cast<std::uint64_t>(opt.shard * opt.batch_size + b);
      Rng rng(splitmix64(batch_seed + splitmix64(in_global_batch + 1)));
      make_patch(batch, b, rng, counts, scratch_image, scratch_label);
    }
    return batch;
  }

  void work() {
    // The batches are host memory (pinned on CUDA): a CPU budget emulating a card does not charge them.
    const HostMemoryScope host;
    for (;;) {
      std::int64_t mine;
      {
        std::unique_lock<std::mutex> lock(m);
        work_cv.wait(lock, [&] { return stop || next_to_make < next_to_hand + depth; });
        if (stop) return;
        mine = next_to_make++;
      }
      const auto t0 = Clock::now();
      Counts counts;
      try {
        Batch batch = make_batch(mine, counts);
        const double seconds = std::chrono::duration<double>(Clock::now() - t0).count();
        std::lock_guard<std::mutex> lock(m);
        if (stop) return;  // abandoned part-way (or finished after the stop): nobody takes it
        ready.emplace(mine, std::move(batch));
        stats.worker_seconds += seconds;
        stats.oversampled_patches += counts.oversampled;
        stats.foreground_patches += counts.foreground;
        stats.patches += opt.batch_size;
      } catch (...) {
        std::lock_guard<std::mutex> lock(m);
        if (!error) error = std::current_exception();
        stop = true;
      }
      ready_cv.notify_all();
    }
  }
};

PatchLoader::PatchLoader(std::shared_ptr<const CacheIndex> index, const LoaderOptions& options)
    : state_(std::make_unique<State>()) {
  if (!index || index->cases().empty()) throw DataError("patch loader: no cases");
  const LoaderOptions& o = options;
  for (auto p : o.patch)
    if (p < 1) throw ConfigError("patch size: expected positive voxel counts");
  if (o.batch_size < 1) throw ConfigError("batch size: expected at least 1");
  if (o.threads < 1) throw ConfigError("loader threads: expected at least 1");
  if (o.prefetch < 0) throw ConfigError("prefetch: expected 0 (automatic) or more batches");
  if (o.first_batch < 0) throw ConfigError("first batch: expected 0 or more");
  if (o.shards < 1 || o.shard < 0 || o.shard >= o.shards)
    throw ConfigError("loader shard " + std::to_string(o.shard) + " of " + std::to_string(o.shards) + ": out of range");
  if (o.oversample_foreground < 0 || o.oversample_foreground > 1)
    throw ConfigError("oversample_foreground: expected a fraction in [0, 1]");
  for (const auto& c : index->cases())
    if (c.shape[0] != index->cases().front().shape[0])
      throw DataError(c.file.string() + ": " + std::to_string(c.shape[0]) + " channels, other cases " +
                      std::to_string(index->cases().front().shape[0]));
  state_->index = std::move(index);
  state_->opt = o;
  state_->next_to_make = state_->next_to_hand = o.first_batch;
  state_->depth = o.prefetch > 0 ? o.prefetch : o.threads + 2;
  state_->pinned = o.pin_memory && cuda_available();
  for (int t = 0; t < o.threads; ++t) state_->workers.emplace_back([s = state_.get()] { s->work(); });
}

PatchLoader::PatchLoader(const fs::path& cache_dir, const std::vector<std::string>& case_ids,
                         const LoaderOptions& options)
    : PatchLoader(CacheIndex::load(load_plan(cache_dir), case_ids), options) {}

PatchLoader::~PatchLoader() {
  {
    std::lock_guard<std::mutex> lock(state_->m);
    state_->stop = true;
  }
  state_->work_cv.notify_all();
  for (auto& t : state_->workers) t.join();
}

Batch PatchLoader::next() {
  State& s = *state_;
  const auto t0 = Clock::now();
  std::unique_lock<std::mutex> lock(s.m);
  s.ready_cv.wait(lock, [&] { return s.error || s.ready.count(s.next_to_hand) > 0; });
  if (s.error) std::rethrow_exception(s.error);
  auto it = s.ready.find(s.next_to_hand);
  Batch batch = std::move(it->second);
  s.ready.erase(it);
  ++s.next_to_hand;
  ++s.stats.batches;
  s.stats.wait_seconds += std::chrono::duration<double>(Clock::now() - t0).count();
  lock.unlock();
  s.work_cv.notify_all();
  return batch;
}

LoaderStats PatchLoader::stats() const {
  std::lock_guard<std::mutex> lock(state_->m);
  return state_->stats;
}

const LoaderOptions& PatchLoader::options() const { return state_->opt; }
const CacheIndex& PatchLoader::index() const { return *state_->index; }

}  // namespace voxfit::data
