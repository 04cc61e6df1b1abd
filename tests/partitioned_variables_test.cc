// Partitioned variables: partitioners, shards laid out and placed as
// TensorFlow does, embedding_lookup over shards with the "mod" and "div" strategies (each id sent
// only to its shard), sparse gradients that reach only their shard, and saving/restoring the
// shards as one logical variable — values computed by hand.
#include <gtest/gtest.h>

#include <numeric>

#include "actorflow/actorflow.h"
#include "data/checkpoint.h"
#include "graph/ops.h"
#include "graph/ops_variables.h"
#include "graph/replica_device_setter.h"
#include "tests/util/eval.h"
#include "tests/util/local_server.h"
#include "tests/util/process.h"

namespace actorflow {
namespace {

namespace train = actorflow::train;
using testing::eval;
using testing::vals;

bool has(const Status& s, const std::string& what) { return s.message().find(what) != std::string::npos; }

std::unique_ptr<Server> three_device_server() {
  LocalServerOptions o;
  o.cpu_devices = 3;
  return std::move(*Server::local(o));
}

// Row r of the logical table is (10 r, 10 r + 1): shard i is initialised with the rows it owns
// in the div layout (consecutive rows from its offset), which is also what a checkpoint holds.
train::Initializer rows_from(int64_t offset) {
  return [offset](const Scope& s, const Shape& shape, DType) {
    std::vector<float> v;
    for (int64_t r = 0; r < shape.dim(0); ++r) {
      v.push_back(static_cast<float>(10 * (offset + r)));
      v.push_back(static_cast<float>(10 * (offset + r) + 1));
    }
    return ops::constant(s, Tensor::from_vector<float>(v, {shape.dim(0), 2}));
  };
}

TEST(PartitionedVariableTest, PartitionersAndTheShardLayoutFollowTensorFlow) {
  Scope root = Scope::root();
  auto v = train::get_partitioned_variable(root, "emb", Shape{10, 3}, train::fixed_size_partitioner(3));
  ASSERT_TRUE(v.ok()) << v.status();
  EXPECT_EQ(v->name, "emb");
  EXPECT_EQ(v->shape, (Shape{10, 3}));
  ASSERT_EQ(v->shards.size(), 3u);
  // 10 rows over 3: the first 10 % 3 = 1 shard takes one more.
  EXPECT_EQ(v->shards[0].shape(), (Shape{4, 3}));
  EXPECT_EQ(v->shards[1].shape(), (Shape{3, 3}));
  EXPECT_EQ(v->shards[2].shape(), (Shape{3, 3}));
  EXPECT_EQ(v->offsets, (std::vector<int64_t>{0, 4, 7}));
  EXPECT_EQ(v->shards[2].node()->name, "emb/part_2");
  ops::PartitionRecord rec;
  ASSERT_TRUE(ops::partition_record(*v->shards[2].node(), &rec));
  EXPECT_EQ(rec.logical, "emb");
  EXPECT_EQ(rec.full_shape, (Shape{10, 3}));
  EXPECT_EQ(rec.offset, 7);
  // The shards are ordinary trainable variables with initializers.
  EXPECT_EQ(train::trainable_variables(root).size(), 3u);
  auto init = train::global_variables_initializer(root);
  ASSERT_TRUE(init.ok()) << init.status();

  // min_max: 1000 x 64 float32 = 256000 bytes; slices of at least 64 KiB: 3 shards; at most 2.
  auto three = train::min_max_variable_partitioner(8, 64 << 10)(Shape{1000, 64}, DType::kFloat32);
  auto two = train::min_max_variable_partitioner(2, 64 << 10)(Shape{1000, 64}, DType::kFloat32);
  auto one = train::min_max_variable_partitioner(8)(Shape{1000, 64}, DType::kFloat32);  // 256 KiB default
  ASSERT_TRUE(three.ok() && two.ok() && one.ok());
  EXPECT_EQ(*three, 3);
  EXPECT_EQ(*two, 2);
  EXPECT_EQ(*one, 1);
  // fixed_size never asks for more shards than rows.
  EXPECT_EQ(*train::fixed_size_partitioner(5)(Shape{2, 4}, DType::kFloat32), 2);
}

TEST(PartitionedVariableTest, BadArgumentsAreClearErrors) {
  Scope root = Scope::root();
  auto zero = train::get_partitioned_variable(root, "a", Shape{4, 2}, train::fixed_size_partitioner(0));
  ASSERT_FALSE(zero.ok());
  EXPECT_TRUE(has(zero.status(), "get_partitioned_variable('a'): fixed_size_partitioner: num_shards must be >= 1"))
      << zero.status();
  auto scalar = train::get_partitioned_variable(root, "b", Shape{}, train::fixed_size_partitioner(2));
  ASSERT_FALSE(scalar.ok());
  EXPECT_TRUE(has(scalar.status(), "needs a known shape with at least one row")) << scalar.status();
  auto unknown = train::get_partitioned_variable(root, "c", Shape{-1, 2}, train::fixed_size_partitioner(2));
  EXPECT_FALSE(unknown.ok());
  auto wild = train::get_partitioned_variable(root, "d", Shape{4, 2},
                                              [](const Shape&, DType) -> Result<int64_t> { return 9; });
  ASSERT_FALSE(wild.ok());
  EXPECT_TRUE(has(wild.status(), "the partitioner asked for 9 shards of 4 rows")) << wild.status();
  ASSERT_TRUE(train::get_partitioned_variable(root, "e", Shape{4, 2}, train::fixed_size_partitioner(2)).ok());
  auto again = train::get_partitioned_variable(root, "e", Shape{4, 2}, train::fixed_size_partitioner(2));
  ASSERT_FALSE(again.ok());
  EXPECT_EQ(again.status().code(), Code::kAlreadyExists) << again.status();
  // A lookup over shards of another layout, or with a bad strategy, is refused when built.
  {
    Scope s = Scope::root();
    auto a = train::get_variable(s, "x0", Shape{2, 2});
    auto b = train::get_variable(s, "x1", Shape{5, 2});
    ops::embedding_lookup(s, std::vector<Output>{a, b}, ops::constant(s, Tensor::from_vector<int64_t>({0}, {1})));
    ASSERT_FALSE(s.ok());
    EXPECT_TRUE(has(s.status(), "shard 0 has 2 rows; 7 rows over 2 shards need 4 there")) << s.status();
  }
  {
    Scope s = Scope::root();
    auto v = train::get_partitioned_variable(s, "t", Shape{4, 2}, train::fixed_size_partitioner(2));
    ASSERT_TRUE(v.ok());
    train::embedding_lookup(s, *v, ops::constant(s, Tensor::from_vector<int64_t>({0}, {1})), "hash");
    ASSERT_FALSE(s.ok());
    EXPECT_TRUE(has(s.status(), "partition strategy must be \"mod\" or \"div\", got \"hash\"")) << s.status();
  }
}

TEST(PartitionedVariableTest, PartitionIdsFollowsTensorFlowsArithmetic) {
  // 10 rows over 3 shards (4, 3, 3 rows).
  Scope root = Scope::root();
  auto ids = ops::constant(root, Tensor::from_vector<int64_t>({0, 3, 4, 7, 9, 6}, {6}));
  auto mod = ops::partition_ids(root, ids, 3, 10, "mod");
  auto div = ops::partition_ids(root, ids, 3, 10, "div");
  ASSERT_EQ(mod.size(), 3u);
  auto r = testing::eval_all(root, {mod[0], mod[1], mod[2], div[0], div[1]});
  ASSERT_TRUE(r.ok()) << r.status();
  // mod: shard id % 3, row id / 3.
  EXPECT_EQ(vals<int32_t>((*r)[0]), (std::vector<int32_t>{0, 0, 1, 1, 0, 0}));
  EXPECT_EQ(vals<int64_t>((*r)[1]), (std::vector<int64_t>{0, 1, 1, 2, 3, 2}));
  EXPECT_EQ(vals<int32_t>((*r)[2]), (std::vector<int32_t>{0, 1, 2, 3, 4, 5}));
  // div: shard 0 rows 0-3, shard 1 rows 4-6, shard 2 rows 7-9.
  EXPECT_EQ(vals<int32_t>((*r)[3]), (std::vector<int32_t>{0, 0, 1, 2, 2, 1}));
  EXPECT_EQ(vals<int64_t>((*r)[4]), (std::vector<int64_t>{0, 3, 0, 0, 2, 2}));
  // An id outside the table fails the step naming the op.
  Scope bad = Scope::root();
  auto p = ops::partition_ids(bad.with_op_name("route"), ops::constant(bad, Tensor::from_vector<int32_t>({1, 10}, {2})),
                              3, 10, "div");
  auto e = eval(bad, p[0]);
  ASSERT_FALSE(e.ok());
  EXPECT_TRUE(has(e.status(), "route")) << e.status();
  EXPECT_TRUE(has(e.status(), "ids[1] = 10 is not in [0, 10)")) << e.status();
}

TEST(PartitionedVariableTest, DynamicPartitionAndStitchAreInverse) {
  Scope root = Scope::root();
  auto data = ops::constant(root, Tensor::from_vector<float>({0, 1, 10, 11, 20, 21, 30, 31, 40, 41}, {5, 2}));
  auto part = ops::constant(root, Tensor::from_vector<int32_t>({1, 0, 1, 2, 0}, {5}));
  auto pos = ops::constant(root, Tensor::from_vector<int32_t>({0, 1, 2, 3, 4}, {5}));
  auto parts = ops::dynamic_partition(root, data, part, 3);
  auto where = ops::dynamic_partition(root, pos, part, 3);
  auto back = ops::dynamic_stitch(root, where, parts);
  auto r = testing::eval_all(root, {parts[0], parts[1], parts[2], back});
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(vals<float>((*r)[0]), (std::vector<float>{10, 11, 40, 41}));
  EXPECT_EQ(vals<float>((*r)[1]), (std::vector<float>{0, 1, 20, 21}));
  EXPECT_EQ(vals<float>((*r)[2]), (std::vector<float>{30, 31}));
  EXPECT_EQ((*r)[3].shape(), (Shape{5, 2}));
  EXPECT_EQ(vals<float>((*r)[3]), (std::vector<float>{0, 1, 10, 11, 20, 21, 30, 31, 40, 41}));
  // An empty partition is a [0, 2] tensor; a partition id out of range is an error.
  Scope s2 = Scope::root();
  auto empty = ops::dynamic_partition(s2, ops::constant(s2, Tensor::from_vector<float>({1, 2}, {1, 2})),
                                      ops::constant(s2, Tensor::from_vector<int32_t>({0}, {1})), 2);
  auto e = eval(s2, empty[1]);
  ASSERT_TRUE(e.ok()) << e.status();
  EXPECT_EQ(e->shape(), (Shape{0, 2}));
  Scope s3 = Scope::root();
  auto out = ops::dynamic_partition(s3.with_op_name("split_ids"), ops::constant(s3, Tensor::from_vector<float>({1, 2}, {2})),
                                    ops::constant(s3, Tensor::from_vector<int32_t>({0, 2}, {2})), 2);
  auto bad = eval(s3, out[0]);
  ASSERT_FALSE(bad.ok());
  EXPECT_TRUE(has(bad.status(), "split_ids")) << bad.status();
  EXPECT_TRUE(has(bad.status(), "partitions[1] = 2 is not in [0, 2)")) << bad.status();
}

// A 7 x 2 table in 3 shards on /cpu:1, /cpu:2, /cpu:1 (a ReplicaDeviceSetter over two "ps"
// devices), looked up on /cpu:0 with fed ids; loss = sum(weights * rows).
struct ShardedModel {
  std::unique_ptr<Server> server = three_device_server();
  Scope root = Scope::root();
  train::PartitionedVariable table;
  Output ids, weights, rows, loss;
  explicit ShardedModel(const std::string& strategy) {
    Scope worker = root.with_device("/cpu:0");
    int next = 0;
    auto placement = [&](const Scope& s, const Shape&, DType) {
      return s.with_device(next++ % 2 == 0 ? "/cpu:1" : "/cpu:2");
    };
    // Each shard's initial rows: what the logical table's rows are under the strategy.
    auto v = train::get_partitioned_variable(root, "table", Shape{7, 2}, train::fixed_size_partitioner(3),
                                             DType::kFloat32, {}, true, placement);
    EXPECT_TRUE(v.ok()) << v.status();
    table = *v;
    for (size_t i = 0; i < table.shards.size(); ++i) {
      // Logical row of shard i's row k: mod: k * 3 + i; div: offset + k.
      std::vector<float> init;
      for (int64_t k = 0; k < table.shards[i].shape().dim(0); ++k) {
        const int64_t row = strategy == "mod" ? k * 3 + static_cast<int64_t>(i) : table.offsets[i] + k;
        init.push_back(static_cast<float>(10 * row));
        init.push_back(static_cast<float>(10 * row + 1));
      }
      train::set_initial_value(root.with_device(table.shards[i].node()->requested_device), table.shards[i],
                               ops::constant(root.with_device(table.shards[i].node()->requested_device),
                                             Tensor::from_vector<float>(init, {table.shards[i].shape().dim(0), 2})));
    }
    ids = ops::placeholder(worker, DType::kInt64, Shape{-1, 2}, "ids");
    weights = ops::placeholder(worker, DType::kFloat32, Shape{-1, 2, 2}, "weights");
    rows = train::embedding_lookup(worker, table, ids, strategy);
    loss = ops::reduce_sum(worker, ops::mul(worker, weights, rows));
  }
  // Logical row r as the strategy maps it into the shards.
  std::vector<float> logical(Session& sess, const std::string& strategy) {
    auto r = sess.run(table.shards);
    EXPECT_TRUE(r.ok()) << r.status();
    std::vector<float> out(14);
    if (!r.ok()) return out;
    for (size_t i = 0; i < 3; ++i) {
      auto v = vals<float>((*r)[i]);
      for (size_t k = 0; k < v.size() / 2; ++k) {
        const size_t row = strategy == "mod" ? k * 3 + i : static_cast<size_t>(table.offsets[i]) + k;
        out[2 * row] = v[2 * k];
        out[2 * row + 1] = v[2 * k + 1];
      }
    }
    return out;
  }
};

TEST(PartitionedVariableTest, LookupOverShardsGivesTheRowsOfEachIdInPlace) {
  for (std::string strategy : {"mod", "div"}) {
    SCOPED_TRACE(strategy);
    ShardedModel m(strategy);
    ASSERT_TRUE(m.root.ok()) << m.root.status();
    EXPECT_EQ(m.rows.shape(), (Shape{-1, 2, 2}));
    auto init = train::global_variables_initializer(m.root);
    ASSERT_TRUE(init.ok()) << init.status();
    Session sess(m.root, m.server->target());
    ASSERT_TRUE(sess.run({}, {}, {*init}).ok());
    auto r = sess.run({{m.ids, Tensor::from_vector<int64_t>({6, 0, 3, 3, 5, 1}, {3, 2})}}, {m.rows});
    ASSERT_TRUE(r.ok()) << r.status();
    EXPECT_EQ((*r)[0].shape(), (Shape{3, 2, 2}));
    EXPECT_EQ(vals<float>((*r)[0]),
              (std::vector<float>{60, 61, 0, 1, 30, 31, 30, 31, 50, 51, 10, 11}));
    // Each shard's gather runs with its shard.
    const Graph& g = *m.root.graph();
    int gathers = 0;
    for (int i = 0; i < g.num_nodes(); ++i)
      if (g.node(i)->op == "Gather") {
        ++gathers;
        EXPECT_FALSE(g.node(i)->colocate_with.empty()) << g.node(i)->name;
      }
    EXPECT_EQ(gathers, 3);
    auto bad = sess.run({{m.ids, Tensor::from_vector<int64_t>({0, 7}, {1, 2})}}, {m.rows});
    ASSERT_FALSE(bad.ok());
    EXPECT_TRUE(has(bad.status(), "ids[1] = 7 is not in [0, 7)")) << bad.status();
  }
}

TEST(PartitionedVariableTest, SparseGradientsReachOnlyTheirShardAndUpdateOnlyTheRowsLookedUp) {
  for (std::string strategy : {"mod", "div"}) {
    SCOPED_TRACE(strategy);
    ShardedModel m(strategy);
    train::GradientDescentOptimizer sgd(0.5f);
    auto gv = sgd.compute_gradients(m.root, m.loss, m.table.shards);
    ASSERT_TRUE(gv.ok()) << gv.status();
    ASSERT_EQ(gv->size(), 3u);
    for (const auto& [g, v] : *gv) EXPECT_TRUE(ops::is_indexed_slices(g)) << v.name() << ": " << g.node()->op;
    auto update = sgd.apply_gradients(m.root, *gv);
    auto init = train::global_variables_initializer(m.root);
    ASSERT_TRUE(update.ok() && init.ok()) << update.status() << init.status();
    int sparse = 0, dense = 0;
    const Graph& g = *m.root.graph();
    for (int i = 0; i < g.num_nodes(); ++i) {
      sparse += g.node(i)->op == "SparseApplyGradientDescent";
      dense += g.node(i)->op == "ApplyGradientDescent";
    }
    EXPECT_EQ(sparse, 3);
    EXPECT_EQ(dense, 0);
    Session sess(m.root, m.server->target());
    ASSERT_TRUE(sess.run({}, {}, {*init}).ok());
    std::vector<float> before = m.logical(sess, strategy);
    // ids 6, 0 | 3, 3: row 6 gets weight (1, 2), row 0 (3, 4), row 3 (5, 6) + (7, 8) = (12, 14).
    auto r = sess.run({{m.ids, Tensor::from_vector<int64_t>({6, 0, 3, 3}, {2, 2})},
                       {m.weights, Tensor::from_vector<float>({1, 2, 3, 4, 5, 6, 7, 8}, {2, 2, 2})}},
                      {}, {*update});
    ASSERT_TRUE(r.ok()) << r.status();
    std::vector<float> want = before;
    auto step = [&](int row, float a, float b) {
      want[2 * row] -= 0.5f * a;
      want[2 * row + 1] -= 0.5f * b;
    };
    step(6, 1, 2);
    step(0, 3, 4);
    step(3, 12, 14);
    EXPECT_EQ(m.logical(sess, strategy), want);
  }
}

TEST(PartitionedVariableTest, ReplicaDeviceSetterSpreadsShardsOverThePsTasks) {
  Scope root = Scope::root();
  ReplicaDeviceSetter setter(2, "/job:worker/task:0");
  auto v = train::get_partitioned_variable(root, "emb", Shape{9, 4}, train::fixed_size_partitioner(3), DType::kFloat32,
                                           {}, true, setter.shard_placement());
  ASSERT_TRUE(v.ok()) << v.status();
  EXPECT_EQ(v->shards[0].node()->requested_device, "/job:ps/task:0");
  EXPECT_EQ(v->shards[1].node()->requested_device, "/job:ps/task:1");
  EXPECT_EQ(v->shards[2].node()->requested_device, "/job:ps/task:0");
  EXPECT_EQ(setter.bytes_per_task(), (std::vector<int64_t>{2 * 3 * 4 * 4, 3 * 4 * 4}));
}

TEST(PartitionedVariableTest, ASaverWritesTheShardsAsOneVariableAndRestoresIntoAnotherPartitioning) {
  testing::TempDir dir;
  auto server = testing::two_device_server();
  std::string path;
  {
    Scope root = Scope::root();
    auto v = train::get_partitioned_variable(root.with_device("/cpu:1"), "emb", Shape{5, 2},
                                             train::fixed_size_partitioner(2), DType::kFloat32, {}, true);
    ASSERT_TRUE(v.ok()) << v.status();
    for (size_t i = 0; i < v->shards.size(); ++i)
      train::set_initial_value(root.with_device("/cpu:1"), v->shards[i],
                               rows_from(v->offsets[i])(root.with_device("/cpu:1"), v->shards[i].shape(), DType::kFloat32));
    auto init = train::global_variables_initializer(root);
    ASSERT_TRUE(init.ok());
    train::Saver saver(root);
    Session sess(root, server->target());
    ASSERT_TRUE(sess.run({}, {}, {*init}).ok());
    auto p = saver.save(sess, dir.path() + "/model.ckpt", 7);
    ASSERT_TRUE(p.ok()) << p.status();
    path = *p;
  }
  // The file holds one tensor "emb" [5, 2], rows in order; no shard names.
  auto data = read_checkpoint(path);
  ASSERT_TRUE(data.ok()) << data.status();
  ASSERT_EQ(data->variables.count("emb"), 1u);
  EXPECT_EQ(data->variables.count("emb/part_0"), 0u);
  EXPECT_EQ(data->variables.at("emb").shape(), (Shape{5, 2}));
  EXPECT_EQ(vals<float>(data->variables.at("emb")), (std::vector<float>{0, 1, 10, 11, 20, 21, 30, 31, 40, 41}));
  {  // Restored into three shards (in a fresh server: a server keeps its variables by name):
     // each gets its rows.
    auto fresh = testing::two_device_server();
    Scope root = Scope::root();
    auto v = train::get_partitioned_variable(root, "emb", Shape{5, 2}, train::fixed_size_partitioner(3));
    ASSERT_TRUE(v.ok());
    train::Saver saver(root);
    Session sess(root, fresh->target());
    Status restored = saver.restore(sess, path);
    ASSERT_TRUE(restored.ok()) << restored;
    auto r = sess.run(v->shards);
    ASSERT_TRUE(r.ok()) << r.status();
    EXPECT_EQ(vals<float>((*r)[0]), (std::vector<float>{0, 1, 10, 11}));
    EXPECT_EQ(vals<float>((*r)[1]), (std::vector<float>{20, 21, 30, 31}));
    EXPECT_EQ(vals<float>((*r)[2]), (std::vector<float>{40, 41}));
  }
  {  // A checkpoint of another logical shape is refused, naming the variable.
    auto fresh = testing::two_device_server();
    Scope other = Scope::root();
    auto w = train::get_partitioned_variable(other, "emb", Shape{6, 2}, train::fixed_size_partitioner(2));
    ASSERT_TRUE(w.ok());
    train::Saver s2(other);
    Session sess2(other, fresh->target());
    Status st = s2.restore(sess2, path);
    ASSERT_FALSE(st.ok());
    EXPECT_TRUE(has(st, "partitioned variable 'emb' has shape [6,2] but checkpoint")) << st;
  }
}

}  // namespace
}  // namespace actorflow
