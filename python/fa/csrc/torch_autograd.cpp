// fa's attention as a C++ autograd function for PyTorch.
//
// A Python torch.autograd.Function costs more host time per forward +
// backward than PyTorch's whole SDPA call (PERF.md), so the common call —
// q, k, v in layouts the kernels take, no score_mod — runs here: Python makes
// the launch plan once per layout (kernels, the runtime's argument structs
// with every shape and stride filled in, output layouts); this file
// allocates the outputs, writes the data pointers into a copy of each
// struct and calls libfa_runtime's launch through the pointer Python
// resolved, on PyTorch's current stream. It depends on no fa header: the
// structs are opaque bytes with the byte offsets of their data fields.
#include <ATen/cuda/CUDAContext.h>
#include <c10/cuda/CUDAGuard.h>
#include <torch/extension.h>

#include <cstring>
#include <deque>
#include <map>
#include <mutex>

namespace {

using LaunchFn = int (*)(const void *kernel, const void *args, void *stream);
using SplitLaunchFn = int (*)(const void *kernel, const void *args,
                              uint64_t workspace, uint64_t bytes,
                              int32_t splits, void *stream);
using ErrorFn = const char *(*)();

/// One launch: the argument struct with null data pointers, where each
/// tensor's pointer goes, and the runtime's entry point and kernel.
struct Launch {
  std::string args;
  std::vector<int64_t> offsets;
  LaunchFn fn = nullptr;
  const void *kernel = nullptr;
  // A split-KV forward (fa_attention_forward_splitkv): its split count and
  // workspace bytes, the workspace allocated per call; 0 splits: fn.
  int32_t splits = 0;
  int64_t splitBytes = 0;
};

struct Plan {
  Launch forward, backward; // backward.fn null: no backward kernel
  std::vector<int64_t> oSize, oStride, lseSize;
  std::vector<std::vector<int64_t>> gradStrides; // dQ, dK, dV
  int64_t workspaceBytes = 0, dqAccumOffset = 0; // delta first, then dQ accum
  ErrorFn lastError = nullptr;
};

// Plans live as long as the process: autograd graphs hold their index, and
// one key (a layout and the options) maps to one plan.
std::mutex plansMutex;
std::deque<Plan> plans;
std::map<std::string, int64_t> planIndex;

const Plan &planAt(int64_t id) {
  std::lock_guard<std::mutex> lock(plansMutex); // a deque's elements stay put
  TORCH_CHECK(id >= 0 && id < static_cast<int64_t>(plans.size()),
              "fa: no launch plan ", id);
  return plans[id];
}

Launch makeLaunch(const std::string &args, std::vector<int64_t> offsets,
                  int64_t fn, int64_t kernel) {
  for (int64_t offset : offsets)
    TORCH_CHECK(offset >= 0 &&
                    offset + 8 <= static_cast<int64_t>(args.size()),
                "fa: data offset ", offset, " outside the ", args.size(),
                "-byte argument struct");
  return {args, std::move(offsets), reinterpret_cast<LaunchFn>(fn),
          reinterpret_cast<const void *>(kernel)};
}

/// Registers the plan of `key` (once: a second call returns the first id).
int64_t registerPlan(const std::string &key, const std::string &fwdArgs,
                     std::vector<int64_t> fwdOffsets, int64_t fwdFn,
                     int64_t fwdKernel, int64_t fwdSplits,
                     int64_t fwdSplitBytes, const std::string &bwdArgs,
                     std::vector<int64_t> bwdOffsets, int64_t bwdFn,
                     int64_t bwdKernel, std::vector<int64_t> oSize,
                     std::vector<int64_t> oStride,
                     std::vector<int64_t> lseSize,
                     std::vector<std::vector<int64_t>> gradStrides,
                     int64_t workspaceBytes,
                     int64_t dqAccumOffset, int64_t lastError) {
  TORCH_CHECK(fwdOffsets.size() == 5, "fa: 5 forward tensors, got ",
              fwdOffsets.size());
  TORCH_CHECK(bwdFn == 0 || bwdOffsets.size() == 11,
              "fa: 11 backward tensors, got ", bwdOffsets.size());
  TORCH_CHECK(gradStrides.size() == 3, "fa: 3 gradient layouts, got ",
              gradStrides.size());
  std::lock_guard<std::mutex> lock(plansMutex);
  auto found = planIndex.find(key);
  if (found != planIndex.end())
    return found->second;
  Plan plan;
  plan.forward = makeLaunch(fwdArgs, std::move(fwdOffsets), fwdFn, fwdKernel);
  plan.forward.splits = static_cast<int32_t>(fwdSplits);
  plan.forward.splitBytes = fwdSplitBytes;
  if (bwdFn)
    plan.backward =
        makeLaunch(bwdArgs, std::move(bwdOffsets), bwdFn, bwdKernel);
  plan.oSize = std::move(oSize);
  plan.oStride = std::move(oStride);
  plan.lseSize = std::move(lseSize);
  plan.gradStrides = std::move(gradStrides);
  plan.workspaceBytes = workspaceBytes;
  plan.dqAccumOffset = dqAccumOffset;
  plan.lastError = reinterpret_cast<ErrorFn>(lastError);
  plans.push_back(std::move(plan));
  int64_t id = static_cast<int64_t>(plans.size()) - 1;
  planIndex.emplace(key, id);
  return id;
}

/// launch.fn(kernel, args with `pointers` written in, current stream).
void run(const Plan &plan, const Launch &launch,
         std::initializer_list<const void *> pointers,
         const at::Tensor &onDevice) {
  alignas(16) char args[1024];
  TORCH_CHECK(launch.args.size() <= sizeof(args),
              "fa: argument struct of ", launch.args.size(), " bytes");
  std::memcpy(args, launch.args.data(), launch.args.size());
  size_t i = 0;
  for (const void *pointer : pointers) {
    uint64_t address = reinterpret_cast<uint64_t>(pointer);
    std::memcpy(args + launch.offsets[i++], &address, sizeof(address));
  }
  c10::cuda::CUDAGuard guard(onDevice.device());
  cudaStream_t stream = at::cuda::getCurrentCUDAStream().stream();
  int status;
  if (launch.splits > 0) {
    at::Tensor workspace = at::empty(
        {launch.splitBytes}, onDevice.options().dtype(at::kByte));
    status = reinterpret_cast<SplitLaunchFn>(launch.fn)(
        launch.kernel, args,
        reinterpret_cast<uint64_t>(workspace.data_ptr()),
        static_cast<uint64_t>(launch.splitBytes), launch.splits, stream);
  } else {
    status = launch.fn(launch.kernel, args, stream);
  }
  TORCH_CHECK(status == 0, "fa: ", plan.lastError ? plan.lastError() : "",
              " (fa_status ", status, ")");
}

std::vector<at::Tensor> forwardOutputs(const Plan &plan, const at::Tensor &q,
                                       const at::Tensor &k,
                                       const at::Tensor &v) {
  at::Tensor o = at::empty_strided(plan.oSize, plan.oStride, q.options());
  at::Tensor lse = at::empty(plan.lseSize, q.options().dtype(at::kFloat));
  run(plan, plan.forward,
      {q.data_ptr(), k.data_ptr(), v.data_ptr(), o.data_ptr(), lse.data_ptr()},
      q);
  return {o, lse};
}

std::vector<at::Tensor> backwardGradients(const Plan &plan,
                                          const std::vector<at::Tensor> &saved,
                                          at::Tensor dO) {
  const at::Tensor &q = saved[0], &k = saved[1], &v = saved[2],
                   &o = saved[3], &lse = saved[4];
  // The plan's struct has dO in O's layout.
  if (dO.strides() != o.strides()) {
    at::Tensor copy = at::empty_strided(o.sizes(), o.strides(), o.options());
    copy.copy_(dO);
    dO = copy;
  }
  // dQ, dK, dV in the layouts the plan's struct describes (q's, k's, v's).
  at::Tensor dq = at::empty_strided(q.sizes(), plan.gradStrides[0], q.options());
  at::Tensor dk = at::empty_strided(k.sizes(), plan.gradStrides[1], k.options());
  at::Tensor dv = at::empty_strided(v.sizes(), plan.gradStrides[2], v.options());
  at::Tensor workspace =
      at::empty({plan.workspaceBytes}, q.options().dtype(at::kByte));
  char *base = static_cast<char *>(workspace.data_ptr());
  run(plan, plan.backward,
      {q.data_ptr(), k.data_ptr(), v.data_ptr(), o.data_ptr(), dO.data_ptr(),
       lse.data_ptr(), dq.data_ptr(), dk.data_ptr(), dv.data_ptr(), base,
       base + plan.dqAccumOffset},
      q);
  return {dq, dk, dv};
}

struct Attention : public torch::autograd::Function<Attention> {
  static torch::autograd::variable_list
  forward(torch::autograd::AutogradContext *ctx, const at::Tensor &q,
          const at::Tensor &k, const at::Tensor &v, int64_t planId) {
    const Plan &plan = planAt(planId);
    std::vector<at::Tensor> out = forwardOutputs(plan, q, k, v);
    ctx->save_for_backward({q, k, v, out[0], out[1]});
    ctx->saved_data["plan"] = planId;
    ctx->mark_non_differentiable({out[1]});
    ctx->set_materialize_grads(false);
    return out;
  }

  static torch::autograd::variable_list
  backward(torch::autograd::AutogradContext *ctx,
           torch::autograd::variable_list grads) {
    if (!grads[0].defined()) // O does not reach the loss
      return {at::Tensor(), at::Tensor(), at::Tensor(), at::Tensor()};
    const Plan &plan = planAt(ctx->saved_data["plan"].toInt());
    std::vector<at::Tensor> d =
        backwardGradients(plan, ctx->get_saved_variables(), grads[0]);
    return {d[0], d[1], d[2], at::Tensor()};
  }
};

/// (O, LSE), differentiable in q, k, v where the plan has a backward.
std::vector<at::Tensor> attention(const at::Tensor &q, const at::Tensor &k,
                                  const at::Tensor &v, int64_t planId) {
  const Plan &plan = planAt(planId);
  bool grad = at::GradMode::is_enabled() &&
              (q.requires_grad() || k.requires_grad() || v.requires_grad());
  if (!grad)
    return forwardOutputs(plan, q, k, v);
  TORCH_CHECK(plan.backward.fn, "fa: the plan has no backward kernel");
  return Attention::apply(q, k, v, planId);
}

} // namespace

PYBIND11_MODULE(TORCH_EXTENSION_NAME, m) {
  m.def("register_plan", &registerPlan);
  m.def("attention", &attention);
}
