// Data parallelism: rank discovery, the bucketed gradient all-reduce on real c10d process groups
// (Gloo on the CPU, NCCL on a GPU), the sharded loader, and `voxfit train --nproc 2` against one
// process with the same global batch.
#include <gtest/gtest.h>
#include <torch/torch.h>

#include <cstdlib>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <thread>

#include "support/test_support.h"
#include "voxfit/core/error.h"
#include "voxfit/data/patch_loader.h"
#include "voxfit/dist/communicator.h"
#include "voxfit/dist/grad_sync.h"
#include "voxfit/dist/launch.h"
#include "voxfit/dist/rank.h"
#include "voxfit/models/network.h"
#include "voxfit/train/checkpoint.h"

namespace voxfit {
namespace {

using test::TempDirTest;

dist::EnvLookup env_of(std::map<std::string, std::string> vars) {
  auto held = std::make_shared<std::map<std::string, std::string>>(std::move(vars));
  return [held](const char* name) -> const char* {
    const auto it = held->find(name);
    return it == held->end() ? nullptr : it->second.c_str();
  };
}

TEST(RankFromEnvironment, TorchrunSlurmAndSingle) {
  const auto t = dist::rank_from_environment(env_of(
      {{"RANK", "3"}, {"WORLD_SIZE", "4"}, {"LOCAL_RANK", "1"}, {"MASTER_ADDR", "node7"}, {"MASTER_PORT", "1234"}}));
  EXPECT_EQ(t.source, "torchrun");
  EXPECT_EQ(t.rank, 3);
  EXPECT_EQ(t.world_size, 4);
  EXPECT_EQ(t.local_rank, 1);
  EXPECT_EQ(t.master_addr, "node7");
  EXPECT_EQ(t.master_port, 1234);

  const auto s = dist::rank_from_environment(
      env_of({{"SLURM_PROCID", "5"}, {"SLURM_NTASKS", "8"}, {"SLURM_LOCALID", "1"}, {"SLURM_NNODES", "1"}}));
  EXPECT_EQ(s.source, "slurm");
  EXPECT_EQ(s.rank, 5);
  EXPECT_EQ(s.world_size, 8);
  EXPECT_EQ(s.local_rank, 1);
  EXPECT_EQ(s.master_addr, "127.0.0.1");

  const auto none = dist::rank_from_environment(env_of({}));
  EXPECT_EQ(none.source, "single");
  EXPECT_FALSE(none.distributed());
}

TEST(RankFromEnvironment, BadValuesNameTheVariable) {
  const auto message = [](std::map<std::string, std::string> vars) {
    try {
      dist::rank_from_environment(env_of(std::move(vars)));
    } catch (const ConfigError& e) {
      return std::string(e.what());
    }
    return std::string("no error");
  };
  EXPECT_NE(message({{"RANK", "2"}, {"WORLD_SIZE", "2"}, {"MASTER_ADDR", "h"}}).find("RANK='2'"), std::string::npos);
  EXPECT_NE(message({{"RANK", "x"}, {"WORLD_SIZE", "2"}, {"MASTER_ADDR", "h"}}).find("RANK='x'"), std::string::npos);
  EXPECT_NE(message({{"RANK", "0"}, {"WORLD_SIZE", "2"}}).find("MASTER_ADDR"), std::string::npos);
  EXPECT_NE(message({{"SLURM_PROCID", "0"}, {"SLURM_NTASKS", "4"}, {"SLURM_NNODES", "2"}}).find("MASTER_ADDR"),
            std::string::npos);
  EXPECT_NE(message({{"RANK", "0"}, {"WORLD_SIZE", "1"}, {"MASTER_PORT", "70000"}}).find("MASTER_PORT"),
            std::string::npos);
}

// A small network with parameters of several sizes and one that never gets a gradient.
struct Net : torch::nn::Module {
  Net() {
    a = register_module("a", torch::nn::Linear(6, 16));
    b = register_module("b", torch::nn::Linear(16, 16));
    c = register_module("c", torch::nn::Linear(16, 3));
    unused = register_parameter("unused", torch::ones({4}));
  }
  torch::Tensor forward(const torch::Tensor& x) { return c(torch::tanh(b(torch::tanh(a(x))))); }
  torch::nn::Linear a{nullptr}, b{nullptr}, c{nullptr};
  torch::Tensor unused;
};

std::vector<torch::Tensor> grads_of(Net& net) {
  std::vector<torch::Tensor> g;
  for (const auto& p : net.parameters()) g.push_back(p.grad().defined() ? p.grad().clone() : torch::Tensor());
  return g;
}

TEST(GradientSynchronizer, TwoGlooRanksAverageWhatEachComputedAlone) {
  if (!dist::backend_available(torch::kCPU)) GTEST_SKIP() << "this build has no Gloo process group";
  torch::manual_seed(1);
  const auto x0 = torch::randn({5, 6}), x1 = torch::randn({7, 6});
  std::vector<std::shared_ptr<Net>> nets;
  for (int r = 0; r < 2; ++r) {
    torch::manual_seed(2);
    nets.push_back(std::make_shared<Net>());
  }
  // Alone: each rank's own gradient.
  std::vector<std::vector<torch::Tensor>> alone;
  for (int r = 0; r < 2; ++r) {
    nets[r]->zero_grad();
    nets[r]->forward(r == 0 ? x0 : x1).pow(2).mean().backward();
    alone.push_back(grads_of(*nets[r]));
    nets[r]->zero_grad();
  }
  const int port = dist::free_tcp_port();
  std::vector<std::vector<torch::Tensor>> synced(2);
  std::vector<std::size_t> buckets(2), early(2);
  std::vector<std::string> errors(2);
  std::vector<std::thread> ranks;
  for (int r = 0; r < 2; ++r)
    ranks.emplace_back([&, r] {
      try {
        dist::RankInfo info;
        info.rank = r;
        info.world_size = 2;
        info.local_rank = r;
        info.master_port = port;
        dist::Communicator comm(info, torch::kCPU, std::chrono::seconds(60));
        // 300-byte buckets: the 16x16 weight alone fills one, so there are several.
        dist::GradientSynchronizer sync(nets[r]->parameters(), comm, 300);
        for (int step = 0; step < 2; ++step) {  // the second step reuses the buckets
          nets[r]->zero_grad();
          sync.begin_step();
          nets[r]->forward(r == 0 ? x0 : x1).pow(2).mean().backward();
          sync.finish();
        }
        synced[r] = grads_of(*nets[r]);
        buckets[r] = sync.bucket_count();
        early[r] = sync.launched_during_backward();
      } catch (const std::exception& e) {
        errors[r] = e.what();
      }
    });
  for (auto& t : ranks) t.join();
  ASSERT_EQ(errors[0], "");
  ASSERT_EQ(errors[1], "");
  EXPECT_GE(buckets[0], 3u);
  EXPECT_GE(early[0], 1u) << "no bucket was reduced while backward ran";
  for (std::size_t k = 0; k < alone[0].size(); ++k) {
    if (!alone[0][k].defined()) {  // the unused parameter: no gradient anywhere
      EXPECT_FALSE(synced[0][k].defined());
      EXPECT_FALSE(synced[1][k].defined());
      continue;
    }
    const auto mean = (alone[0][k] + alone[1][k]) / 2;
    EXPECT_TRUE(torch::allclose(synced[0][k], mean, 1e-6, 1e-7)) << "parameter " << k;
    EXPECT_TRUE(torch::equal(synced[0][k], synced[1][k])) << "ranks disagree on parameter " << k;
  }
}

TEST(GradientSynchronizer, NcclWorldSizeOneKeepsTheGradient) {
  if (!torch::cuda::is_available()) GTEST_SKIP() << "no CUDA device";
  if (!dist::backend_available(torch::Device(torch::kCUDA, 0))) GTEST_SKIP() << "this build has no NCCL process group";
  dist::RankInfo info;
  info.master_port = dist::free_tcp_port();
  dist::Communicator comm(info, torch::Device(torch::kCUDA, 0), std::chrono::seconds(60));
  torch::manual_seed(3);
  Net net;
  net.to(torch::Device(torch::kCUDA, 0));
  const auto x = torch::randn({9, 6}, torch::Device(torch::kCUDA, 0));
  net.forward(x).pow(2).mean().backward();
  const auto alone = grads_of(net);
  net.zero_grad();
  dist::GradientSynchronizer sync(net.parameters(), comm, 300);
  sync.begin_step();
  net.forward(x).pow(2).mean().backward();
  sync.finish();
  const auto synced = grads_of(net);
  for (std::size_t k = 0; k < alone.size(); ++k) {
    ASSERT_EQ(alone[k].defined(), synced[k].defined());
    if (alone[k].defined()) {
      EXPECT_TRUE(torch::equal(alone[k].cpu(), synced[k].cpu())) << "parameter " << k;
    }
  }
  EXPECT_EQ(comm.sum(2.5), 2.5);
}

TEST(ShardedLoader, TwoShardsMakeTheSingleGlobalBatch) {
  data::LoaderOptions o;
  o.patch = {16, 32, 32};
  o.threads = 1;
  o.seed = 9;
  o.pin_memory = false;
  o.batch_size = 4;
  data::PatchLoader whole(test::prepared_ct_cache(), {}, o);
  std::vector<std::unique_ptr<data::PatchLoader>> shards;
  o.batch_size = 2;
  o.shards = 2;
  for (int s = 0; s < 2; ++s) {
    o.shard = s;
    shards.push_back(std::make_unique<data::PatchLoader>(test::prepared_ct_cache(), std::vector<std::string>{}, o));
  }
  for (int i = 0; i < 3; ++i) {
    const auto w = whole.next();
    const auto a = shards[0]->next(), b = shards[1]->next();
    EXPECT_TRUE(torch::equal(torch::cat({a.image, b.image}), w.image)) << "batch " << i;
    EXPECT_TRUE(torch::equal(torch::cat({a.label, b.label}), w.label)) << "batch " << i;
    EXPECT_FALSE(torch::equal(a.image, b.image));
  }
  o.shard = 2;
  EXPECT_THROW(data::PatchLoader(test::prepared_ct_cache(), {}, o), ConfigError);
}

class DataParallelTrain : public TempDirTest {};

std::map<std::string, torch::Tensor> weights_of(const test::fs::path& checkpoint) {
  models::ModelContext ctx;
  ctx.in_channels = 1;
  ctx.num_classes = 4;
  ctx.patch = {16, 32, 32};
  ctx.params = {{"stages", "3"}, {"base_features", "4"}, {"max_features", "8"}};
  auto net = models::make_model("unet3d", ctx);
  train::load_weights(checkpoint, *net);
  std::map<std::string, torch::Tensor> w;
  for (const auto& p : net->named_parameters()) w[p.key()] = p.value().detach().clone();
  return w;
}

// The CI criterion: 2 Gloo processes x batch 1 end with the weights of 1 process x batch 2.
TEST_F(DataParallelTrain, TwoGlooProcessesMatchOneProcessWithTheGlobalBatch) {
  if (!dist::backend_available(torch::kCPU)) GTEST_SKIP() << "this build has no Gloo process group";
  const std::string common = "train --device cpu --threads 1 --dataset '" + test::prepared_ct_cache().string() +
                             "' --model unet3d --stages 3 --base-features 4 --max-features 8 --patch 16,32,32"
                             " --steps 4 --log-every 1 --loader-threads 1 --no-augment --seed 5";
  const auto one = test::run_voxfit(common + " --batch 2 --output '" + (dir() / "one").string() + "'");
  ASSERT_EQ(one.exit_code, 0) << one.out << one.err;
  const auto two = test::run_voxfit(common + " --batch 1 --nproc 2 --output '" + (dir() / "two").string() + "'");
  ASSERT_EQ(two.exit_code, 0) << two.out << two.err;
  EXPECT_NE(two.out.find("data parallel: 2 ranks x batch 1"), std::string::npos) << two.out;

  const auto a = weights_of(dir() / "one" / "last.pt"), b = weights_of(dir() / "two" / "last.pt");
  ASSERT_EQ(a.size(), b.size());
  for (const auto& [name, w] : a) {
    ASSERT_TRUE(b.count(name)) << name;
    EXPECT_TRUE(torch::allclose(w, b.at(name), 1e-4, 1e-6))
        << name << ": largest difference " << (w - b.at(name)).abs().max().item<double>();
  }
  // The comparison can fail: one process with batch 1 (half the data) ends elsewhere.
  const auto half = test::run_voxfit(common + " --batch 1 --output '" + (dir() / "half").string() + "'");
  ASSERT_EQ(half.exit_code, 0) << half.out << half.err;
  const auto c = weights_of(dir() / "half" / "last.pt");
  bool all_close = true;
  for (const auto& [name, w] : a) all_close = all_close && torch::allclose(w, c.at(name), 1e-4, 1e-6);
  EXPECT_FALSE(all_close) << "batch 1 and batch 2 trained to the same weights: the test cannot see a difference";
  // The runs trained: the log has 4 steps, written once (by rank 0), with the global batch's throughput.
  std::ifstream log(dir() / "two" / "log.jsonl");
  int steps = 0;
  for (std::string line; std::getline(log, line);) steps += line.find("\"step\"") != std::string::npos;
  EXPECT_GE(steps, 4);
}

TEST_F(DataParallelTrain, ARankThatFailsStopsTheJobWithItsError) {
  if (!dist::backend_available(torch::kCPU)) GTEST_SKIP() << "this build has no Gloo process group";
  const auto r = test::run_voxfit("train --device cpu --dataset '" + (dir() / "missing").string() +
                                  "' --model unet3d --nproc 2 --output '" + (dir() / "run").string() + "'");
  EXPECT_NE(r.exit_code, 0);
  EXPECT_NE(r.err.find("missing"), std::string::npos) << r.err;
  EXPECT_FALSE(test::fs::exists(dir() / "run" / "last.pt"));
}

}  // namespace
}  // namespace voxfit

namespace voxfit {
namespace {

class DistributedSweep : public test::TempDirTest {};

const std::string kTinySweep =
    " --models unet3d --patches 16x32x32 --stages 3 --base-features 4 --max-features 16"
    " --warmup-steps 1 --timed-steps 1 --no-throughput-table --threads 1";

std::vector<nlohmann::json> journal_of(const test::fs::path& file) {
  std::vector<nlohmann::json> out;
  std::ifstream in(file);
  for (std::string line; std::getline(in, line);)
    if (!line.empty()) out.push_back(nlohmann::json::parse(line));
  return out;
}

// --parallel 2 on the CPU: two processes, one point each (--shard 0/2 and 1/2), merged.
TEST_F(DistributedSweep, ParallelProcessesShareTheGridAndMerge) {
  const auto r =
      test::run_voxfit("sweep --device cpu --dataset '" + test::prepared_ct_cache().string() + "'" + kTinySweep +
                       " --budgets 256MiB,320MiB --parallel 2 --output '" + (dir() / "out").string() + "'");
  ASSERT_EQ(r.exit_code, 0) << r.out << r.err;
  const auto a = journal_of(dir() / "out" / "points" / "gpu0" / "results.jsonl");
  const auto b = journal_of(dir() / "out" / "points" / "gpu1" / "results.jsonl");
  ASSERT_EQ(a.size(), 1u);
  ASSERT_EQ(b.size(), 1u);
  EXPECT_NE(a[0]["key"], b[0]["key"]);
  const auto merged = journal_of(dir() / "out" / "results.jsonl");
  ASSERT_EQ(merged.size(), 2u);
  for (const auto& e : merged) EXPECT_GE(e["max_batch"].get<int64_t>(), 1) << e.dump();
  EXPECT_TRUE(test::fs::exists(dir() / "out" / "summary.md"));
  EXPECT_NE(r.out.find("2 points merged"), std::string::npos) << r.out;
}

// --emit-slurm writes an array job; one task run by hand journals its point; --merge joins it.
TEST_F(DistributedSweep, SlurmArrayScriptRunsAPointAndMerges) {
  const auto out = dir() / "slurm";
  auto r = test::run_voxfit("sweep --device cpu --dataset '" + test::prepared_ct_cache().string() + "'" + kTinySweep +
                            " --budgets 256MiB,320MiB --emit-slurm '" + out.string() + "'");
  ASSERT_EQ(r.exit_code, 0) << r.out << r.err;
  std::ifstream in(out / "sweep.sbatch");
  const std::string script((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  EXPECT_NE(script.find("#SBATCH --array=0-1"), std::string::npos) << script;
  EXPECT_NE(script.find("'--shard' \"$SLURM_ARRAY_TASK_ID/2\""), std::string::npos) << script;
  EXPECT_NE(script.find("'--device' 'cpu'"), std::string::npos) << script;
  EXPECT_EQ(script.find("'--emit-slurm'"), std::string::npos) << script;
  EXPECT_FALSE(test::fs::exists(out / "results.jsonl")) << "emitting must not run the sweep";
  // What Slurm would run as task 1.
  const std::string task = "cd '" + dir().string() + "' && SLURM_ARRAY_TASK_ID=1 bash '" +
                           (out / "sweep.sbatch").string() + "' >'" + (dir() / "task.log").string() + "' 2>&1";
  ASSERT_EQ(std::system(task.c_str()), 0);
  const auto point = journal_of(out / "points" / "1" / "results.jsonl");
  ASSERT_EQ(point.size(), 1u);
  EXPECT_EQ(point[0]["budget"], "320.00 MiB");
  r = test::run_voxfit("sweep --merge '" + out.string() + "'");
  ASSERT_EQ(r.exit_code, 0) << r.out << r.err;
  EXPECT_EQ(journal_of(out / "results.jsonl").size(), 1u);
  r = test::run_voxfit("sweep --merge '" + (dir() / "nothing").string() + "'");
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_NE(r.err.find("nothing"), std::string::npos) << r.err;
  r = test::run_voxfit("sweep --device cpu --dataset '" + test::prepared_ct_cache().string() + "'" + kTinySweep +
                       " --budgets 256MiB --shard 2/2 --output '" + (dir() / "bad").string() + "'");
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_NE(r.err.find("--shard"), std::string::npos) << r.err;
}

}  // namespace
}  // namespace voxfit
