// TensorFlow V2 checkpoints (tensor bundles), read and written without TensorFlow.
//
// A checkpoint "<prefix>" is the files
//   <prefix>.index                      a LevelDB-format table (no compression, bytewise order):
//                                       under the empty key a BundleHeaderProto (num_shards,
//                                       endianness, version), then one BundleEntryProto per
//                                       tensor name, sorted: dtype, shape, data file, offset,
//                                       size and the masked CRC-32C of the tensor's bytes
//   <prefix>.data-NNNNN-of-MMMMM        the tensors' little-endian bytes, back to back
// A partitioned variable (TensorFlow's slices) has an entry under its name holding the full
// dtype and shape and the list of slices, and one entry per slice under a key encoding the name
// and the slice's extents (TensorFlow's "ordered code", which sorts slice keys, which begin with
// a 0 byte, before every name). A directory's `checkpoint` file (text-format CheckpointState)
// names the newest prefix. docs/interop.md, "TensorFlow checkpoints", describes the format, what
// was checked against TensorFlow, and why the reader parses the table itself.
//
// Supported dtypes: float32, float64, float16, bfloat16, int32, int64, bool. Every size, offset,
// shape, slice and checksum of a file is checked before it is used; bad files get DataLoss (or
// Unimplemented for a valid file using something unsupported) naming the file and the entry.
//
// No shared state: distinct objects may be used from distinct threads; a TfCheckpointReader is
// immutable after open() and its const methods may be called concurrently.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "core/status.h"
#include "tensor/tensor.h"
#include "tensor/types.h"

namespace actorflow {

// TensorFlow's DataType values (types.proto) of the dtypes a bundle may hold here.
enum class TfDType : int {
  kFloat = 1,
  kDouble = 2,
  kInt32 = 3,
  kInt64 = 9,
  kBool = 10,
  kBFloat16 = 14,
  kHalf = 19,
};

// Bytes per element: 4, 8, 4, 8, 1, 2, 2.
size_t tf_dtype_size(TfDType t);
// TensorFlow's names: "float32", "float64", "int32", "int64", "bool", "bfloat16", "float16".
const char* tf_dtype_name(TfDType t);
// The TfDType of a DataType enum value; Unimplemented "dtype <name or number> is not supported"
// for every other value.
Result<TfDType> tf_dtype_from_enum(int value);

// One dimension of a slice: [start, start + length); length -1 means the whole dimension.
struct TfExtent {
  int64_t start = 0;
  int64_t length = -1;
  bool operator==(const TfExtent& o) const { return start == o.start && length == o.length; }
};

// A tensor as a bundle stores it: dtype, fully defined shape, little-endian bytes
// (bytes.size() == num_elements * tf_dtype_size; bools are bytes 0 or 1).
struct TfTensor {
  TfDType dtype = TfDType::kFloat;
  Shape shape;
  std::string bytes;
};

// An actorflow host tensor of dtype float32, float64, int32, int64 or bool as a TfTensor;
// InvalidArgument for uint8 (TensorFlow's uint8 is not supported here) or an uninitialised tensor.
Result<TfTensor> tf_tensor_from(const Tensor& t);
// A TfTensor as an actorflow tensor: the same dtype for float32/float64/int32/int64/bool;
// float16 and bfloat16 are widened to float32 (exactly: every value of both is a float32).
// InvalidArgument when bytes.size() does not match the shape.
Result<Tensor> tf_tensor_to_tensor(const TfTensor& t);
// `t` (float32) rounded to float16 or bfloat16 (round to nearest even, as TensorFlow's casts).
// InvalidArgument for other dtypes.
Result<TfTensor> tf_tensor_narrow(const Tensor& t, TfDType to);

// What the index says about one tensor name (slice entries are folded into their tensor's).
struct TfEntryInfo {
  std::string name;
  TfDType dtype = TfDType::kFloat;
  Shape shape;                                // the full tensor's
  std::vector<std::vector<TfExtent>> slices;  // empty unless partitioned; one extent per dim
};

// The key under which TensorFlow stores the slice `extents` of tensor `name` (its ordered code:
// 0, name, rank, then start and length of each dimension). Pure.
std::string tf_slice_key(const std::string& name, const std::vector<TfExtent>& extents);
// Decodes a tf_slice_key(); InvalidArgument describing the first bad byte. Pure.
Status tf_parse_slice_key(const std::string& key, std::string* name, std::vector<TfExtent>* extents);

// An opened checkpoint: the index parsed and checked, the data files opened on demand.
class TfCheckpointReader {
 public:
  // Reads and checks "<prefix>.index" (at most 256 MiB, its prefix-compressed keys and values
  // expanding to at most 8 times that plus 64 MiB): its table structure and block CRCs, the
  // header (little-endian, num_shards in [1, 100000], a version this reader understands) and every
  // entry (a known dtype, a valid shape; slices inside the shape, each with its own entry).
  // NotFound when the index does not exist; DataLoss naming the file (and key) for anything
  // malformed; Unimplemented for big-endian bundles, compressed blocks or unsupported dtypes.
  static Result<TfCheckpointReader> open(const std::string& prefix);
  // The same from the bytes of an index (as open() does after reading "<prefix>.index", which
  // only names it in errors; data files are still "<prefix>.data-*"). Pure until read().
  static Result<TfCheckpointReader> from_index(const std::string& index, const std::string& prefix);

  // Every tensor in the bundle, sorted by name (slice keys folded into their tensor's entry).
  const std::vector<TfEntryInfo>& entries() const { return entries_; }
  // The number of data files.
  int num_shards() const { return num_shards_; }
  const std::string& prefix() const { return prefix_; }

  // Reads tensor `name` whole, assembling a partitioned tensor from its slices. NotFound when no
  // such name; DataLoss naming the data file and the entry when the data file is missing, shorter
  // than the entry says, the bytes fail their CRC, a bool byte is not 0/1, or the slices do not
  // tile the tensor exactly (overlap, gap, or a slice entry whose dtype or shape disagrees).
  // Allocates at most the tensor's size (itself bounded by the data files' sizes).
  Result<TfTensor> read(const std::string& name) const;

  struct RawEntry;  // a parsed BundleEntryProto (definition in the .cc)

 private:
  TfCheckpointReader() = default;
  Result<std::string> read_bytes(const RawEntry& e, const std::string& key) const;

  std::string prefix_;
  int num_shards_ = 0;
  std::vector<TfEntryInfo> entries_;
  std::map<std::string, std::shared_ptr<const RawEntry>> raw_;  // by table key
};

// One tensor (or one slice of a partitioned tensor) to write.
struct TfWriteItem {
  std::string name;
  TfTensor tensor;              // the whole tensor, or this slice's part (shape = slice's shape)
  int shard = 0;                // its data file, in [0, num_shards)
  Shape full_shape;             // partitioned only: the whole tensor's shape
  std::vector<TfExtent> slice;  // partitioned only: this part's extents (one per dim)
};

// Writes the bundle "<prefix>" with `num_shards` data files (each written even when empty, as
// TensorFlow does) and the index, each to a temporary name, fsynced and renamed into place (data
// files first, index last, so a reader never sees an index whose data is missing); the directory
// is fsynced. Items may come in any order; the slices of one name must share dtype and
// full_shape and tile it exactly. InvalidArgument naming the item for a bad shape, size, shard,
// duplicate name or slice; Unavailable (naming the file) for I/O errors, after removing the
// temporary files. The tensors' bytes are written straight from `items` (no copy is held; the
// index entries are). Data is written in name order per data file. Not synchronised: one writer
// per prefix.
Status write_tf_checkpoint(const std::string& prefix, const std::vector<TfWriteItem>& items, int num_shards = 1);

// TensorFlow's MergeV2Checkpoints, as a sharded tf.train.Saver runs it: the bundles `prefixes`
// (one per device, each written whole by SaveV2 with one data file) become the one bundle `dest`
// with one data file per input bundle, in their order ("<dest>.data-0000k-of-0000N"), written as
// write_tf_checkpoint writes (crash-safe). Then each input bundle's files are removed and, with
// `delete_old_dirs`, each input's directory when it is not dest's and is empty (as TensorFlow).
// A missing input is NotFound unless `allow_missing_files` (then skipped; none present at all is
// NotFound still). InvalidArgument for no prefixes, an entry two inputs hold, or dest among the
// inputs; the readers' errors (DataLoss naming the file) for damaged inputs; Unavailable for I/O.
// Reads the inputs' tensors into memory once (as the Saver's whole model). Not synchronised.
Status merge_tf_checkpoints(const std::vector<std::string>& prefixes, const std::string& dest, bool delete_old_dirs,
                            bool allow_missing_files);

// `<basename>-<shard, 5 digits>-of-<num_shards, 5 digits>`, as TensorFlow's ShardedFilename.
// InvalidArgument unless 0 <= shard < num_shards <= 99999. Pure.
Result<std::string> tf_sharded_filename(const std::string& basename, int64_t shard, int64_t num_shards);

// The text-format `checkpoint` file of a directory.
struct TfCheckpointState {
  std::string model_checkpoint_path;  // as written (relative or absolute)
  std::vector<std::string> all_model_checkpoint_paths;
};
// Reads "<dir>/checkpoint" (at most 1 MiB). NotFound when missing; DataLoss naming the file when
// it does not parse as a CheckpointState.
Result<TfCheckpointState> read_tf_checkpoint_state(const std::string& dir);
// The newest checkpoint's prefix: model_checkpoint_path, joined to `dir` when relative.
Result<std::string> latest_tf_checkpoint(const std::string& dir);
// Writes "<dir>/checkpoint" atomically (temporary file, fsync, rename, directory fsync).
Status write_tf_checkpoint_state(const std::string& dir, const TfCheckpointState& state);

}  // namespace actorflow
