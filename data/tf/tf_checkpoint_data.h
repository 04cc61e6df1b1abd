// A CheckpointData (data/checkpoint.h: what the Saver and the Supervisor save) in TensorFlow's
// checkpoint format and back, with TensorFlow's names:
//   - a variable "w" is the tensor "w" (as tf.train.Saver names a variable by its op name);
//   - its optimizer slots (the "w:slots" blob, data/variable_slots.h) are TensorFlow's slot
//     variables: "w/Momentum", "w/Adam" and "w/Adam_1" (first and second moments), "w/Adagrad",
//     "w/RMSProp" and "w/RMSProp_1" (mean square and momentum); Adam's update count, which
//     TensorFlow keeps as the shared "beta1_power"/"beta2_power" instead, as the int64 scalar
//     "w/Adam_t" (TensorFlow ignores an entry no variable of its graph names);
//   - the global step as the int64 scalar "global_step" unless a variable of that name is saved;
//   - a partitioned variable (CheckpointData::placement's parts) as TensorFlow's slices of its
//     logical name, its slots sliced alike; one data file per place (TfSaveOptions).
// A slot entry wins over a saved variable of the same name (an imported TensorFlow graph's slot
// variable, which actorflow's optimizer updates do not touch: they keep the slots themselves).
// docs/interop.md, "Saver, Supervisor and `actorflow ckpt` in TensorFlow's format", lists the
// rules and what is not carried over. Pure functions over files; thread-safe for distinct prefixes.
#pragma once

#include <string>

#include "core/status.h"
#include "data/checkpoint.h"

namespace actorflow {

// The suffix of the int64 scalar holding a variable's Adam update count ("w/Adam_t").
inline constexpr const char* kTfAdamCountSuffix = "/Adam_t";

// How write_checkpoint_data_as_tf lays out the bundle.
struct TfSaveOptions {
  // One data file per place of data.placement holding variables, as tf.train.Saver(sharded=True)
  // writes one per device: "<prefix>.data-0000i-of-0000N", places in order (job, then replica and
  // task numerically; docs/interop.md). false, or every variable in one place: one data file.
  bool sharded = true;
};

// Writes `data` as the TensorFlow checkpoint `prefix` (crash-safe as write_tf_checkpoint):
// data files as `opts` says, each variable (with its slots) in its place's file and the global
// step in its variable's file, else the first; a partitioned variable (data.placement parts that
// tile its rows) as TensorFlow's slices: one tensor of the full name and shape with one slice
// entry per part, in the part's place's file, its slot variables ("emb/Adam", ...) sliced alike
// when every part has that slot (else left out, with a WARNING naming the variable), Adam's count
// "emb/Adam_t" the largest of the parts' and "emb/part_i/Adam_t" per part when they differ.
// Without placement (or parts that do not tile the rows) a variable is written whole.
// InvalidArgument naming the variable for a dtype TensorFlow's format has no equivalent for here
// (uint8 other than a slot blob) or a slot blob that does not decode for its variable (a
// "w:slots" of neither a saved variable nor a part); Unavailable naming the file for I/O errors.
Status write_checkpoint_data_as_tf(const std::string& prefix, const CheckpointData& data,
                                   const TfSaveOptions& opts = {});

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
