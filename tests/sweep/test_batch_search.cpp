#include <gtest/gtest.h>

#include <cmath>
#include <set>

#include "voxfit/sweep/batch_search.h"

namespace voxfit::sweep {
namespace {

// A synthetic "GPU": peak(b) bytes; a batch fits when its peak is within the cap.
ProbeFn synthetic(std::function<double(std::int64_t)> peak, double cap, std::set<std::int64_t>* seen) {
  return [=](std::int64_t b) {
    EXPECT_TRUE(seen->insert(b).second) << "batch " << b << " probed twice";
    Probe p;
    p.batch = b;
    const double bytes = peak(b);
    p.fits = bytes <= cap;
    p.peak_reserved = p.peak_allocated = static_cast<std::uint64_t>(bytes);
    p.samples_per_s = p.fits ? 10.0 * std::min<double>(b, 8) : 0;
    return p;
  };
}

std::int64_t true_max(const std::function<double(std::int64_t)>& peak, double cap) {
  std::int64_t b = 0;
  while (peak(b + 1) <= cap) ++b;
  return b;
}

TEST(BatchSearch, LinearMemoryFindsTheExactBoundaryInFiveProbes) {
  const auto peak = [](std::int64_t b) { return 2.0e9 + 0.9e9 * static_cast<double>(b); };
  for (double cap : {5e9, 24e9, 48e9, 137e9}) {
    std::set<std::int64_t> seen;
    SearchOptions o;
    o.usable_bytes = static_cast<std::uint64_t>(cap);
    const auto r = find_max_batch(synthetic(peak, cap, &seen), o);
    EXPECT_EQ(r.max_batch, true_max(peak, cap)) << cap;
    EXPECT_EQ(r.first_failing, r.max_batch + 1);
    EXPECT_LE(r.probes.size(), 5u) << cap;
    EXPECT_NEAR(r.fit.per_sample_bytes, 0.9e9, 1.0);
  }
}

TEST(BatchSearch, CurvedMemoryStillEndsOnAnObservedBoundary) {
  // Activation memory that grows faster than linearly (a pessimistic and an optimistic fit).
  const auto convex = [](std::int64_t b) { return 1e9 + 0.5e9 * b + 0.02e9 * b * b; };
  const auto concave = [](std::int64_t b) { return 1e9 + 2e9 * std::sqrt(static_cast<double>(b)); };
  for (const auto& peak : {std::function<double(std::int64_t)>(convex), std::function<double(std::int64_t)>(concave)}) {
    for (double cap : {12e9, 40e9}) {
      std::set<std::int64_t> seen;
      SearchOptions o;
      o.usable_bytes = static_cast<std::uint64_t>(cap);
      const auto r = find_max_batch(synthetic(peak, cap, &seen), o);
      EXPECT_EQ(r.max_batch, true_max(peak, cap));
      EXPECT_TRUE(seen.count(r.max_batch) && seen.count(r.max_batch + 1)) << "boundary not observed";
      // A curved memory model costs more probes than a straight one (6 to 9 here); the boundary
      // above is what must hold, this catches a search that wanders.
      EXPECT_LE(r.probes.size(), 9u) << cap;
    }
  }
}

TEST(BatchSearch, NothingFitsAndTheCap) {
  std::set<std::int64_t> seen;
  SearchOptions o;
  o.usable_bytes = 1;
  auto r = find_max_batch(synthetic([](std::int64_t b) { return 10.0 * b; }, 5.0, &seen), o);
  EXPECT_EQ(r.max_batch, 0);
  EXPECT_EQ(r.first_failing, 1);
  EXPECT_EQ(r.probes.size(), 1u);

  seen.clear();
  o.usable_bytes = 1000000;
  o.max_batch = 20;  // everything fits: stop at the cap, no failure seen
  r = find_max_batch(synthetic([](std::int64_t b) { return 10.0 * b; }, 1e6, &seen), o);
  EXPECT_EQ(r.max_batch, 20);
  EXPECT_EQ(r.first_failing, 0);
}

TEST(BatchSearch, KneeIsTheSmallestBatchNearTheBest) {
  std::vector<Probe> probes;
  for (std::int64_t b : {1, 2, 4, 8, 16}) {
    Probe p;
    p.batch = b;
    p.fits = true;
    p.samples_per_s = b >= 8 ? 100.0 : 30.0 * static_cast<double>(b);
    probes.push_back(p);
  }
  EXPECT_EQ(knee_batch(probes), 4);  // 96% of the best
}

TEST(MemoryFit, LeastSquaresAndPrediction) {
  std::vector<Probe> probes(3);
  for (int i = 0; i < 3; ++i) {
    probes[i].batch = i + 1;
    probes[i].fits = true;
    probes[i].peak_reserved = 100 + 10 * (i + 1);
  }
  const auto f = fit_memory(probes);
  EXPECT_NEAR(f.static_bytes, 100, 1e-9);
  EXPECT_NEAR(f.per_sample_bytes, 10, 1e-9);
  EXPECT_EQ(f.predict(205), 10);
  EXPECT_EQ(f.predict(99), 0);
}

}  // namespace
}  // namespace voxfit::sweep
