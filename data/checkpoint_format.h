// Which file format a checkpoint is written in (docs/checkpoints.md, docs/interop.md).
#pragma once

namespace actorflow {

enum class CheckpointFormat {
  // actorflow's own: one msgpack file "<prefix>-<step>", CRC-32C checked (data/checkpoint.h).
  kActorflow,
  // TensorFlow's V2 tensor bundle: "<prefix>-<step>.index" and "<prefix>-<step>.data-0000i-of-0000N"
  // (data/tf/tf_checkpoint.h), which tf.train.Saver and tf.train.load_checkpoint read.
  kTensorFlow,
};

}  // namespace actorflow
