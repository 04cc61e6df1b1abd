// Every registered op fuzzed (docs/security.md): the test walks the op registry (graph/op_registry.h) and
// the kernel registry (device/kernel.h) and runs, for each op, its shape function (through
// infer_node_shapes, as a graph build or a client's GraphDef does) and its CPU kernel (as the
// executor does, with real variable actors behind the variable ops) on the hostile cases of
// tests/util/op_fuzz.h.
//
// A finding is a crash, a sanitizer report (scripts/test-sanitizers.sh runs this test under ASan
// and UBSan), an exception escaping a shape function or a kernel, an error that does not name the
// op ("<Op> 'fuzz': ...") or has an unexpected code, or an output that is not a valid tensor.
// The test fails on any finding and when an op is registered without being covered.
//
// Seeded: AF_OP_FUZZ_SEED=N repeats a run (the seed is printed; every case derives from it and its
// number, so AF_OP_FUZZ_CASE=K runs case K alone). AF_OP_FUZZ_CASES=N sets the count (default
// 100000, under the sanitizers too). AF_OP_FUZZ_TRACE=1 names each
// case on stderr before it runs (a UBSan report ends the process without naming the case).
#include <gtest/gtest.h>

#include <unistd.h>

#include <chrono>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <map>
#include <random>
#include <set>
#include <string>
#include <vector>

#include "device/device.h"
#include "device/kernel.h"
#include "graph/op_registry.h"
#include "graph/scope.h"
#include "graph/shape_util.h"
#include "tests/util/kernel_run.h"
#include "tests/util/op_fuzz.h"

#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_UNDEFINED__)
#define AF_FUZZ_SANITIZED 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer) || __has_feature(undefined_behavior_sanitizer)
#define AF_FUZZ_SANITIZED 1
#endif
#endif

#ifdef AF_FUZZ_SANITIZED
#include <sanitizer/common_interface_defs.h>
#endif

namespace actorflow {
namespace {

// The case in flight, printed when a sanitizer ends the process (its report names the code, this
// names the case: AF_OP_FUZZ_SEED and AF_OP_FUZZ_CASE repeat it).
std::string& case_in_flight() {
  static std::string s;
  return s;
}
#ifdef AF_FUZZ_SANITIZED  // the sanitizers' death callback; a plain build has none
void print_case_in_flight() { std::fprintf(stderr, "op fuzz: the process ended in %s\n", case_in_flight().c_str()); }
#endif
// The same from a signal (a crash in a normal build, the abort of a sanitizer report): then exits.
void on_fatal_signal(int sig) {
  const std::string line = "op fuzz: signal " + std::to_string(sig) + " in " + case_in_flight() + "\n";
  (void)!::write(2, line.data(), line.size());
  std::signal(sig, SIG_DFL);
  std::raise(sig);
}

using testing::acceptable_refusal;
using testing::fuzz_case_seed;
using testing::fuzz_graph;
using testing::fuzz_node;
using testing::fuzz_op_has_kernel;
using testing::fuzz_ops;
using testing::FuzzCase;
using testing::kFuzzMaxOutputBytes;
using testing::make_fuzz_case;

uint64_t env_u64(const char* name, uint64_t dflt) {
  const char* v = std::getenv(name);
  if (!v || !*v) return dflt;
  return std::strtoull(v, nullptr, 10);
}

// ---- running a case -----------------------------------------------------------------------

struct Tally {
  std::vector<std::string> findings;
  std::map<std::string, int> shape_ok, shape_err, kernel_ok, kernel_err;
  std::map<std::string, std::set<int>> codes;  // kernel error codes seen per op
};

struct Env {
  std::unique_ptr<Device> cpu = make_cpu_device("/job:localhost/replica:0/task:0/device:CPU:0", 0);
  testing::TestActorSystem actors;
  testing::ActorResources resources{actors.sys};
};

void run_case(Env& env, const FuzzCase& c, Tally& tally) {
  const std::string& op = c.op;
  const uint64_t k = c.index;
  std::mt19937_64 r(fuzz_case_seed(~k, k));  // the outputs a lying GraphDef declares
  auto finding = [&](const std::string& what) { tally.findings.push_back(c.describe() + ": " + what); };
  // The inputs as nodes of a graph: a Const (its value visible to the shape function) or a
  // Placeholder declaring the shape the shape function is told.
  Graph g = fuzz_graph(c, /*with_op=*/false, 0);
  Node n = fuzz_node(c);
  Status shape_status;
  try {
    shape_status = infer_node_shapes(g, n);
  } catch (const std::exception& e) {
    return finding(std::string("shape function threw: ") + e.what());
  } catch (...) {
    return finding("shape function threw a non-exception");
  }
  if (shape_status.ok()) {
    ++tally.shape_ok[op];
    for (const Shape& s : n.output_shapes)
      if (!check_static_shape(s).ok()) finding("shape function declared " + s.to_string());
  } else {
    ++tally.shape_err[op];
    if (!acceptable_refusal(shape_status, op + " 'fuzz'") || shape_status.code() == Code::kNotFound)
      finding("shape function error not a refusal naming the op: " + shape_status.to_string());
    // A peer's GraphDef declares whatever outputs it likes: the kernel runs anyway.
    n.output_types.assign(static_cast<size_t>(r() % 4), DType::kFloat32);
    n.output_shapes.assign(n.output_types.size(), Shape::unknown());
  }
  if (!fuzz_op_has_kernel(op)) return;

  // The CPU kernel, as the executor runs it.
  Status ks;
  try {
    auto kernel = KernelRegistry::global().create(n, "CPU");
    if (!kernel.ok()) {
      ks = kernel.status();
    } else {
      auto ctx = std::make_shared<OpKernelContext>(n, env.cpu.get(), c.inputs, static_cast<int64_t>(k) + 1,
                                                   &env.resources);
      if (!ctx->status().ok()) {
        ks = ctx->status();
      } else if (auto* async = dynamic_cast<AsyncOpKernel*>(kernel->get())) {
        int calls = 0;
        async->compute_async(ctx, [&](Status s) {
          ++calls;
          ks = s;
        });
        env.resources.drain();
        if (calls != 1) return finding("asynchronous kernel finished " + std::to_string(calls) + " times");
        if (ks.ok()) ks = ctx->status();
      } else {
        ks = (*kernel)->compute(*ctx);
        if (ks.ok()) ks = ctx->status();
      }
      if (ks.ok()) {
        for (const Tensor& t : ctx->outputs()) {
          if (!t.is_initialized()) continue;
          if (!t.shape().valid_for_tensor() || (t.bytes() > 0 && (!t.buffer() || t.buffer()->size() < t.bytes())))
            finding("output " + t.debug_string() + " is not a valid tensor");
        }
      }
    }
  } catch (const std::exception& e) {
    return finding(std::string("kernel threw: ") + e.what());
  } catch (...) {
    return finding("kernel threw a non-exception");
  }
  if (ks.ok()) {
    ++tally.kernel_ok[op];
  } else {
    ++tally.kernel_err[op];
    tally.codes[op].insert(static_cast<int>(ks.code()));
    if (!acceptable_refusal(ks, op + " 'fuzz'")) finding("kernel error not a refusal naming the op: " + ks.to_string());
  }
}

// Ops that never succeed by design (their kernel's whole job is to refuse).
const std::set<std::string>& always_refuse() {
  static const std::set<std::string> s = {"Placeholder"};
  return s;
}

// Every registered op has a spec here, every spec names a registered op, and the spec's kernel
// flag matches the kernel registry (a CPU kernel exactly where the spec runs one).
TEST(OpFuzzTest, EveryRegisteredOpAndCpuKernelIsCovered) {
  std::set<std::string> registered;
  for (const auto& op : OpRegistry::global().op_names()) registered.insert(op);
  std::set<std::string> cpu_kernels;
  for (const auto& [op, dev] : KernelRegistry::global().registered())
    if (dev == "CPU") cpu_kernels.insert(op);
  std::vector<std::string> uncovered, stale, kernel_mismatch;
  const std::set<std::string> known(fuzz_ops().begin(), fuzz_ops().end());
  for (const auto& op : registered)
    if (!known.count(op)) uncovered.push_back(op);
  for (const auto& op : fuzz_ops()) {
    if (!registered.count(op)) stale.push_back(op);
    if (fuzz_op_has_kernel(op) != (cpu_kernels.count(op) != 0)) kernel_mismatch.push_back(op);
  }
  for (const auto& op : cpu_kernels)
    if (!registered.count(op)) kernel_mismatch.push_back(op + " (a CPU kernel of no registered op)");
  auto join = [](const std::vector<std::string>& v) {
    std::string s;
    for (const auto& x : v) s += (s.empty() ? "" : ", ") + x;
    return s;
  };
  EXPECT_TRUE(uncovered.empty()) << "registered ops without a fuzz spec in tests/op_fuzz_test.cc: " << join(uncovered);
  EXPECT_TRUE(stale.empty()) << "fuzz specs of ops that are not registered: " << join(stale);
  EXPECT_TRUE(kernel_mismatch.empty()) << "the spec's kernel flag disagrees with the kernel registry: "
                                       << join(kernel_mismatch);
  EXPECT_GE(registered.size(), 90u);  // the registry is walked, not a hand-made list
}

TEST(OpFuzzTest, EveryOpSurvivesHostileShapesAttributesAndValues) {
  const uint64_t seed = env_u64("AF_OP_FUZZ_SEED", std::random_device{}() ^ (uint64_t{std::random_device{}()} << 32));
  // 100 000 in both passes: ~3 s here, ~7 s under ASan+UBSan (a reverted slice_box fix was found
  // at case 40 533 of one seed, so fewer would miss what the test is for).
  const uint64_t cases = env_u64("AF_OP_FUZZ_CASES", 100000);
  const char* only = std::getenv("AF_OP_FUZZ_CASE");
  const bool trace = env_u64("AF_OP_FUZZ_TRACE", 0) != 0;  // each case named before it runs
  std::printf("op fuzz: seed %llu (AF_OP_FUZZ_SEED=%llu repeats this run), %llu cases\n",
              static_cast<unsigned long long>(seed), static_cast<unsigned long long>(seed),
              static_cast<unsigned long long>(cases));
  std::fflush(stdout);
  // Outputs a peer steers are capped well below the host's memory: 64 MiB here, so hostile sizes
  // are refused (ResourceExhausted naming the op) instead of allocated.
  set_max_output_bytes(kFuzzMaxOutputBytes);
#ifdef AF_FUZZ_SANITIZED
  __sanitizer_set_death_callback(print_case_in_flight);
#endif
  for (int sig : {SIGABRT, SIGSEGV, SIGBUS, SIGFPE}) std::signal(sig, on_fatal_signal);
  Env env;
  Tally tally;
  const auto t0 = std::chrono::steady_clock::now();
  const uint64_t first = only ? std::strtoull(only, nullptr, 10) : 0;
  const uint64_t last = only ? first + 1 : cases;
  for (uint64_t k = first; k < last; ++k) {
    const FuzzCase c = make_fuzz_case(seed, k);
    case_in_flight() = "seed " + std::to_string(seed) + " " + c.describe();
    if (trace) std::fprintf(stderr, "op fuzz: %s\n", case_in_flight().c_str());
    run_case(env, c, tally);
    if (tally.findings.size() >= 20) break;
  }
  set_max_output_bytes(0);
  std::error_code ignored;
  std::filesystem::remove_all(testing::fuzz_checkpoint_dir(), ignored);
  const double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  std::printf("op fuzz: %llu cases over %zu ops in %.1f s, %zu findings\n",
              static_cast<unsigned long long>(last - first), fuzz_ops().size(), secs, tally.findings.size());
  for (const auto& f : tally.findings) ADD_FAILURE() << "seed " << seed << ": " << f;
  if (only) return;
  // Depth: every op's shape function accepted some cases, and every kernel ran to completion on
  // some (so the plausible cases reach the arithmetic, not just the checks).
  for (const auto& op : fuzz_ops()) {
    EXPECT_GT(tally.shape_ok[op], 0) << op << ": its shape function accepted no case";
    if (fuzz_op_has_kernel(op) && !always_refuse().count(op)) {
      EXPECT_GT(tally.kernel_ok[op], 0) << op << ": its kernel completed no case";
    }
  }
}

}  // namespace
}  // namespace actorflow
