// tf.train.Saver and tf.train.latest_checkpoint over actorflow's crash-safe checkpoint files
// (data/checkpoint.h, docs/checkpoints.md): one msgpack file "<prefix>-<global_step>" per save,
// CRC-32C checked, written to a temporary name, fsynced and renamed, with the TensorFlow-style
// index file "checkpoint" beside it. Included by <actorflow/train.h>; includes no CAF header.
//
//   af::train::Saver saver(root);                                   // every variable of the graph
//   auto path = saver.save(sess, "/tmp/run/model.ckpt", gs);        // "/tmp/run/model.ckpt-<step>"
//   auto latest = af::train::latest_checkpoint("/tmp/run");         // Result<std::string>
//   af::Status st = saver.restore(sess, *latest);
//
// The values travel through Session::run (a fetch of each variable to save, a fed Assign on the
// variable's device to restore), so variables on remote parameter servers work as local ones.
// Files written by a Saver and by the Supervisor are interchangeable (same names: the variable's
// node name). Implemented in library af_train_session (actorflow::actorflow links it), since
// it runs sessions; af_train alone stays graph-level.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "core/status.h"
#include "graph/scope.h"

namespace actorflow {

class Session;

namespace train {

struct SaverOptions {
  // How many checkpoints of one prefix save() keeps (the newest by global step), as TF's
  // max_to_keep; 0 or less keeps every one.
  int max_to_keep = 5;
  // Name of the sub-scope its restore ops are built in (made unique: "save", "save_1", ...).
  std::string name = "save";
  // save() writes TensorFlow's V2 checkpoint "<save_path>-<step>" (.index and .data-* files, which tf.train.Saver and tf.train.load_checkpoint read; names and what is carried in
  // docs/interop.md) instead of actorflow's file. restore() and latest_checkpoint() read both.
  bool tensorflow_format = false;
  // With tensorflow_format: one data file per parameter-server task holding variables
  // ("<prefix>.data-0000i-of-0000N", as tf.train.Saver(sharded=True); a local server's devices
  // count as places of their own), each variable in its task's file; one data file when all
  // variables live in one place. false: always one data file. Partitioned variables are written
  // as TensorFlow's slices either way. Ignored in actorflow's format.
  bool sharded = true;
};

class Saver {
 public:
  // Builds the restore ops (a placeholder and an Assign per variable, on the variable's device)
  // for `var_list`, default every variable of s's graph (train::global_variables of the root
  // scope, whatever s's name prefix), in sub-scope opts.name of s. Build the model first: variables
  // created later are not saved. Errors (an entry that is not a variable, a variable listed
  // twice, a broken scope) are reported by status() and by every save() and restore().
  explicit Saver(const Scope& s, const std::vector<Output>& var_list = {}, SaverOptions opts = {});
  ~Saver();
  // Movable (a moved-from Saver may only be destroyed or assigned to), not copyable.
  Saver(Saver&&) noexcept;
  Saver& operator=(Saver&&) noexcept;
  Saver(const Saver&) = delete;
  Saver& operator=(const Saver&) = delete;

  // OK, or the construction error.
  Status status() const;
  // The variables saved and restored, in order.
  const std::vector<Output>& var_list() const;

  // Fetches every variable of var_list in one run of `sess` and writes them, with global_step,
  // crash-safely to "<save_path>-<global_step>" (save_path = "<dir>/<prefix>", e.g.
  // "/tmp/run/model.ckpt"; dir is created). Then rewrites dir's index "checkpoint" to name it and
  // deletes the checkpoints of this prefix beyond max_to_keep (oldest first) and any with a
  // higher step than this one (an abandoned run after a restore from an older step). Returns the
  // path written. Errors: the run's (an uninitialised variable), the file system's (naming the
  // file), InvalidArgument for a negative step or a save_path without a file name prefix.
  Result<std::string> save(Session& sess, const std::string& save_path, int64_t global_step);
  // As above with the step read from `global_step` (an int64, int32, float32 or float64 scalar
  // variable or tensor; a float one must hold a whole number) in the same run as the variables,
  // so the file's step and values belong together.
  Result<std::string> save(Session& sess, const std::string& save_path, const Output& global_step);

  // Reads checkpoint `path` (actorflow's file, or TensorFlow's checkpoint prefix: "<path>.index"
  // exists) and assigns its values to exactly var_list's variables in one run
  // (values of other variables in the file are ignored; nothing is assigned when an error is
  // found before the run). Errors name the file: NotFound when it does not exist or lacks a
  // variable of var_list (naming the variable); DataLoss when it is corrupt or truncated;
  // InvalidArgument naming the variable when a dtype or shape differs; the run's errors.
  Status restore(Session& sess, const std::string& path);

  // Thread-safety: save() and restore() may be called from several threads; one Saver runs one
  // of them at a time. Two Savers (or processes) must not save into one directory concurrently.

 private:
  class Impl;
  std::unique_ptr<Impl> impl_;
};

// tf.train.latest_checkpoint: the path of the newest checkpoint "<dir>/<prefix>-<step>" that
// reads back whole (either format; a TensorFlow checkpoint's path is its prefix). Candidates are the index's entries plus any complete file of that prefix in
// dir (a crash between a save's rename and its index rewrite leaves one), tried by descending
// step; each is read and checksum-verified (so this reads the files it tries), and one that
// fails is logged as a warning and skipped for the previous one (a checkpoint that fails its
// checksum is reported and the previous one is used; TensorFlow returns the index's
// entry unchecked). NotFound when dir has none; DataLoss listing each file and its problem when
// none is readable. Thread-safe.
Result<std::string> latest_checkpoint(const std::string& dir, const std::string& prefix = "model.ckpt");

}  // namespace train
}  // namespace actorflow
