// The op fuzzer's cases (docs/security.md), shared by tests/op_fuzz_test.cc (every op's shape function and
// CPU kernel in this process) and tests/security_test.cc (the same cases as GraphDefs sent by a
// remote client to a real `actorflow node`).
//
// A case is one node of one registered op: a plausible case of the op (a maker per op, in
// tests/util/op_fuzz.cc), then, for most cases, one to three mutations from a catalogue of hostile
// inputs: huge, negative, overflowing, zero and empty dims; ranks 0, 8 and 33; attributes of the
// wrong type, huge or negative, bad strings; dtypes that do not match; constant shape and index
// inputs with hostile values; declared shapes that lie about the tensors; uninitialised inputs.
// Deterministic: case k of a run with seed s is the same on every machine.
//
// Single-threaded use; the functions are pure apart from the registries they read.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "core/status.h"
#include "graph/graph.h"

namespace actorflow {
namespace testing {

// One fuzz case: the node "fuzz" of `op` with `attrs`, whose input i is `inputs[i]` (what a kernel
// gets; an uninitialised Tensor() is possible), a Const node when is_const[i] (the shape function
// sees its value) and otherwise a Placeholder declaring declared[i] (the tensor's own shape unless
// a mutation lies about it).
struct FuzzCase {
  uint64_t index = 0;
  std::string op;
  std::vector<Tensor> inputs;
  std::vector<bool> is_const;
  std::vector<Shape> declared;
  AttrMap attrs;
  std::vector<std::string> attr_names;  // the op's attributes (mutations pick among them)
  std::vector<std::string> notes;       // the mutations applied, for failure messages
  // "case 17 Slice (attr size mutated, input 0 replaced)".
  std::string describe() const;
};

// Every op the fuzzer has a maker for, sorted.
const std::vector<std::string>& fuzz_ops();
// False for the runtime's own ops that have no kernel (_Arg, _Retval, _Send, _Recv: the executor
// runs them itself); true for every other op the fuzzer knows.
bool fuzz_op_has_kernel(const std::string& op);

// The seed of case k of a run with `seed` (splitmix64); a case's randomness derives from it only.
uint64_t fuzz_case_seed(uint64_t seed, uint64_t k);
// Case k of a run with `seed`: op fuzz_ops()[k % n], its plausible case, mutated in 60 % of cases.
// The variable ops name variables "v0".."v3" and never wait for other replicas. SaveV2 and
// RestoreV2 write and read only "ck0".."ck3" in fuzz_checkpoint_dir() (their prefix input, when it
// is a uint8 vector, is set to one of those after the mutations); MergeV2Checkpoints merges and
// deletes only those (every uint8 input not naming only them is replaced by "ck0").
FuzzCase make_fuzz_case(uint64_t seed, uint64_t k);
// A directory of this process for the checkpoint ops' files, made on first use
// ("<tmp>/af_op_fuzz_<pid>"); the caller removes it when done. Not thread-safe on first use.
const std::string& fuzz_checkpoint_dir();

// A graph holding c's inputs as nodes "in0", "in1", ... (Const or Placeholder, declaring their
// shapes as the case says) and, when `with_op`, the node "fuzz" itself: no shape function has run
// on it (its outputs are `outputs` of float32, unknown shape). For GraphDefs a peer would send.
Graph fuzz_graph(const FuzzCase& c, bool with_op, int outputs);
// The node "fuzz" of `c` without outputs, its inputs edges to nodes 0..n-1 of fuzz_graph.
Node fuzz_node(const FuzzCase& c);

// True when `s` is a refusal a hostile case may get: one of InvalidArgument, ResourceExhausted,
// Unimplemented, FailedPrecondition, OutOfRange, NotFound, and its message names `who` (e.g.
// "Slice 'fuzz'").
bool acceptable_refusal(const Status& s, const std::string& who);

// Outputs steered by a case stay small: the cap the fuzzers set with set_max_output_bytes().
constexpr size_t kFuzzMaxOutputBytes = size_t{64} << 20;

}  // namespace testing
}  // namespace actorflow
