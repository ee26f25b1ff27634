#include "voxfit/models/checkpoint.h"

#include <torch/autograd.h>
#include <torch/csrc/autograd/custom_function.h>

#include "voxfit/core/torch_compat.h"

namespace voxfit::models {

namespace {

struct AutocastState {
  bool cpu_enabled = false, cuda_enabled = false;
  at::ScalarType cpu_dtype = at::kBFloat16, cuda_dtype = at::kHalf;

  static AutocastState current() {
    AutocastState s;
    s.cpu_enabled = compat::autocast_enabled(c10::DeviceType::CPU);
    s.cuda_enabled = compat::autocast_enabled(c10::DeviceType::CUDA);
    s.cpu_dtype = compat::autocast_dtype(c10::DeviceType::CPU);
    s.cuda_dtype = compat::autocast_dtype(c10::DeviceType::CUDA);
    return s;
  }
  void apply() const {
    compat::set_autocast(c10::DeviceType::CPU, cpu_enabled, cpu_dtype);
    compat::set_autocast(c10::DeviceType::CUDA, cuda_enabled, cuda_dtype);
  }
};

// Backward may run on another thread (CUDA's autograd device threads), whose thread-local autocast
// state is off: the recomputation must see the forward's state, or it would compute in fp32.
class AutocastRestore {
 public:
  explicit AutocastRestore(const AutocastState& wanted) : previous_(AutocastState::current()) {
    wanted.apply();
    at::autocast::increment_nesting();
  }
  ~AutocastRestore() {
    if (at::autocast::decrement_nesting() == 0) at::autocast::clear_cache();
    previous_.apply();
  }
  AutocastRestore(const AutocastRestore&) = delete;
  AutocastRestore& operator=(const AutocastRestore&) = delete;

 private:
  AutocastState previous_;
};

struct Recompute : torch::CustomClassHolder {
  BlockFn fn;
  AutocastState autocast;
  size_t real_inputs = 0;  ///< inputs before the grad-carrying placeholder, if one was added
};

struct CheckpointFunction : torch::autograd::Function<CheckpointFunction> {
  static torch::autograd::variable_list forward(torch::autograd::AutogradContext* ctx,
                                                at::TensorList inputs,
                                                c10::intrusive_ptr<Recompute> recompute) {
    std::vector<torch::Tensor> real(inputs.begin(), inputs.begin() + recompute->real_inputs);
    auto outputs = recompute->fn(real);
    ctx->save_for_backward(inputs.vec());
    ctx->saved_data["recompute"] = c10::IValue::make_capsule(recompute);
    return outputs;
  }

  static torch::autograd::variable_list backward(torch::autograd::AutogradContext* ctx,
                                                 torch::autograd::variable_list grad_outputs) {
    const auto saved = ctx->get_saved_variables();
    const auto recompute =
        c10::static_intrusive_pointer_cast<Recompute>(ctx->saved_data["recompute"].toCapsule());
    std::vector<torch::Tensor> detached;
    detached.reserve(recompute->real_inputs);
    for (size_t i = 0; i < recompute->real_inputs; ++i) {
      if (!saved[i].defined()) {
        detached.emplace_back();
        continue;
      }
      const bool needs_grad = saved[i].requires_grad();
      detached.push_back(saved[i].detach().requires_grad_(needs_grad));
    }
    std::vector<torch::Tensor> outputs;
    {
      torch::AutoGradMode grad_on(true);
      AutocastRestore autocast(recompute->autocast);
      outputs = recompute->fn(detached);
    }
    std::vector<torch::Tensor> roots, grads;
    for (size_t i = 0; i < outputs.size(); ++i) {
      if (outputs[i].requires_grad() && grad_outputs[i].defined()) {
        roots.push_back(outputs[i]);
        grads.push_back(grad_outputs[i]);
      }
    }
    if (!roots.empty()) torch::autograd::backward(roots, grads);
    torch::autograd::variable_list result;
    for (const auto& t : detached) result.push_back(t.defined() && t.requires_grad() ? t.grad() : torch::Tensor());
    result.resize(saved.size() + 1);  // the placeholder, if any, and the Recompute argument
    return result;
  }
};

}  // namespace

std::vector<torch::Tensor> checkpoint(const BlockFn& fn, const std::vector<torch::Tensor>& inputs) {
  auto recompute = c10::make_intrusive<Recompute>();
  recompute->fn = fn;
  recompute->autocast = AutocastState::current();
  recompute->real_inputs = inputs.size();
  std::vector<torch::Tensor> all = inputs;
  bool any_grad = false;
  for (const auto& t : inputs) any_grad = any_grad || (t.defined() && t.requires_grad());
  // Without an input that requires grad autograd never calls backward, and the block's own
  // parameters (which are not inputs of the Function) would get no gradient.
  if (!any_grad) all.push_back(torch::empty({0}, torch::requires_grad()));
  return CheckpointFunction::apply(at::TensorList(all), recompute);
}

torch::Tensor checkpoint(const std::function<torch::Tensor(const torch::Tensor&)>& fn,
                         const torch::Tensor& x) {
  return checkpoint([fn](const std::vector<torch::Tensor>& in) -> std::vector<torch::Tensor> {
                      return {fn(in[0])};
                    },
                    {x})[0];
}

torch::Tensor maybe_checkpoint(bool enabled, bool training,
                               const std::function<torch::Tensor(const torch::Tensor&)>& fn,
                               const torch::Tensor& x) {
  if (enabled && training && torch::GradMode::is_enabled()) return checkpoint(fn, x);
  return fn(x);
}

torch::Tensor maybe_checkpoint(bool enabled, bool training, const BlockFn& fn,
                               const std::vector<torch::Tensor>& inputs) {
  if (enabled && training && torch::GradMode::is_enabled()) return checkpoint(fn, inputs)[0];
  return fn(inputs)[0];
}

}  // namespace voxfit::models
