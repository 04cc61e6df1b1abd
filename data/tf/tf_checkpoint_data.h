// A CheckpointData (data/checkpoint.h: what the Saver and the Supervisor save) in TensorFlow's
// checkpoint format and back, with TensorFlow's names:
//   - a variable "w" is the tensor "w" (as tf.train.Saver names a variable by its op name);
//   - its optimizer slots (the "w:slots" blob, data/variable_slots.h) are TensorFlow's slot
//     variables: "w/Momentum", "w/Adam" and "w/Adam_1" (first and second moments), "w/Adagrad",
//     "w/RMSProp" and "w/RMSProp_1" (mean square and momentum); Adam's update count, which
//     TensorFlow keeps as the shared "beta1_power"/"beta2_power" instead, as the int64 scalar
//     "w/Adam_t" (TensorFlow ignores an entry no variable of its graph names);
//   - the global step as the int64 scalar "global_step" unless a variable of that name is saved.
// A slot entry wins over a saved variable of the same name (an imported TensorFlow graph's slot
// variable, which actorflow's optimizer updates do not touch: they keep the slots themselves).
// docs/interop.md, "Saver, Supervisor and `actorflow ckpt` in TensorFlow's format", lists the
// rules and what is not carried over. Pure functions over files; thread-safe for distinct prefixes.
#pragma once

#include <string>

#include "core/status.h"
#include "data/checkpoint.h"

namespace actorflow {

// Writes `data` as the TensorFlow checkpoint `prefix` (one data file, crash-safe as
// write_tf_checkpoint). InvalidArgument naming the variable for a dtype TensorFlow's format has
// no equivalent for here (uint8 other than a slot blob) or a slot blob that does not decode for
// its variable (a "w:slots" without "w"); Unavailable naming the file for I/O errors.
Status write_checkpoint_data_as_tf(const std::string& prefix, const CheckpointData& data);

// Reads the TensorFlow checkpoint `prefix` into a CheckpointData: every tensor under its name
// (float16 and bfloat16 widened to float32, partitioned tensors assembled whole); the slot
// entries above also folded into "w:slots" when "w" is present with their shape; the global
// step from "global_step" (an int32 or int64 scalar), else 0. Adam's moments need an update
// count: "w/Adam_t" when present, else one derived from TensorFlow's "beta1_power" and
// "beta2_power" when they are the default betas' (0.9^t and 0.999^t, checked to 1e-3
// relative); otherwise the moments stay plain entries and a WARNING names the variable (its value
// still restores). Errors as TfCheckpointReader::open and read (NotFound when "<prefix>.index" is
// missing; DataLoss naming the file and the entry).
Result<CheckpointData> read_tf_checkpoint_data(const std::string& prefix);

// True when `path` names a TensorFlow checkpoint: "<path>.index" exists, or `path` itself ends in
// ".index" and exists.
bool is_tf_checkpoint(const std::string& path);

// `path` as a checkpoint's name: a TensorFlow checkpoint's prefix when `path` is its ".index" file
// (and not itself a prefix with an index beside it), else `path` unchanged.
std::string checkpoint_name_of(const std::string& path);

// Reads a checkpoint in either format: TensorFlow's when is_tf_checkpoint(path) (a trailing
// ".index" is dropped), actorflow's (read_checkpoint) otherwise. Errors as those readers'.
Result<CheckpointData> read_any_checkpoint(const std::string& path);

}  // namespace actorflow
