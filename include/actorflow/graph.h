// Building graphs (the tf.Graph / tf.ops / ClientSession-free half of TensorFlow's C++ API):
//
//   #include <actorflow/graph.h>
//   af::Scope root = af::Scope::root();
//   af::Output x = af::ops::placeholder(root, af::DType::kFloat32, af::Shape{-1, 784}, "x");
//   af::Output y = af::ops::matmul(root.with_device("/job:worker/task:0"), x, w);
//
// Status and Result<T> (core/status.h), DType and Shape (tensor/types.h), Tensor
// (tensor/tensor.h), Graph, Node and Output (graph/graph.h), Scope (graph/scope.h), the ops
// (graph/ops.h, graph/ops_variables.h), tf.gradients (graph/gradients.h), device names
// (graph/device_spec.h), tf.train.replica_device_setter (graph/replica_device_setter.h) and
// TensorFlow's import_graph_def (graph/tf/tf_import.h: GraphDef .pb/.pbtxt files into a Scope) and
// export_graph_def (graph/tf/tf_export.h: a Graph as TensorFlow's GraphDef).
// Each declaration there documents what it returns, who owns what, and its thread-safety (graph
// construction is single-threaded; Tensor and Status are values). Brings no CAF header.
#pragma once

#include "core/status.h"
#include "graph/device_spec.h"
#include "graph/gradients.h"
#include "graph/graph.h"
#include "graph/ops.h"
#include "graph/ops_variables.h"
#include "graph/replica_device_setter.h"
#include "graph/scope.h"
#include "graph/tf/tf_export.h"
#include "graph/tf/tf_import.h"
#include "tensor/tensor.h"
#include "tensor/types.h"
