#include "device/executor.h"

#include <time.h>

#include <chrono>

#include "core/denormal.h"
#include "core/metrics.h"
#include "graph/subgraph.h"

namespace actorflow {
namespace {

// CPU time of the calling thread in microseconds (a kernel's own work, not the time a busy core
// gave to other threads meanwhile).
int64_t thread_cpu_micros() {
  timespec ts{};
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
  return static_cast<int64_t>(ts.tv_sec) * 1000000 + ts.tv_nsec / 1000;
}

}  // namespace

Result<std::shared_ptr<const Executor>> Executor::create(std::shared_ptr<const Graph> graph, Device* device,
                                                           KernelOverride override_fn) {
  std::shared_ptr<Executor> ex(new Executor());
  ex->graph_ = std::move(graph);
  ex->device_ = device;
  const Graph& g = *ex->graph_;
  AF_RETURN_IF_ERROR(g.topological_order().status());
  ex->nodes_.resize(static_cast<size_t>(g.num_nodes()));
  std::map<int, const Node*> args;
  for (int id = 0; id < g.num_nodes(); ++id) {
    const Node* n = g.node(id);
    NodeInfo& info = ex->nodes_[static_cast<size_t>(id)];
    info.num_inputs = static_cast<int>(n->inputs.size());
    info.initial_pending = static_cast<int>(n->inputs.size() + n->control_inputs.size());
    info.out_edges.resize(static_cast<size_t>(n->num_outputs()));
    if (info.initial_pending == 0) ex->roots_.push_back(id);
    if (n->op == "_Arg") {
      info.arg_index = static_cast<int>(n->attrs.get_or<int64_t>("index", -1));
      if (info.arg_index < 0) return InvalidArgument("_Arg '" + n->name + "' has no index");
      args[info.arg_index] = n;
    } else if (n->op == "_Retval") {
      info.retval_index = static_cast<int>(n->attrs.get_or<int64_t>("index", -1));
      if (info.retval_index < 0) return InvalidArgument("_Retval '" + n->name + "' has no index");
      ex->num_retvals_ = std::max(ex->num_retvals_, info.retval_index + 1);
    } else if (n->op == "_Send") {
      const std::string key = n->attrs.get_or<std::string>("tensor_name", "");
      if (key.empty()) return InvalidArgument("_Send '" + n->name + "' has no tensor_name");
      // Parsed once here: every step's send reads the fields.
      auto parsed = RendezvousKey::parse(key);
      if (!parsed.ok()) return parsed.status().with_prefix("_Send '" + n->name + "'");
      info.send_key = std::move(*parsed);
      ex->self_contained_ = false;
    } else if (n->op == "_Recv") {
      info.recv_key = n->attrs.get_or<std::string>("tensor_name", "");
      if (info.recv_key.empty()) return InvalidArgument("_Recv '" + n->name + "' has no tensor_name");
      ex->recv_keys_.push_back(info.recv_key);
      if (auto parsed = RendezvousKey::parse(info.recv_key); parsed.ok())
        ex->parsed_recv_keys_.emplace(info.recv_key, std::move(*parsed));
    } else {
      std::unique_ptr<OpKernel> k;
      if (override_fn) {
        AF_ASSIGN_OR_RETURN(k, override_fn(*n));
      }
      if (!k) {
        AF_ASSIGN_OR_RETURN(k, KernelRegistry::global().create(*n, device->type()));
      }
      if (dynamic_cast<AsyncOpKernel*>(k.get())) ex->self_contained_ = false;
      info.kernel = std::move(k);
      // Where a step's compute goes, per op type (bench/cnn_breakdown.py reads these).
      info.kernel_us = &Metrics::global().counter(
          "actorflow_kernel_cpu_microseconds_total",
          "CPU time of the calling thread in this task's synchronous kernel calls, per op type, in microseconds.",
          {{"op", n->op}});
      info.kernel_calls = &Metrics::global().counter("actorflow_kernel_calls_total",
                                                     "Synchronous kernel calls of this task, per op type.", {{"op", n->op}});
    }
  }
  for (int id = 0; id < g.num_nodes(); ++id) {
    const Node* n = g.node(id);
    for (size_t slot = 0; slot < n->inputs.size(); ++slot) {
      const Endpoint& e = n->inputs[slot];
      ex->nodes_[static_cast<size_t>(e.node)].out_edges[static_cast<size_t>(e.index)].push_back(
          OutEdge{id, static_cast<int>(slot)});
    }
    for (int c : n->control_inputs) ex->nodes_[static_cast<size_t>(c)].control_out.push_back(id);
  }
  ex->num_args_ = args.empty() ? 0 : args.rbegin()->first + 1;
  ex->arg_types_.assign(static_cast<size_t>(ex->num_args_), DType::kInvalid);
  ex->arg_shapes_.assign(static_cast<size_t>(ex->num_args_), Shape::unknown());
  ex->arg_names_.assign(static_cast<size_t>(ex->num_args_), "");
  for (const auto& [i, n] : args) {
    ex->arg_types_[static_cast<size_t>(i)] = n->output_types[0];
    ex->arg_shapes_[static_cast<size_t>(i)] = n->output_shapes[0];
    ex->arg_names_[static_cast<size_t>(i)] = n->attrs.get_or<std::string>("feed_name", n->name);
  }
  return std::shared_ptr<const Executor>(ex);
}

const RendezvousKey* Executor::parsed_recv_key(const std::string& wire) const {
  auto it = parsed_recv_keys_.find(wire);
  return it == parsed_recv_keys_.end() ? nullptr : &it->second;
}

StepExecution::StepExecution(std::shared_ptr<const Executor> ex, int64_t step_id, std::vector<Tensor> args,
                             SendFn send, ResourceEnv* resources)
    : ex_(std::move(ex)), step_id_(step_id), resources_(resources), send_(std::move(send)), args_(std::move(args)),
      alive_(std::make_shared<bool>(true)), trace_(step_trace(step_id)) {
  const size_t n = ex_->nodes_.size();
  inputs_.resize(n);
  pending_.resize(n);
  for (size_t i = 0; i < n; ++i) {
    inputs_[i].resize(static_cast<size_t>(ex_->nodes_[i].num_inputs));
    pending_[i] = ex_->nodes_[i].initial_pending;
  }
  outstanding_ = static_cast<int>(n);
  retvals_.resize(static_cast<size_t>(ex_->num_retvals_));
  ready_ = ex_->roots_;
  if (n == 0) finished_ = true;
}

namespace {
// The task prefix of a device name (the trace's process): what precedes "/device:".
std::string task_of(const std::string& device) {
  const size_t at = device.find("/device:");
  return at == std::string::npos ? device : device.substr(0, at);
}
}  // namespace

void StepExecution::trace_op(int id, int64_t start_ns, std::vector<std::pair<std::string, int64_t>> nums) {
  const Node* node = ex_->graph_->node(id);
  TraceEvent e;
  e.track = ex_->device_->name();
  e.task = task_of(e.track);
  e.name = node->name;
  e.kind = "op";
  e.op = node->op;
  e.start_ns = start_ns;
  e.end_ns = trace_clock_ns();
  e.nums = std::move(nums);
  trace_->add(std::move(e));
}

void StepExecution::trace_instant(const std::string& kind, const std::string& key, int64_t bytes) {
  TraceEvent e;
  e.track = ex_->device_->name();
  e.task = task_of(e.track);
  e.name = key;
  e.kind = kind;
  e.start_ns = e.end_ns = trace_clock_ns();
  e.nums = {{"bytes", bytes}};
  trace_->add(std::move(e));
}

void StepExecution::abort(const Status& s) {
  if (status_.ok()) status_ = s;
  ready_.clear();
}

void StepExecution::deliver(const std::string& key, Tensor t) {
  if (done()) return;
  if (trace_) trace_instant("deliver", key, static_cast<int64_t>(t.bytes()));
  auto it = waiting_recv_.find(key);
  if (it != waiting_recv_.end()) {
    int node = it->second;
    waiting_recv_.erase(it);
    auto dev = ex_->device_->copy_from_host(t);
    if (!dev.ok()) { abort(dev.status()); return; }
    if (trace_) {
      auto p = recv_parked_ns_.find(node);
      const int64_t parked = p == recv_parked_ns_.end() ? trace_clock_ns() : p->second;
      trace_op(node, parked, {{"bytes", static_cast<int64_t>(t.bytes())}, {"waited_ns", trace_clock_ns() - parked}});
    }
    finish_node(node, {std::move(*dev)});
  } else {
    inbox_[key] = std::move(t);
  }
}

std::vector<std::string> StepExecution::waiting_for() const {
  std::vector<std::string> out;
  for (const auto& [k, v] : waiting_recv_) out.push_back(k);
  return out;
}

void StepExecution::run() {
  if (running_) return;  // re-entrant call from an inline async completion
  running_ = true;
  while (!ready_.empty() && status_.ok()) {
    int id = ready_.back();
    ready_.pop_back();
    process(id);
  }
  running_ = false;
  if (status_.ok() && outstanding_ == 0) finished_ = true;
}

void StepExecution::activate(int id) {
  if (--pending_[static_cast<size_t>(id)] == 0) ready_.push_back(id);
}

void StepExecution::finish_node(int id, std::vector<Tensor> outputs) {
  const auto& info = ex_->nodes_[static_cast<size_t>(id)];
  for (size_t o = 0; o < info.out_edges.size(); ++o) {
    const auto& edges = info.out_edges[o];
    for (size_t k = 0; k < edges.size(); ++k) {
      const auto& e = edges[k];
      if (o < outputs.size()) {
        // Move into the last consumer, copy the handle into the others.
        inputs_[static_cast<size_t>(e.dst)][static_cast<size_t>(e.slot)] =
            (k + 1 == edges.size()) ? std::move(outputs[o]) : outputs[o];
      }
      activate(e.dst);
    }
  }
  for (int c : info.control_out) activate(c);
  --outstanding_;
  if (status_.ok() && outstanding_ == 0 && !running_) finished_ = true;
}

void StepExecution::process(int id) {
  const auto& info = ex_->nodes_[static_cast<size_t>(id)];
  const Node* node = ex_->graph_->node(id);
  Device* dev = ex_->device_;
  if (info.arg_index >= 0) {
    if (static_cast<size_t>(info.arg_index) >= args_.size()) {
      abort(InvalidArgument("_Arg '" + node->name + "': argument " + std::to_string(info.arg_index) + " missing"));
      return;
    }
    auto t = dev->copy_from_host(args_[static_cast<size_t>(info.arg_index)]);
    if (!t.ok()) { abort(t.status()); return; }
    finish_node(id, {std::move(*t)});
    return;
  }
  auto& in = inputs_[static_cast<size_t>(id)];
  if (info.retval_index >= 0) {
    auto t = dev->copy_to_host(in[0]);
    if (!t.ok()) { abort(t.status()); return; }
    retvals_[static_cast<size_t>(info.retval_index)] = std::move(*t);
    in.clear();
    finish_node(id, {});
    return;
  }
  if (info.send_key.valid()) {
    const int64_t start = trace_ ? trace_clock_ns() : 0;
    auto t = dev->copy_to_host(in[0]);
    if (!t.ok()) { abort(t.status()); return; }
    Status s = send_ ? send_(info.send_key, *t) : Internal("no send function for _Send '" + node->name + "'");
    in.clear();
    if (!s.ok()) { abort(s); return; }
    if (trace_) trace_op(id, start, {{"bytes", static_cast<int64_t>(t->bytes())}});
    finish_node(id, {});
    return;
  }
  if (!info.recv_key.empty()) {
    auto it = inbox_.find(info.recv_key);
    if (it == inbox_.end()) {
      waiting_recv_[info.recv_key] = id;  // parked: deliver() resumes it
      if (trace_) recv_parked_ns_[id] = trace_clock_ns();
      return;
    }
    const int64_t start = trace_ ? trace_clock_ns() : 0;
    Tensor t = std::move(it->second);
    inbox_.erase(it);
    auto d = dev->copy_from_host(t);
    if (!d.ok()) { abort(d.status()); return; }
    if (trace_) trace_op(id, start, {{"bytes", static_cast<int64_t>(t.bytes())}, {"waited_ns", 0}});
    finish_node(id, {std::move(*d)});
    return;
  }
  auto* async = dynamic_cast<AsyncOpKernel*>(info.kernel.get());
  auto ctx = std::make_shared<OpKernelContext>(*node, dev, std::move(in), step_id_, resources_);
  in.clear();
  if (!ctx->status().ok()) { abort(ctx->status()); return; }  // e.g. an uninitialised input
  if (async) {
    ++async_in_flight_;
    std::weak_ptr<bool> alive = alive_;
    const int64_t start = trace_ ? trace_clock_ns() : 0;
    async->compute_async(ctx, [this, alive, id, ctx, start](Status s) {
      if (alive.expired()) return;
      --async_in_flight_;
      if (trace_) trace_op(id, start, {{"async", 1}});
      if (s.ok()) s = ctx->status();
      if (!s.ok()) { abort(s); return; }
      if (done()) return;
      finish_node(id, std::move(ctx->outputs()));
      run();
    });
    return;
  }
  Status s;
  const int64_t traced_start = trace_ ? trace_clock_ns() : 0;
  const int64_t kernel_start = thread_cpu_micros();
  try {
    ScopedFlushDenormal flush;  // denormals are 0 in kernels, as in TensorFlow (core/denormal.h)
    s = info.kernel->compute(*ctx);
  } catch (const std::bad_alloc&) {
    s = ResourceExhausted(node->op + " '" + node->name + "': out of host memory");
  } catch (const std::exception& e) {
    s = Internal(node->op + " '" + node->name + "': kernel threw: " + e.what());
  }
  info.kernel_us->inc(thread_cpu_micros() - kernel_start);
  info.kernel_calls->inc();
  if (trace_) trace_op(id, traced_start);
  if (s.ok()) s = ctx->status();  // an output index the node does not declare
  if (!s.ok()) { abort(s); return; }
  for (int o = 0; o < node->num_outputs(); ++o) {
    if (!ctx->outputs()[static_cast<size_t>(o)].is_initialized()) {
      abort(Internal(node->op + " '" + node->name + "': kernel did not produce output " + std::to_string(o)));
      return;
    }
  }
  finish_node(id, std::move(ctx->outputs()));
}

Result<std::vector<Tensor>> run_local(const Graph& graph, const std::vector<std::string>& fetches,
                                      const std::map<std::string, Tensor>& feeds, Device* device,
                                      const std::vector<std::string>& targets, ResourceEnv* resources) {
  RunSignature sig;
  std::vector<Tensor> args;
  for (const auto& [name, t] : feeds) {
    sig.feeds.push_back(name);
    args.push_back(t);
  }
  sig.fetches = fetches;
  sig.targets = targets;
  AF_ASSIGN_OR_RETURN(Graph g, rewrite_for_run(graph, sig));
  auto shared = std::make_shared<const Graph>(std::move(g));
  AF_ASSIGN_OR_RETURN(auto ex, Executor::create(shared, device));
  for (int i = 0; i < ex->num_args(); ++i) {
    const Tensor& t = args[static_cast<size_t>(i)];
    if (t.dtype() != ex->arg_dtype(i))
      return InvalidArgument("feed '" + ex->arg_name(i) + "': expected " + dtype_name(ex->arg_dtype(i)) +
                             ", got " + dtype_name(t.dtype()));
    if (!ex->arg_shape(i).compatible_with(t.shape()))
      return InvalidArgument("feed '" + ex->arg_name(i) + "': expected shape " + ex->arg_shape(i).to_string() +
                             ", got " + t.shape().to_string());
  }
  StepExecution step(ex, 1, std::move(args), nullptr, resources);
  step.run();
  if (!step.status().ok()) return step.status();
  if (!step.done()) return Internal("run_local: step blocked (graph has _Recv or unfinished async ops)");
  return std::move(step.retvals());
}

}  // namespace actorflow
