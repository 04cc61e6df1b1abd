// Readers for IDX files (the MNIST / Fashion-MNIST file format) and the MNIST directory layout.
//
// IDX: a 4-byte magic {0, 0, type, rank}, then `rank` big-endian uint32 dimensions, then the
// elements in row-major order, big-endian. Files may be gzip-compressed; compression is detected
// from the gzip magic bytes (1f 8b), not from the file name. Supported element types:
// 0x08 unsigned byte -> uint8, 0x0C int -> int32, 0x0D float -> float32, 0x0E double -> float64;
// 0x09 (signed byte) and 0x0B (short) have no actorflow dtype and are rejected.
//
// All functions are pure (no shared state) and thread-safe; they return freshly allocated host
// tensors that the caller owns.
#pragma once

#include <string>

#include "core/status.h"
#include "tensor/tensor.h"

namespace actorflow {

// Reads the IDX file at `path` (plain or gzip) into a host tensor whose shape is the header's
// dimensions and whose dtype follows the header's type code (uint8 for MNIST images [N,28,28] and
// labels [N]). Errors name the file: NotFound (missing), InvalidArgument (bad magic, unsupported
// type, absurd dimensions), DataLoss (truncated or corrupt data, trailing bytes).
Result<Tensor> read_idx(const std::string& path);

// Writes `t` (host, dtype uint8/int32/float32/float64, rank 1..255) as an IDX file, gzip-compressed
// when `gzip`. Used by tests and tools to make small data sets. Errors name the file.
Status write_idx(const std::string& path, const Tensor& t, bool gzip);

// One MNIST-format data set in training form.
struct MnistData {
  Tensor train_images;  // float32 [N_train, H*W], pixel / 255 in [0, 1]
  Tensor train_labels;  // int32 [N_train]
  Tensor test_images;   // float32 [N_test, H*W]
  Tensor test_labels;   // int32 [N_test]
};

// Loads train-images-idx3-ubyte, train-labels-idx1-ubyte, t10k-images-idx3-ubyte and
// t10k-labels-idx1-ubyte from `dir`, each either plain or with a ".gz" suffix (Debian's
// dataset-fashion-mnist installs them gzipped in /usr/share/datasets/fashion-mnist).
// Images must be uint8 rank 3 [N,H,W]; labels uint8 rank 1 [N] with the same N.
// Errors name the file and what is wrong (missing, bad magic, truncated, wrong rank or type,
// count mismatch between images and labels).
Result<MnistData> load_mnist(const std::string& dir);

// Converts uint8 images [N, d1, d2, ...] to float32 [N, d1*d2*...] scaled by 1/255 (exactly
// float(x) / 255.f, as NumPy's astype('float32') / 255). InvalidArgument for other dtypes or rank 0.
Result<Tensor> images_to_float(const Tensor& images_u8);

// Keras' to_categorical (the seed's tf.keras.utils.to_categorical): integer labels (uint8, int32
// or int64) of shape [N] as float32 one-hot rows [N, num_classes], a host tensor (ops::one_hot is
// the graph op). InvalidArgument (naming the index and value) if a label is outside
// [0, num_classes). Pure.
Result<Tensor> to_categorical(const Tensor& labels, int num_classes);
[[deprecated("named to_categorical now (ops::one_hot is the graph op)")]] inline Result<Tensor> one_hot(
    const Tensor& labels, int depth) {
  return to_categorical(labels, depth);
}

}  // namespace actorflow
