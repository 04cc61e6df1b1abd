// Reading variables into a CheckpointData and assigning one back, through the public Session
// API, so it works wherever the variables live (this process or a remote parameter server): the
// path both the Supervisor (actors/supervisor.cc) and train::Saver (train/saver.cc) take.
//
// Construction builds graph ops (not thread-safe, like every builder); read() and assign() only
// run them and may be called from several threads at once (Session::run is thread-safe).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "core/status.h"
#include "data/checkpoint.h"
#include "data/variable_slots.h"  // slots_key, is_slots_key
#include "graph/ops_variables.h"
#include "graph/scope.h"

namespace actorflow {

class Session;

class VariableCheckpointOps {
 public:
  // Builds, under the sub-scope `name` of `scope` (made unique) and without its control
  // dependencies, one placeholder of the variable's dtype and shape and one Assign of it per
  // variable of `vars`, both requested on the variable's device (so a restore sends the value to
  // the variable's task). Errors (an invalid entry, one that is not a variable, a variable twice,
  // a broken scope) are kept in status(), which read() and assign() return.
  VariableCheckpointOps(const Scope& scope, const std::vector<Output>& vars, const std::string& name);

  const Status& status() const { return status_; }
  // The variables, in the order given.
  const std::vector<Output>& variables() const { return vars_; }

  // Every variable's value, fetched in one run (one consistent snapshot), keyed by the
  // variable's node name (the shards of a partitioned variable, train::get_partitioned_variable,
  // as one tensor of its full shape under its logical name; rows of shards not in the list are
  // zero; data.placement records each variable's and each shard's checkpoint_place and a shard's
  // rows), and beside it, under slots_key(name), its optimizer slots (a uint8
  // blob, ops::variable_slots) when an optimizer has updated it. global_step (optional: an integer scalar, fetched in the same run when
  // it is not one of the variables) becomes data.global_step; without it global_step is 0.
  // Errors: the run's (e.g. FailedPrecondition for an uninitialised variable); InvalidArgument
  // when global_step is not an integer scalar.
  Result<CheckpointData> read(Session& sess, const Output& global_step = Output()) const;

  // The variables `data` has no value for, in order.
  std::vector<std::string> missing_from(const CheckpointData& data) const;

  // Assigns data's value to every variable in one run (a shard gets its rows of its logical
  // variable's tensor, which must have the logical shape), and its slots (slots_key; a shard
  // without its own takes its rows of the logical variable's, as a TensorFlow checkpoint's slot
  // variables give them, with Adam's count from "<shard>/Adam_t" when `data` has that integer
  // scalar; none in `data` clears the variable's slots, so an older file or a variable no optimizer had touched restores
  // as it was saved). Each value's dtype and shape are checked
  // first: InvalidArgument naming the variable, `source` (the file) and both dtypes or shapes.
  // A variable `data` lacks is NotFound naming it and `source` unless `allow_missing` (then it is
  // left as it is). Values of other names in `data` are ignored.
  Status assign(Session& sess, const CheckpointData& data, const std::string& source, bool allow_missing) const;

 private:
  // The name variable i is saved under: its logical variable's for a shard, else its own.
  const std::string& saved_name(size_t i) const;

  std::vector<Output> vars_;
  std::vector<ops::PartitionRecord> parts_;  // per variable; logical empty when not a shard
  std::vector<Output> placeholders_;
  std::vector<Output> assigns_;
  std::vector<Output> slots_;              // VariableSlots per variable
  std::vector<Output> slot_placeholders_;  // uint8 [-1]
  std::vector<Output> slot_assigns_;       // RestoreVariableSlots, after the value's Assign
  Status status_;
};

// Where a variable on `device` (a requested device name) is saved from, for CheckpointData's
// placement: its task "/job:<job>/replica:<r>/task:<t>" (replica and task 0 when unset) when the
// name has a job, so every device of one task is one place; else the device's canonical name
// ("/device:CPU:1" for "/cpu:1", a local server's device); "" for ""; a name that does not parse
// as itself. Pure; thread-safe.
std::string checkpoint_place(const std::string& device);

// The value of a global step: a scalar int64 or int32, or a float32/float64 holding a whole
// number within +-2^53 (TensorFlow 1.x's float global steps). InvalidArgument otherwise.
Result<int64_t> global_step_value(const Tensor& t);

}  // namespace actorflow
