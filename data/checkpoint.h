// Checkpoint files and a rotating checkpoint directory (see docs/checkpoints.md for the format).
//
// A checkpoint file is a msgpack map {format, version, global_step, variables: [{name, dtype,
// shape, data}]} followed by a msgpack uint32 holding the CRC-32C of every byte before it.
// Files are written to a temporary name, fsynced, renamed into place and the directory fsynced,
// so a reader sees either the old file or the complete new one. A CheckpointManager keeps the
// newest K in one directory with an index file "checkpoint" that is itself replaced atomically
// after the data file is durable; a crash at any point of a save leaves the newest readable
// checkpoint readable.
//
// No shared state: distinct objects may be used from distinct threads; one CheckpointManager
// object is not synchronised. One manager (one writer) per directory at a time.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "core/status.h"
#include "data/checkpoint_format.h"
#include "tensor/tensor.h"

namespace actorflow {

// One part of a partitioned variable as it was saved: the part variable, the rows of the whole
// tensor it holds, and where it lived.
struct SavedPart {
  std::string variable;  // the part variable's node name ("emb/part_1")
  int64_t offset = 0;    // its first row in the whole tensor
  int64_t rows = 0;      // its number of rows
  std::string place;     // checkpoint_place() of its device; "" when not known
};

// Where a saved variable lived when it was read (VariableCheckpointOps::read fills it). Formats
// that record placement use it: TensorFlow's writes one data file per place and a partitioned
// variable as slices (data/tf/tf_checkpoint_data.h); actorflow's own file keeps it (an optional
// "placement" map, which files written before it lack: read with none), so `actorflow ckpt
// convert` writes the same data files as a TensorFlow-format save would. A value type.
struct SavedPlacement {
  std::string place;             // an unpartitioned variable's place; "" when not known
  std::vector<SavedPart> parts;  // a partitioned variable's parts, by offset; empty otherwise
};

// What a checkpoint holds: the global step and named host tensors (any dtype, any shape), and,
// when known, where each saved variable lived (keyed by its saved name, a partitioned variable's
// by its logical name; may be empty or cover only some variables).
struct CheckpointData {
  int64_t global_step = 0;
  std::map<std::string, Tensor> variables;
  std::map<std::string, SavedPlacement> placement;
};

// The file format's name and version, written into every file.
inline constexpr const char* kCheckpointFormat = "actorflow.checkpoint";
inline constexpr int kCheckpointVersion = 1;

// The points of a save at which a test hook runs, in order. write_checkpoint() runs the first
// six; CheckpointManager::save() all of them (kOldDeleted once per deleted file).
enum class SavePoint : int {
  kTmpCreated = 0,      // temporary data file created, empty
  kPartiallyWritten,    // header and first variable written (not the rest, not the checksum)
  kWritten,             // all bytes written, not yet fsynced
  kSynced,              // temporary file fsynced, not yet renamed
  kRenamed,             // renamed to its final name, directory not yet fsynced
  kDirSynced,           // directory fsynced: the data file is durable
  kIndexTmpWritten,     // new index written to its temporary file and fsynced
  kIndexRenamed,        // index renamed into place, directory not yet fsynced
  kIndexDirSynced,      // index durable; old checkpoints not yet deleted
  kOldDeleted,          // one checkpoint beyond `keep` deleted (once per file)
};
inline constexpr int kNumSavePoints = 10;
// "tmp_created", "partially_written", ... for messages and test names.
const char* save_point_name(SavePoint p);

// Called at each SavePoint. For fault-injection tests only: it may _exit() (in a forked child)
// or throw (the exception leaves save() with the files as a crash would leave them) to simulate
// a crash at that point. Returning normally continues the save.
using SaveHook = std::function<void(SavePoint)>;

// Writes `data` to `path` atomically: "<path>.tmp.<pid>.<n>" is written, fsynced, renamed to
// `path`, and the directory fsynced. The temporary file is removed on failure. Tensors must be
// initialised host tensors of at most 4 GiB each. Errors name the file and the failing call.
Status write_checkpoint(const std::string& path, const CheckpointData& data, const SaveHook& hook = {});

// Reads and verifies a checkpoint file. NotFound if missing; DataLoss naming the file when the
// checksum does not match, the file is truncated, or its contents are malformed; Unimplemented
// for a newer format version. The returned tensors are freshly allocated and owned by the caller.
Result<CheckpointData> read_checkpoint(const std::string& path);
// Decodes the bytes of a checkpoint file (as read_checkpoint does after reading `path`, which
// only names it in errors). Every size is checked against the bytes present before anything is
// allocated; errors as read_checkpoint's. Pure; thread-safe.
Result<CheckpointData> decode_checkpoint(const std::string& bytes, const std::string& path);

// A checkpoint skipped by restore_latest() and why.
struct SkippedCheckpoint {
  std::string path;
  Status why;
};

// A directory of checkpoints "<prefix>-<global_step>" plus the index file "checkpoint", which
// names the newest `keep` of them (a text file in TensorFlow's style:
//   model_checkpoint_path: "model.ckpt-300"
//   all_model_checkpoint_paths: "model.ckpt-200"
//   all_model_checkpoint_paths: "model.ckpt-300"    (oldest first)).
// "Newest" means highest global step.
//
// save() writes `format`'s files: actorflow's one file "<prefix>-<step>", or TensorFlow's bundle
// "<prefix>-<step>.index" + "<prefix>-<step>.data-0000i-of-0000N" (one data file per task holding
// variables unless set_tensorflow_sharded(false); data/tf/tf_checkpoint_data.h:
// the path returned and listed is then the bundle's prefix, as TensorFlow names it). Whatever the
// format, restore_latest(), list() and the rotation see the checkpoints of both formats in the
// directory (a step saved in both is read in TensorFlow's).
class CheckpointManager {
 public:
  // Manages `dir` (created on the first save). keep <= 0 keeps every checkpoint.
  CheckpointManager(std::string dir, int keep, std::string prefix = "model.ckpt",
                    CheckpointFormat format = CheckpointFormat::kActorflow);

  // Saves `data` as "<dir>/<prefix>-<global_step>" (replacing a file of the same step), rewrites
  // the index atomically to name it and the newest keep-1 older ones, then deletes every other
  // checkpoint of this prefix: those beyond `keep` and those with a higher step than this one
  // (an abandoned future after a restore from an older step). Also removes temporary files left
  // by a crashed save. Returns the path written. A failed deletion is logged, not an error.
  Result<std::string> save(const CheckpointData& data);

  // Returns the newest checkpoint that reads back whole: candidates are the index's entries
  // plus any complete "<prefix>-<step>" file in the directory (a crash between the data file's
  // rename and the index rewrite leaves one), tried by descending step. Every unreadable one is
  // logged with AF_LOG(WARNING) (naming the file and why), recorded in last_restore_skipped(), and
  // the previous one tried. nullopt when the directory has no checkpoint; DataLoss listing each
  // file and its problem when checkpoints exist but none is readable.
  Result<std::optional<CheckpointData>> restore_latest();

  // Paths of the checkpoints the index names, newest first. When the index is missing or
  // unreadable, the "<prefix>-<step>" files found in the directory instead. Empty if none.
  std::vector<std::string> list() const;

  // The files the last restore_latest() skipped, newest first.
  const std::vector<SkippedCheckpoint>& last_restore_skipped() const { return skipped_; }
  // The file the last restore_latest() returned; "" when it returned none or failed.
  const std::string& last_restored_path() const { return restored_path_; }

  // TensorFlow's format only: whether save() writes one data file per place of the data's
  // placement (TfSaveOptions::sharded; the default, as TensorFlow's Supervisor saves sharded) or
  // one data file. Not synchronised with save().
  void set_tensorflow_sharded(bool sharded) { tf_sharded_ = sharded; }
  bool tensorflow_sharded() const { return tf_sharded_; }

  // Test hook run at each SavePoint of later save() calls (empty: none). TensorFlow's format runs
  // only kDirSynced (its writer is write_tf_checkpoint's) and the index's points.
  void set_save_hook_for_testing(SaveHook hook) { hook_ = std::move(hook); }

  const std::string& dir() const { return dir_; }
  int keep() const { return keep_; }
  CheckpointFormat format() const { return format_; }
  // Path of the index file, "<dir>/checkpoint".
  std::string index_path() const;
  // The path save() uses for `global_step`.
  std::string path_for_step(int64_t global_step) const;

 private:
  // Steps named by the index; nullopt when it is missing or unreadable (`why` says which).
  std::optional<std::vector<int64_t>> read_index(std::string* why) const;
  // Steps of complete "<prefix>-<step>" files in the directory.
  std::vector<int64_t> scan_dir() const;
  Status write_index(const std::vector<int64_t>& steps_newest_first);
  void remove_stale_temporaries() const;

  std::string dir_;
  int keep_;
  std::string prefix_;
  CheckpointFormat format_;
  bool tf_sharded_ = true;
  SaveHook hook_;
  std::vector<SkippedCheckpoint> skipped_;
  std::string restored_path_;
};

// How corrupt_latest() damages a checkpoint.
enum class CorruptMode {
  kFlipByte,      // XOR 0xFF one byte in the middle of the file
  kTruncateHalf,  // cut the file to half its length
  kDropLastByte,  // cut the last byte (part of the checksum)
  kZeroLength,    // truncate to zero bytes
};

// Fault injection: damages the newest checkpoint of `prefix` in `dir` (the one restore_latest()
// would try first) in place, and returns its path (a TensorFlow bundle's index file, which every
// mode damages detectably). NotFound when there is none.
Result<std::string> corrupt_latest(const std::string& dir, CorruptMode mode, const std::string& prefix = "model.ckpt");

// The global step encoded in a checkpoint file name "<prefix>-<digits>" (directory part ignored),
// or nullopt when `path` does not name a complete checkpoint of `prefix`. A TensorFlow bundle's
// index "<prefix>-<digits>.index" names its step too.
std::optional<int64_t> checkpoint_step_from_path(const std::string& path, const std::string& prefix = "model.ckpt");

}  // namespace actorflow
