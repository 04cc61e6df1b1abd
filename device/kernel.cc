#include "device/kernel.h"

#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cstdlib>

#include "device/backends.h"
#include "graph/op_registry.h"
#include "graph/shape_util.h"

namespace actorflow {

namespace {

std::atomic<size_t>& max_output_setting() {
  static std::atomic<size_t> v{0};
  return v;
}

size_t default_max_output_bytes() {
  static const size_t v = [] {
    if (const char* env = std::getenv("ACTORFLOW_MAX_OUTPUT_BYTES")) {
      char* end = nullptr;
      const unsigned long long b = std::strtoull(env, &end, 10);
      if (end && *end == '\0' && b > 0) return static_cast<size_t>(b);
    }
    const long pages = ::sysconf(_SC_PHYS_PAGES), page = ::sysconf(_SC_PAGESIZE);
    size_t half = size_t{1} << 30;
    if (pages > 0 && page > 0) half = std::max(half, static_cast<size_t>(pages) / 2 * static_cast<size_t>(page));
    return half;
  }();
  return v;
}

const Tensor& no_tensor() {
  static const Tensor* t = new Tensor();
  return *t;
}

}  // namespace

size_t max_output_bytes() {
  const size_t v = max_output_setting().load(std::memory_order_relaxed);
  return v ? v : default_max_output_bytes();
}

void set_max_output_bytes(size_t bytes) { max_output_setting().store(bytes, std::memory_order_relaxed); }

OpKernelContext::OpKernelContext(const Node& node, Device* device, std::vector<Tensor> inputs, int64_t step_id,
                                 ResourceEnv* resources)
    : node_(node), device_(device), inputs_(std::move(inputs)), step_id_(step_id),
      outputs_(static_cast<size_t>(node.num_outputs())), resources_(resources) {
  for (size_t i = 0; i < inputs_.size(); ++i)
    if (!inputs_[i].is_initialized()) {
      status_ = invalid_argument("input " + std::to_string(i) + " is an uninitialised tensor");
      break;
    }
}

const Tensor& OpKernelContext::input(int i) const {
  if (i < 0 || i >= num_inputs()) return no_tensor();
  return inputs_[static_cast<size_t>(i)];
}

Tensor OpKernelContext::release_input(int i) {
  if (i < 0 || i >= num_inputs()) return Tensor();
  return std::move(inputs_[static_cast<size_t>(i)]);
}

void OpKernelContext::set_output(int i, Tensor t) {
  if (i < 0 || static_cast<size_t>(i) >= outputs_.size()) {
    if (status_.ok())
      status_ = invalid_argument("the node declares " + std::to_string(outputs_.size()) +
                                 " outputs, fewer than its op has (its kernel set output " + std::to_string(i) + ")");
    return;
  }
  outputs_[static_cast<size_t>(i)] = std::move(t);
}

Result<Tensor*> OpKernelContext::allocate_output(int i, DType dtype, const Shape& shape) {
  if (i < 0 || static_cast<size_t>(i) >= outputs_.size()) {
    Status s = invalid_argument("output " + std::to_string(i) + " does not exist: the node declares " +
                                std::to_string(outputs_.size()) + " outputs");
    if (status_.ok()) status_ = s;
    return s;
  }
  auto elements = shape.checked_num_elements();
  if (!elements.ok()) return invalid_argument("output " + std::to_string(i) + ": " + elements.status().message());
  const size_t cap = max_output_bytes();
  if (dtype_size(dtype) != 0 && static_cast<size_t>(*elements) > cap / dtype_size(dtype))
    return error(Code::kResourceExhausted, "output " + std::to_string(i) + " of " + dtype_name(dtype) + " " +
                                               shape.to_string() + " would need more than the " + std::to_string(cap) +
                                               " bytes one kernel output may have (max_output_bytes)");
  auto t = Tensor::allocate(allocator(), dtype, shape);
  if (!t.ok()) {
    // Say how full the device is, so "out of memory" can be told from "limit too small".
    const AllocatorStats st = allocator()->stats();
    std::string msg = t.status().message() + " on " + device_->name();
    if (st.bytes_limit > 0)
      msg += " (memory limit " + std::to_string(st.bytes_limit) + " bytes, " + std::to_string(st.bytes_in_use) +
             " in use, peak " + std::to_string(st.peak_bytes_in_use) + ")";
    return error(t.status().code(), msg);
  }
  outputs_[static_cast<size_t>(i)] = std::move(*t);
  return &outputs_[static_cast<size_t>(i)];
}

Status OpKernelContext::error(Code code, const std::string& msg) const {
  return Status(code, node_.op + " '" + node_.name + "': " + msg);
}

Status OpKernelContext::error(const Status& s) const { return s.with_prefix(node_.op + " '" + node_.name + "'"); }

KernelRegistry& KernelRegistry::global() {
  static KernelRegistry* r = [] {
    auto* reg = new KernelRegistry();
    register_all_kernels(*reg);
    return reg;
  }();
  return *r;
}

void KernelRegistry::add(const std::string& op, const std::string& device_type, KernelFactory factory) {
  factories_[{op, device_type}] = std::move(factory);
}

bool KernelRegistry::has(const std::string& op, const std::string& device_type) const {
  return factories_.count({op, device_type}) != 0;
}

Result<std::unique_ptr<OpKernel>> KernelRegistry::create(const Node& node, const std::string& device_type) const {
  auto it = factories_.find({node.op, device_type});
  if (it == factories_.end())
    return NotFound("no " + device_type + " kernel for " + node.op + " '" + node.name + "'");
  // A kernel reads the inputs its op has: a node with another count (a peer's partition) gets none.
  auto def = OpRegistry::global().lookup(node.op);
  if (def.ok() && (*def)->num_inputs >= 0 && static_cast<int>(node.inputs.size()) != (*def)->num_inputs)
    return InvalidArgument(node.op + " '" + node.name + "': expects " + std::to_string((*def)->num_inputs) +
                           " inputs, the node has " + std::to_string(node.inputs.size()));
  return it->second(node);
}

std::vector<std::pair<std::string, std::string>> KernelRegistry::registered() const {
  std::vector<std::pair<std::string, std::string>> out;
  out.reserve(factories_.size());
  for (const auto& [key, factory] : factories_) out.push_back(key);  // the map's order: (op, device)
  return out;
}

namespace {

class ConstKernel : public OpKernel {
 public:
  explicit ConstKernel(const Node& n) : OpKernel(n) {}
  Status compute(OpKernelContext& ctx) override {
    auto v = ctx.attrs().get<Tensor>("value");
    if (!v.ok()) return ctx.invalid_argument(v.status().message());
    if (ctx.device()->type() == "CPU") {
      ctx.set_output(0, *v);  // shares the graph's buffer; consumers never write inputs
      return Status::OK();
    }
    auto d = ctx.device()->copy_from_host(*v);
    if (!d.ok()) return ctx.error(d.status().code(), d.status().message());
    ctx.set_output(0, *d);
    return Status::OK();
  }
};

class IdentityKernel : public OpKernel {
 public:
  explicit IdentityKernel(const Node& n) : OpKernel(n) {}
  Status compute(OpKernelContext& ctx) override {
    ctx.set_output(0, ctx.release_input(0));
    return Status::OK();
  }
};

class PlaceholderKernel : public OpKernel {
 public:
  explicit PlaceholderKernel(const Node& n) : OpKernel(n) {}
  Status compute(OpKernelContext& ctx) override {
    const DType t = ctx.attrs().get_or<DType>("dtype", DType::kInvalid);
    const Shape s = ctx.attrs().get_or<Shape>("shape", Shape::unknown());
    return ctx.invalid_argument(std::string("you must feed a value for placeholder tensor '") + ctx.node().name +
                                "' with dtype " + dtype_name(t) + " and shape " + s.to_string());
  }
};

// ExpandDims: forwards x's buffer with size-1 dims inserted at attr `axes` of the output.
class ExpandDimsKernel : public OpKernel {
 public:
  explicit ExpandDimsKernel(const Node& n) : OpKernel(n) {}
  Status compute(OpKernelContext& ctx) override {
    auto axes = ctx.attrs().get<std::vector<int64_t>>("axes");
    if (!axes.ok()) return ctx.invalid_argument(axes.status().message());
    const Tensor& x = ctx.input(0);
    const int rank = x.shape().rank() + static_cast<int>(axes->size());
    auto mask = reduction_mask(*axes, rank);
    if (!mask.ok()) return ctx.invalid_argument(mask.status().message());
    std::vector<int64_t> dims;
    int next = 0;
    for (int i = 0; i < rank; ++i) dims.push_back((*mask)[static_cast<size_t>(i)] ? 1 : x.shape().dim(next++));
    auto t = x.reshaped(Shape(std::move(dims)));
    if (!t.ok()) return ctx.invalid_argument(t.status().message());
    ctx.set_output(0, *t);
    return Status::OK();
  }
};

// ReshapeLike: forwards x's buffer under the shape of input 1 (whose data is not read).
class ReshapeLikeKernel : public OpKernel {
 public:
  explicit ReshapeLikeKernel(const Node& n) : OpKernel(n) {}
  Status compute(OpKernelContext& ctx) override {
    const Tensor& x = ctx.input(0);
    const Shape& like = ctx.input(1).shape();
    if (x.num_elements() != like.num_elements())
      return ctx.invalid_argument("cannot reshape " + x.shape().to_string() + " (" +
                                  std::to_string(x.num_elements()) + " elements) like " + like.to_string() + " (" +
                                  std::to_string(like.num_elements()) + " elements)");
    auto t = x.reshaped(like);
    if (!t.ok()) return ctx.invalid_argument(t.status().message());
    ctx.set_output(0, *t);
    return Status::OK();
  }
};

// EnsureShape: forwards x after checking its shape against attr `shape`.
class EnsureShapeKernel : public OpKernel {
 public:
  explicit EnsureShapeKernel(const Node& n) : OpKernel(n) {}
  Status compute(OpKernelContext& ctx) override {
    auto want = ctx.attrs().get<Shape>("shape");
    if (!want.ok()) return ctx.invalid_argument(want.status().message());
    if (!ctx.input(0).shape().compatible_with(*want))
      return ctx.invalid_argument("shape " + ctx.input(0).shape().to_string() + " is not compatible with " +
                                  want->to_string());
    ctx.set_output(0, ctx.release_input(0));
    return Status::OK();
  }
};

class NoOpKernel : public OpKernel {
 public:
  explicit NoOpKernel(const Node& n) : OpKernel(n) {}
  Status compute(OpKernelContext&) override { return Status::OK(); }
};

}  // namespace

void register_core_kernels(KernelRegistry& r) {
  for (const char* dev : {"CPU", "GPU"}) {
    r.add("Const", dev, simple_factory<ConstKernel>());
    r.add("Identity", dev, simple_factory<IdentityKernel>());
    r.add("NoOp", dev, simple_factory<NoOpKernel>());
    r.add("Placeholder", dev, simple_factory<PlaceholderKernel>());
    r.add("StopGradient", dev, simple_factory<IdentityKernel>());
    // Shape-only ops: they forward a buffer under a new shape, whatever the device.
    r.add("ExpandDims", dev, simple_factory<ExpandDimsKernel>());
    r.add("ReshapeLike", dev, simple_factory<ReshapeLikeKernel>());
    r.add("EnsureShape", dev, simple_factory<EnsureShapeKernel>());
  }
}

// Every kernel family: the device-independent ones here, a backend's in device/backends.cc.
void register_all_kernels(KernelRegistry& r) {
  register_core_kernels(r);
  register_backend_kernels(r);  // device/backends.cc: CPU, and GPU when built with CUDA
}

}  // namespace actorflow
