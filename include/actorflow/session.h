// af::Session: runs a Scope's graph on a server (tf.Session / ClientSession).
//
//   #include <actorflow/session.h>
//   af::Session sess(root, server->target());
//   auto out = sess.run({{x, batch}}, {loss}, {train_op});   // Result<std::vector<Tensor>>
//
// run() blocks the calling thread until the step finishes and returns the fetched tensors
// or an error naming the op, feed or task that failed. Several threads may call run() on
// one Session concurrently; each call is its own step. The graph may grow between runs
// (new nodes are picked up on the next run).
//
// This header brings no CAF header. Its two actor-level members, prepare() (whose RunRequest is
// an internal message type) and master() (a caf::actor), are declared with incomplete types:
// call them after including <actorflow/embedding.h>, which defines those types. The session's
// state lives behind a pointer (Session::Impl, defined in actors/session.cc).
#pragma once

#include <chrono>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "core/status.h"
#include "core/step_stats.h"
#include "core/step_trace.h"
#include "graph/scope.h"
#include "graph/placement_options.h"
#include "tensor/tensor.h"

namespace caf {
class actor;
}  // namespace caf

namespace actorflow {

class Server;
struct RunRequest;

// Options of a session (TF's ConfigProto subset). A plain value type: fluent setters return
// *this; not synchronised (copy it per thread if several threads build options).
class SessionOptions {
 public:
  SessionOptions& log_device_placement(bool v) { placement_.log_device_placement = v; return *this; }
  SessionOptions& allow_soft_placement(bool v) { placement_.allow_soft_placement = v; return *this; }
  // Upper bound for one run(); 0 = none (dead tasks are still detected and reported).
  SessionOptions& timeout(std::chrono::milliseconds v) { timeout_ = v; return *this; }
  // Where ops without a device request go; "" = the target server's /device:CPU:0.
  SessionOptions& default_device(std::string v) { placement_.default_device = std::move(v); return *this; }
  // The cluster file (TOML, or TF_CONFIG-style JSON) of a remote target: a Session whose target
  // "actorflow://host:port" is not a server in this process connects to that task as a client,
  // authenticated with the file's secret (and TLS files). "" = $ACTORFLOW_CLUSTER.
  SessionOptions& cluster_file(std::string v) { cluster_file_ = std::move(v); return *this; }
  // bfloat16 mixed precision (TensorFlow's auto_mixed_precision_onednn_bfloat16): MatMul and the
  // convolutions with their gradients take bfloat16 operands and accumulate and return float32, on
  // CPUs with native bfloat16 (AVX-512 BF16, AMX); variables and every other op stay float32.
  // Default false; a server whose cluster file says [server] mixed_precision = "bfloat16" turns
  // it on for all its sessions.
  SessionOptions& mixed_bfloat16(bool v) { placement_.mixed_bfloat16 = v; return *this; }
  // Kernel fusion on CPU devices (TensorFlow's remapper, graph/fusion.h): Conv2D or MatMul with
  // the BiasAdd and Relu after it run as one kernel, MaxPoolGrad with the ReluGrad after it as
  // one pass. Same results as the ops as written. Default true; false turns it off.
  SessionOptions& fuse_kernels(bool v) { placement_.fuse_kernels = v; return *this; }

  // Logs every op's placement when true (default false).
  bool log_device_placement() const { return placement_.log_device_placement; }
  // Lets the placer move an op to another device of its task when the requested one cannot run
  // it (default true).
  bool allow_soft_placement() const { return placement_.allow_soft_placement; }
  // The bound of one run(); 0 (the default) = none.
  std::chrono::milliseconds timeout() const { return timeout_; }
  // The default device; "" (the default) = the target server's /device:CPU:0.
  const std::string& default_device() const { return placement_.default_device; }
  // The three placement choices above as one value (what runs carry to the placer).
  const PlacementOptions& placement() const { return placement_; }
  // The cluster file of a remote session; "" (the default) = $ACTORFLOW_CLUSTER.
  const std::string& cluster_file() const { return cluster_file_; }
  // Whether MatMul and the convolutions take bfloat16 operands (default false).
  bool mixed_bfloat16() const { return placement_.mixed_bfloat16; }
  // Whether CPU kernels are fused (default true).
  bool fuse_kernels() const { return placement_.fuse_kernels; }

 private:
  PlacementOptions placement_;
  std::chrono::milliseconds timeout_{0};
  std::string cluster_file_;
};

// Options of one run (TensorFlow's RunOptions subset). Plain value.
struct RunOptions {
  enum class TraceLevel { kNoTrace, kFullTrace };
  // kFullTrace records every op's start and end on every device of every task the step
  // touches, every tensor transfer, every variable call and synchronous wait, into
  // RunMetadata::step_stats (docs/tracing.md). kNoTrace (the default) records nothing.
  TraceLevel trace_level = TraceLevel::kNoTrace;
  // The bound on one traced step's events per task process: past it events are counted as
  // dropped (TaskTraceInfo::dropped, the trace's "dropped_events"), not kept. Clamped to
  // [1, StepTraces::kMaxEventsLimit].
  size_t trace_max_events = StepTraces::kDefaultMaxEvents;
};

// What a run reports besides its fetches (TensorFlow's RunMetadata). Plain value.
struct RunMetadata {
  // The traced step, every task's clock aligned to this process's (empty() when not traced).
  StepStats step_stats;
  // Writes step_stats as Chrome trace JSON (chrome://tracing, ui.perfetto.dev) to `path`.
  // FailedPrecondition when nothing was traced; errors name the path.
  Status write_chrome_trace(const std::string& path) const;
};

// Feeds: which Output gets which value. Tensors share their buffers (copying a FeedDict is cheap).
using FeedDict = std::vector<std::pair<Output, Tensor>>;

// A client of one server's master. Not copyable or movable (runs in flight refer to it); owns
// its local server when constructed with an empty target. Thread-safety: every method may be
// called from any thread, concurrently.
class Session {
 public:
  // A session on the server registered under `target` (Server::target()) in this process.
  // With an empty target, the session starts its own local server (tf.Session()), which it owns
  // and destroys with itself. A target "actorflow://host:port" that is not a server in this
  // process is a remote session (seed 000's tf.Session("grpc://worker7:2222")): the graph runs on
  // that task, which this process reaches as a client authenticated with the cluster file
  // (opts.cluster_file() or $ACTORFLOW_CLUSTER; actors/client_sessions.h). The connection is made
  // by the first run. Construction errors (unknown target, no or bad cluster file, an address the
  // file lacks) are reported by status() and by every run(). `scope`'s graph is shared (not copied): it must outlive the session, and
  // nodes added to it later are run by later runs.
  explicit Session(const Scope& scope, const std::string& target = "", SessionOptions opts = {});
  // Closes the session; runs still in flight on other threads must have returned.
  ~Session();
  Session(const Session&) = delete;
  Session& operator=(const Session&) = delete;

  // OK, or why the session could not be created (NotFound: no server with that target; the
  // local server's creation error).
  Status status() const;

  // Runs the graph and returns one tensor per fetch, in order. Blocks until the step finishes
  // (or the session's timeout passes: DeadlineExceeded). Errors name the op, feed or task.
  Result<std::vector<Tensor>> run(const std::vector<Output>& fetches);
  // The same with feeds (placeholders and any other tensor may be fed) and targets (ops run for
  // their effect, nothing fetched). InvalidArgument for an invalid Output.
  Result<std::vector<Tensor>> run(const FeedDict& feeds, const std::vector<Output>& fetches,
                                  const std::vector<Output>& targets = {});
  // The same with run options (tf.Session.run(options=, run_metadata=)). With
  // options.trace_level = kFullTrace the step is traced: it goes through the master (never a
  // direct step), is armed on every task of the session's devices before it runs and its events
  // are collected from them after it ran, one control-plane round trip per task each way.
  // `metadata` (may be null) gets the trace; on an error it is left empty. Untraced runs leave
  // it empty. A remote client session's traced run is traced by the task that runs it (armed on
  // every task its step touches, as above) and comes back with the answer; its clocks are moved
  // onto this process's by the round trip's midpoint (TaskTraceInfo::clock says "... via
  // <target> (round-trip midpoint)", with the added uncertainty).
  Result<std::vector<Tensor>> run(const RunOptions& options, const FeedDict& feeds,
                                  const std::vector<Output>& fetches, const std::vector<Output>& targets,
                                  RunMetadata* metadata);
  // The same by tensor names ("node", "node:1") and target node names, as TensorFlow's
  // Session::Run.
  Result<std::vector<Tensor>> run_by_name(const std::vector<std::pair<std::string, Tensor>>& feeds,
                                          const std::vector<std::string>& fetches,
                                          const std::vector<std::string>& targets = {});
  // The same by names with run options and metadata, as TensorFlow's C++ Session::Run(RunOptions,
  // inputs, output names, target names, outputs, RunMetadata).
  Result<std::vector<Tensor>> run_by_name(const RunOptions& options,
                                          const std::vector<std::pair<std::string, Tensor>>& feeds,
                                          const std::vector<std::string>& fetches,
                                          const std::vector<std::string>& targets, RunMetadata* metadata);
  // Releases the session; later run() calls fail with Cancelled. Idempotent; always OK.
  Status close();

  // Embedding only (needs <actorflow/embedding.h>). For actors that must not block: builds the
  // request that run_by_name() would send, so an embedding actor can send (run_atom, request) to
  // master() itself and handle the reply (std::vector<Tensor> or an error) asynchronously. The
  // request is immutable and shared. May block briefly in cluster mode to connect to the tasks
  // the graph names. Errors: those of status(), Cancelled after close(), connection failures.
  Result<std::shared_ptr<const RunRequest>> prepare(const std::vector<std::pair<std::string, Tensor>>& feeds,
                                                    const std::vector<std::string>& fetches,
                                                    const std::vector<std::string>& targets = {});
  // Embedding only (needs <actorflow/embedding.h>). The master actor that runs this session's
  // steps (a handle; the server owns the actor); an invalid handle when status() is not OK.
  caf::actor master() const;

 private:
  struct Impl;
  std::shared_ptr<const Graph> snapshot();
  // run() with its names resolved; `options`/`metadata` as in the traced run().
  Result<std::vector<Tensor>> run_named(const RunOptions* options, RunMetadata* metadata,
                                        const std::vector<std::pair<std::string, Tensor>>& feeds,
                                        const std::vector<std::string>& fetches,
                                        const std::vector<std::string>& targets);
  // A traced step through the master (options->trace_level = kFullTrace).
  Result<std::vector<Tensor>> run_traced(const RunOptions& options, RunMetadata* metadata,
                                         const std::vector<std::pair<std::string, Tensor>>& feeds,
                                         const std::vector<std::string>& fetches,
                                         const std::vector<std::string>& targets);

  std::unique_ptr<Impl> impl_;
};

}  // namespace actorflow
