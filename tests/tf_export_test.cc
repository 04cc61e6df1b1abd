// export_graph_def against TensorFlow itself: actorflow graphs (an MLP with variables and its init
// op; the seed CNN frozen with the values actorflow initialised) are exported, imported by
// TensorFlow 2.21's tf.compat.v1.import_graph_def and run there (tests/data/tf_graph/
// tf_run_export.py with .venv-tf; skipped where the venv is absent): TensorFlow's outputs equal
// actorflow's within 1e-5. Without TensorFlow: the export imported back by actorflow's own
// import_graph_def gives the same outputs, and what is refused names the node and op. TensorBoard's
// own event reader (tb_read_graph.py) finds the graph a Supervisor wrote into its event file.
#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <functional>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>

#include "actorflow/actorflow.h"
#include "actorflow/graph.h"
#include "actorflow/monitored_session.h"
#include "actorflow/session.h"
#include "actorflow/train.h"
#include "graph/ops_nn_grad.h"
#include "models/mnist_cnn.h"
#include "tests/util/eval.h"
#include "tests/util/process.h"

namespace actorflow {
namespace {

using testing::TempDir;

std::string slurp(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  std::stringstream s;
  s << f.rdbuf();
  return s.str();
}

using testing::tf_python;  // "" without the venv: the tests that need TensorFlow skip then

nlohmann::json tensor_json(const Tensor& t) {
  nlohmann::json j;
  j["dtype"] = dtype_name(t.dtype());
  j["shape"] = t.shape().dims();
  std::vector<double> v;
  for (int64_t i = 0; i < t.num_elements(); ++i)
    v.push_back(t.dtype() == DType::kInt32 ? t.data<int32_t>()[i] : t.data<float>()[i]);
  j["values"] = v;
  return j;
}

// Runs `script` with the venv's python on `args`; its stdout parsed as JSON.
Result<nlohmann::json> run_python(const TempDir& dir, const std::string& script, const std::string& args) {
  const std::string out = dir.file("py.json"), err = dir.file("py.err");
  const std::string cmd = tf_python() + " " + AF_SOURCE_DIR + "/tests/data/tf_graph/" + script + " " + args + " > " +
                          out + " 2> " + err;
  if (std::system(cmd.c_str()) != 0) return Internal(script + " failed: " + slurp(err));
  return nlohmann::json::parse(slurp(out));
}

void expect_near(const Tensor& got, const nlohmann::json& want, const std::string& what) {
  ASSERT_EQ(got.dtype(), DType::kFloat32) << what;
  ASSERT_EQ(got.shape().dims(), want["shape"].get<std::vector<int64_t>>()) << what;
  const auto v = want["values"].get<std::vector<double>>();
  ASSERT_EQ(static_cast<int64_t>(v.size()), got.num_elements()) << what;
  for (size_t i = 0; i < v.size(); ++i) ASSERT_NEAR(got.data<float>()[i], v[i], 1e-5) << what << " element " << i;
}

void expect_same(const Tensor& got, const Tensor& want, const std::string& what) {
  ASSERT_EQ(got.dtype(), want.dtype()) << what;
  ASSERT_EQ(got.shape(), want.shape()) << what;
  for (int64_t i = 0; i < want.num_elements(); ++i)
    ASSERT_NEAR(got.data<float>()[i], want.data<float>()[i], 1e-5) << what << " element " << i;
}

// x [2,6] -> relu(x w1 + b1) [5] -> logits [3] -> probs, and the mean softmax cross-entropy;
// reference variables initialised by Assigns of constants under the NoOp "init".
struct Mlp {
  Scope root = Scope::root();
  Output x, labels, logits, probs, loss, init;
  Mlp() {
    x = ops::placeholder(root, DType::kFloat32, Shape{-1, 6}, "x");
    labels = ops::placeholder(root, DType::kFloat32, Shape{-1, 3}, "labels");
    std::vector<Output> assigns;
    uint32_t seed = 10;
    auto var = [&](const std::string& name, const Shape& s) {
      Output v = ops::variable(root.with_op_name(name), s, DType::kFloat32);
      assigns.push_back(ops::assign(root.with_op_name(name + "/Assign"), v,
                                    ops::constant(root.with_op_name(name + "/initial_value"),
                                                  testing::random_tensor(s, ++seed))));
      return v;
    };
    Output w1 = var("w1", Shape{6, 5}), b1 = var("b1", Shape{5});
    Output w2 = var("w2", Shape{5, 3}), b2 = var("b2", Shape{3});
    Output h = ops::relu(root.with_op_name("hidden"), ops::bias_add(root, ops::matmul(root, x, w1), b1));
    logits = ops::bias_add(root.with_op_name("logits"), ops::matmul(root, h, w2), b2);
    probs = ops::softmax(root.with_op_name("probs"), logits);
    auto xent = ops::softmax_cross_entropy_with_logits(root.with_op_name("xent"), logits, labels);
    loss = ops::reduce_mean(root.with_op_name("loss"), xent[0]);
    init = ops::no_op(root, assigns, "init");
  }
  std::vector<std::pair<std::string, Tensor>> feeds() const {
    Tensor y(DType::kFloat32, Shape{2, 3});
    y.data<float>()[1] = 1.f;
    y.data<float>()[3] = 1.f;
    return {{"x", testing::random_tensor(Shape{2, 6}, 7)}, {"labels", y}};
  }
};

// The seed CNN (models/mnist_cnn.h) with 4 and 8 channels and fc 16, no parameter servers.
struct Cnn {
  Scope root = Scope::root();
  CnnModel m;
  Status status;
  Cnn() {
    CnnOptions o;
    o.num_ps = 0;
    o.conv1_channels = 4;
    o.conv2_channels = 8;
    o.hidden = 16;
    auto r = build_mnist_cnn(root, o);
    status = r.status();
    if (r.ok()) m = *r;
  }
  std::vector<std::pair<std::string, Tensor>> feeds() const {
    Tensor y(DType::kFloat32, Shape{3, 10});
    for (int i = 0; i < 3; ++i) y.data<float>()[i * 10 + (3 * i) % 10] = 1.f;
    return {{m.x.name(), testing::random_tensor(Shape{3, 784}, 5, 0.f, 1.f)}, {m.labels.name(), y}};
  }
  std::vector<std::string> fetches() const { return {m.logits.name(), m.loss.name(), m.accuracy.name()}; }
};

nlohmann::json spec_of(const std::vector<std::pair<std::string, Tensor>>& feeds,
                       const std::vector<std::string>& fetches, const std::string& init) {
  nlohmann::json spec;
  spec["init"] = init;
  spec["fetches"] = fetches;
  for (const auto& [name, t] : feeds) spec["feeds"][name] = tensor_json(t);
  return spec;
}

// actorflow's values of `fetches` (after running `init` when not empty).
Result<std::vector<Tensor>> run_actorflow(const Scope& root, const std::vector<std::pair<std::string, Tensor>>& feeds,
                                          const std::vector<std::string>& fetches, const std::string& init) {
  Session sess(root);
  AF_RETURN_IF_ERROR(sess.status());
  if (!init.empty()) AF_RETURN_IF_ERROR(sess.run_by_name({}, {}, {init}).status());
  return sess.run_by_name(feeds, fetches);
}

// The seed CNN's forward graph frozen at the values actorflow's initialisers gave its variables.
Result<std::string> frozen_cnn(const Cnn& c, const std::vector<std::string>& fetches, std::vector<Tensor>* values,
                               GraphDefFormat format = GraphDefFormat::kBinary) {
  AF_RETURN_IF_ERROR(c.status);
  Session sess(c.root);
  AF_RETURN_IF_ERROR(sess.run({}, {}, {c.m.init_op}).status());
  const std::vector<Output> vars = train::trainable_variables(c.root);
  AF_ASSIGN_OR_RETURN(std::vector<Tensor> vals, sess.run(vars));
  ExportGraphDefOptions o;
  o.format = format;
  o.outputs = fetches;
  for (size_t i = 0; i < vars.size(); ++i) o.frozen[vars[i].node()->name] = vals[i];
  AF_ASSIGN_OR_RETURN(*values, sess.run_by_name(c.feeds(), fetches));
  return export_graph_def(*c.root.graph(), o);
}

TEST(TfExportTest, TensorFlowRunsTheExportedMlpWithActorflowsOutputs) {
  if (tf_python().empty()) GTEST_SKIP() << "no .venv-tf/bin/python (bench/tf_venv.sh makes it)";
  Mlp m;
  ASSERT_TRUE(m.root.ok()) << m.root.status();
  const std::vector<std::string> fetches = {"logits", "probs", "loss"};
  auto want = run_actorflow(m.root, m.feeds(), fetches, "init");
  ASSERT_TRUE(want.ok()) << want.status();
  TempDir dir;
  const std::string spec = dir.write("spec.json", spec_of(m.feeds(), fetches, "init").dump());
  for (GraphDefFormat f : {GraphDefFormat::kBinary, GraphDefFormat::kText}) {
    ExportGraphDefOptions o;
    o.format = f;
    auto gd = export_graph_def(*m.root.graph(), o);
    ASSERT_TRUE(gd.ok()) << gd.status();
    const std::string file = dir.write(f == GraphDefFormat::kText ? "mlp.pbtxt" : "mlp.pb", *gd);
    auto tf = run_python(dir, "tf_run_export.py", file + " " + spec);
    ASSERT_TRUE(tf.ok()) << tf.status();
    EXPECT_EQ((*tf)["ops"]["w1"], "VariableV2");
    EXPECT_EQ((*tf)["ops"]["w1/Assign"], "Assign");
    EXPECT_EQ((*tf)["ops"]["loss/reduction_indices"], "Const");
    for (size_t i = 0; i < fetches.size(); ++i) expect_near((*want)[i], (*tf)["fetches"][fetches[i]], fetches[i]);
  }
}

TEST(TfExportTest, TensorFlowRunsTheFrozenSeedCnnWithActorflowsOutputs) {
  if (tf_python().empty()) GTEST_SKIP() << "no .venv-tf/bin/python (bench/tf_venv.sh makes it)";
  Cnn c;
  ASSERT_TRUE(c.status.ok()) << c.status;
  std::vector<Tensor> want;
  auto gd = frozen_cnn(c, c.fetches(), &want);
  ASSERT_TRUE(gd.ok()) << gd.status();
  TempDir dir;
  const std::string file = dir.write("cnn.pb", *gd);
  const std::string spec = dir.write("spec.json", spec_of(c.feeds(), c.fetches(), "").dump());
  auto tf = run_python(dir, "tf_run_export.py", file + " " + spec);
  ASSERT_TRUE(tf.ok()) << tf.status();
  for (const std::string op : {"Conv2D", "MaxPool", "Reshape", "BiasAdd", "Relu", "MatMul",
                               "SoftmaxCrossEntropyWithLogits", "Mean", "ArgMax", "Equal", "Cast"}) {
    bool seen = false;
    for (const auto& [name, o] : (*tf)["ops"].items()) seen |= o == op;
    EXPECT_TRUE(seen) << op;
  }
  EXPECT_EQ((*tf)["ops"]["conv1/weights"], "Const");  // frozen
  const auto fetches = c.fetches();
  for (size_t i = 0; i < fetches.size(); ++i) expect_near(want[i], (*tf)["fetches"][fetches[i]], fetches[i]);
}

// Every other op the exporter maps, each once, run by TensorFlow: integer and bool results cast
// to float32 so that every fetch compares the same way.
TEST(TfExportTest, TensorFlowRunsEveryExportedOpAsActorflowDoes) {
  if (tf_python().empty()) GTEST_SKIP() << "no .venv-tf/bin/python (bench/tf_venv.sh makes it)";
  Scope root = Scope::root();
  const DType f32 = DType::kFloat32;
  Output x = ops::placeholder(root, f32, Shape{2, 3}, "x");
  std::map<std::string, Output> outs;
  auto out = [&](const std::string& name, Output o) { outs[name] = o; };
  auto as_float = [&](const std::string& name, Output o) { out(name, ops::cast(root.with_op_name(name), o, f32)); };
  out("sub", ops::sub(root.with_op_name("sub"), x, ops::constant(root, {0.25f, 0.5f, 0.75f}, Shape{3})));
  out("mul", ops::mul(root.with_op_name("mul"), x, x));
  out("div", ops::div(root.with_op_name("div"), x, ops::constant(root, {3.f}, Shape{})));
  out("maximum", ops::maximum(root.with_op_name("maximum"), x, ops::constant(root, {1.f}, Shape{})));
  out("neg", ops::neg(root.with_op_name("neg"), x));
  out("square", ops::square(root.with_op_name("square"), x));
  out("log", ops::log(root.with_op_name("log"), x));
  out("exp", ops::exp(root.with_op_name("exp"), x));
  out("sqrt", ops::sqrt(root.with_op_name("sqrt"), x));
  out("sigmoid", ops::sigmoid(root.with_op_name("sigmoid"), x));
  out("tanh", ops::tanh(root.with_op_name("tanh"), x));
  out("addn", ops::add_n(root.with_op_name("addn"), {x, x, x}));
  out("identity", ops::identity(root.with_op_name("identity"), ops::stop_gradient(root, x)));
  out("zeros_like", ops::zeros_like(root.with_op_name("zeros_like"), x));
  out("ones_like", ops::ones_like(root.with_op_name("ones_like"), x));
  out("l2_loss", ops::l2_loss(root.with_op_name("l2_loss"), x));
  out("sum_keep", ops::reduce_sum(root.with_op_name("sum_keep"), x, {1}, true));
  out("max_all", ops::reduce_max(root.with_op_name("max_all"), x));
  out("transpose", ops::transpose(root.with_op_name("transpose"), x, {1, 0}));
  out("expand", ops::expand_dims(root.with_op_name("expand"), x, {1}));
  auto parts = ops::split(root.with_op_name("split"), x, 3, 1);
  out("concat", ops::concat(root.with_op_name("concat"), {parts[2], parts[0]}, 1));
  out("slice", ops::slice(root.with_op_name("slice"), x, {0, 1}, {2, 2}));
  out("gather", ops::gather(root.with_op_name("gather"), x, ops::constant(root, Tensor::from_vector<int32_t>({1, 0, 1}, {3}))));
  out("fill", ops::fill(root.with_op_name("fill"), Shape{2, 2}, 2.5f));
  out("softmax", ops::softmax(root.with_op_name("softmax"), x));
  auto sparse = ops::sparse_softmax_cross_entropy_with_logits(
      root.with_op_name("sparse_xent"), x, ops::constant(root, Tensor::from_vector<int64_t>({2, 0}, {2})));
  out("sparse_xent", sparse[0]);
  out("sparse_xent_grad", sparse[1]);
  as_float("greater", ops::greater(root, x, ops::constant(root, {1.f}, Shape{})));
  as_float("equal", ops::equal(root, x, x));
  as_float("argmax", ops::argmax(root, x, 1));
  as_float("shape", ops::shape_of(root, x));
  out("matmul_tb", ops::matmul(root.with_op_name("matmul_tb"), x, x, {false, true}));
  // Convolutions, pooling and their gradients on a [1,4,4,2] image and a 3x3x2x3 filter.
  Output img = ops::constant(root, testing::random_tensor(Shape{1, 4, 4, 2}, 21));
  Output filt = ops::constant(root, testing::random_tensor(Shape{3, 3, 2, 3}, 22));
  Output dy = ops::constant(root, testing::random_tensor(Shape{1, 4, 4, 3}, 23));
  Output dpool = ops::constant(root, testing::random_tensor(Shape{1, 2, 2, 2}, 24));
  const std::vector<int64_t> one = {1, 1, 1, 1}, two = {1, 2, 2, 1};
  out("conv", ops::conv2d(root.with_op_name("conv"), img, filt, {1, 2, 2, 1}, "VALID"));
  out("conv_input_grad",
      ops::conv2d_backprop_input(root.with_op_name("conv_input_grad"),
                                 ops::constant(root, Tensor::from_vector<int32_t>({1, 4, 4, 2}, {4})), filt, dy, one, "SAME"));
  out("conv_filter_grad",
      ops::conv2d_backprop_filter(root.with_op_name("conv_filter_grad"), img, {3, 3, 2, 3}, dy, one, "SAME"));
  Output mp = ops::max_pool(root.with_op_name("max_pool"), img, two, two, "VALID");
  out("max_pool", mp);
  out("max_pool_grad", ops::max_pool_grad(root.with_op_name("max_pool_grad"), img, mp, dpool, two, two, "VALID"));
  out("avg_pool", ops::avg_pool(root.with_op_name("avg_pool"), img, {1, 3, 3, 1}, one, "SAME"));
  out("avg_pool_grad", ops::avg_pool_grad(root.with_op_name("avg_pool_grad"), img, dpool, two, two, "VALID"));
  out("relu_grad", ops::relu_grad(root.with_op_name("relu_grad"), dy, ops::sub(root, dy, ops::constant(root, {0.2f}, Shape{}))));
  out("bias_add_grad", ops::bias_add_grad(root.with_op_name("bias_add_grad"), dy));
  // Variables: initialised by "init", then one AssignAdd and one SGD step (on different variables,
  // so their order within the run does not matter).
  Output v1 = ops::variable(root.with_op_name("v1"), Shape{3}, f32);
  Output v2 = ops::variable(root.with_op_name("v2"), Shape{3}, f32);
  ops::no_op(root,
             {ops::assign(root.with_op_name("v1/Assign"), v1, ops::constant(root, {1.f, 2.f, 3.f}, Shape{3})),
              ops::assign(root.with_op_name("v2/Assign"), v2, ops::constant(root, {4.f, 5.f, 6.f}, Shape{3}))},
             "init");
  out("assign_add", ops::assign_add(root.with_op_name("assign_add"), v1, ops::constant(root, {0.5f, 1.f, 2.f}, Shape{3})));
  out("sgd", ops::apply_gradient_descent(root.with_op_name("sgd"), v2, ops::constant(root, {0.1f}, Shape{}),
                                         ops::constant(root, {1.f, 2.f, 3.f}, Shape{3})));
  as_float("initialized", ops::is_variable_initialized(root, v1));
  ASSERT_TRUE(root.ok()) << root.status();
  std::vector<std::string> fetches;
  for (const auto& [name, o] : outs) fetches.push_back(o.name());
  const std::vector<std::pair<std::string, Tensor>> feeds = {{"x", testing::random_tensor(Shape{2, 3}, 3, 0.5f, 2.f)}};
  auto want = run_actorflow(root, feeds, fetches, "init");
  ASSERT_TRUE(want.ok()) << want.status();
  auto gd = export_graph_def(*root.graph());
  ASSERT_TRUE(gd.ok()) << gd.status();
  TempDir dir;
  const std::string file = dir.write("ops.pb", *gd);
  const std::string spec = dir.write("spec.json", spec_of(feeds, fetches, "init").dump());
  auto tf = run_python(dir, "tf_run_export.py", file + " " + spec);
  ASSERT_TRUE(tf.ok()) << tf.status();
  for (size_t i = 0; i < fetches.size(); ++i) expect_near((*want)[i], (*tf)["fetches"][fetches[i]], fetches[i]);
}

// actorflow -> export -> actorflow's import_graph_def: the same outputs, names and devices.
TEST(TfExportTest, ImportingTheExportGivesTheSameOutputs) {
  {
    Mlp m;
    const std::vector<std::string> fetches = {"logits", "probs", "loss"};
    auto want = run_actorflow(m.root, m.feeds(), fetches, "init");
    ASSERT_TRUE(want.ok()) << want.status();
    for (GraphDefFormat f : {GraphDefFormat::kBinary, GraphDefFormat::kText}) {
      ExportGraphDefOptions o;
      o.format = f;
      auto gd = export_graph_def(*m.root.graph(), o);
      ASSERT_TRUE(gd.ok()) << gd.status();
      Scope back = Scope::root();
      ImportGraphDefOptions io;
      io.format = f;
      auto imported = import_graph_def(back, *gd, io);
      ASSERT_TRUE(imported.ok()) << imported.status();
      EXPECT_EQ(imported->variables, (std::vector<std::string>{"w1", "b1", "w2", "b2"}));
      auto got = run_actorflow(back, m.feeds(), fetches, "init");
      ASSERT_TRUE(got.ok()) << got.status();
      for (size_t i = 0; i < fetches.size(); ++i) expect_same((*got)[i], (*want)[i], fetches[i]);
    }
  }
  {
    Cnn c;
    std::vector<Tensor> want;
    auto gd = frozen_cnn(c, c.fetches(), &want, GraphDefFormat::kText);
    ASSERT_TRUE(gd.ok()) << gd.status();
    Scope back = Scope::root();
    auto imported = import_graph_def(back, *gd);
    ASSERT_TRUE(imported.ok()) << imported.status();
    EXPECT_TRUE(imported->variables.empty());  // frozen: Consts
    auto got = run_actorflow(back, c.feeds(), c.fetches(), "");
    ASSERT_TRUE(got.ok()) << got.status();
    for (size_t i = 0; i < want.size(); ++i) expect_same((*got)[i], want[i], c.fetches()[i]);
  }
  {
    // Requested devices, colocation and control inputs survive.
    Scope root = Scope::root();
    Scope ps = root.with_device("/job:ps/task:0");
    Output v = ops::variable(ps.with_op_name("v"), Shape{2}, DType::kFloat32);
    Output a = ops::assign(ps.with_op_name("v/Assign"), v, ops::constant(ps, Tensor::from_vector<float>({1, 2}, {2})));
    Output y = ops::identity(root.with_device("/job:worker/task:1").with_op_name("y").with_control_dependencies({a}), v);
    y.node()->colocate_with.push_back("v");
    auto gd = export_graph_def(*root.graph());
    ASSERT_TRUE(gd.ok()) << gd.status();
    Scope back = Scope::root();
    auto imported = import_graph_def(back, *gd);
    ASSERT_TRUE(imported.ok()) << imported.status();
    EXPECT_EQ(imported->node("v")->requested_device, "/job:ps/task:0");
    EXPECT_EQ(imported->node("v/Assign")->requested_device, "/job:ps/task:0");
    EXPECT_EQ(imported->node("y")->requested_device, "/job:worker/task:1");
    EXPECT_EQ(imported->node("y")->colocate_with, (std::vector<std::string>{"v"}));
    ASSERT_EQ(imported->node("y")->control_inputs.size(), 1u);
    EXPECT_EQ(back.graph()->node(imported->node("y")->control_inputs[0])->name, "v/Assign");
    EXPECT_EQ(imported->node("v/Assign")->attrs.get_or<std::string>("var_name", ""), "v");
  }
}

TEST(TfExportTest, WhatTensorFlowCannotExpressIsAnErrorNamingNodeAndOp) {
  Cnn c;
  ASSERT_TRUE(c.status.ok()) << c.status;
  // The whole training graph: its variables start at RandomUniform values (TensorFlow's generator
  // differs; frozen or assigned constants export).
  auto all = export_graph_def(*c.root.graph());
  ASSERT_FALSE(all.ok());
  EXPECT_EQ(all.status().code(), Code::kInvalidArgument);
  EXPECT_NE(all.status().message().find("(op RandomUniform)"), std::string::npos) << all.status();
  // An op TensorFlow has no op for, named with its node.
  Scope root = Scope::root();
  Output x = ops::placeholder(root, DType::kFloat32, Shape{2, 3}, "x");
  ops::reshape_like(root.with_op_name("rl"), x, x);
  auto gd = export_graph_def(*root.graph());
  ASSERT_FALSE(gd.ok());
  EXPECT_NE(gd.status().message().find("node 'rl' (op ReshapeLike)"), std::string::npos) << gd.status();
  EXPECT_NE(gd.status().message().find("TensorFlow has no op"), std::string::npos) << gd.status();
  // for_tensorboard keeps it, with its op name and no attributes but the output shapes.
  ExportGraphDefOptions tb;
  tb.for_tensorboard = true;
  tb.format = GraphDefFormat::kText;
  auto drawn = export_graph_def(*root.graph(), tb);
  ASSERT_TRUE(drawn.ok()) << drawn.status();
  EXPECT_NE(drawn->find("name: \"rl\"\n  op: \"ReshapeLike\"\n  input: \"x\"\n  input: \"x\"\n  attr {\n    key: "
                        "\"_output_shapes\""),
            std::string::npos)
      << *drawn;
  auto tb_all = export_graph_def(*c.root.graph(), tb);
  ASSERT_TRUE(tb_all.ok()) << tb_all.status();
  // Outputs, frozen values and integer division that cannot be exported.
  ExportGraphDefOptions o;
  o.outputs = {"nope:0"};
  EXPECT_EQ(export_graph_def(*c.root.graph(), o).status().code(), Code::kNotFound);
  o.outputs = {c.m.logits.name()};
  o.frozen["x-input"] = Tensor(DType::kFloat32, Shape{1, 784});
  auto nv = export_graph_def(*c.root.graph(), o);
  EXPECT_NE(nv.status().message().find("'x-input' is not a variable"), std::string::npos) << nv.status();
  o.frozen.clear();
  o.frozen["pred/biases"] = Tensor(DType::kFloat32, Shape{3});
  auto ws = export_graph_def(*c.root.graph(), o);
  EXPECT_NE(ws.status().message().find("variable 'pred/biases' is float32 [3], the variable is float32 [10]"),
            std::string::npos)
      << ws.status();
  Mlp m;
  ExportGraphDefOptions f;
  f.frozen["w1"] = Tensor(DType::kFloat32, Shape{6, 5});
  auto assigns_frozen = export_graph_def(*m.root.graph(), f);
  EXPECT_NE(assigns_frozen.status().message().find("node 'w1/Assign' (op Assign): acts on variable 'w1', which is frozen"),
            std::string::npos)
      << assigns_frozen.status();
  Scope ints = Scope::root();
  ops::div(ints.with_op_name("q"), ops::constant(ints, Tensor::scalar<int32_t>(7)), ops::constant(ints, Tensor::scalar<int32_t>(2)));
  auto q = export_graph_def(*ints.graph());
  EXPECT_NE(q.status().message().find("node 'q' (op Div): Div of int32"), std::string::npos) << q.status();
}

// The text export spells the attributes TensorFlow's ops need.
TEST(TfExportTest, NodesCarryTensorFlowsAttributes) {
  Cnn c;
  ASSERT_TRUE(c.status.ok()) << c.status;
  std::vector<Tensor> values;
  auto gd = frozen_cnn(c, c.fetches(), &values, GraphDefFormat::kText);
  ASSERT_TRUE(gd.ok()) << gd.status();
  auto node_text = [&](const std::string& name) {
    const size_t at = gd->find("  name: \"" + name + "\"\n");
    if (at == std::string::npos) return std::string();
    const size_t end = gd->find("\nnode {", at);
    return gd->substr(at, end == std::string::npos ? std::string::npos : end - at);
  };
  const std::string conv = node_text("conv1/Conv2D");
  ASSERT_FALSE(conv.empty()) << *gd;
  for (const char* want : {"op: \"Conv2D\"", "key: \"T\"\n    value {\n      type: DT_FLOAT", "key: \"padding\"\n    value {\n      s: \"SAME\"",
                           "key: \"data_format\"\n    value {\n      s: \"NHWC\"", "key: \"strides\"", "key: \"dilations\""})
    EXPECT_NE(conv.find(want), std::string::npos) << want << "\n" << conv;
  const std::string pool = node_text("pool1/MaxPool");
  EXPECT_NE(pool.find("key: \"ksize\"\n    value {\n      list {\n        i: 1\n        i: 2\n        i: 2\n        i: 1"),
            std::string::npos)
      << pool;
  const std::string reshape = node_text("flatten/Reshape");
  EXPECT_NE(reshape.find("input: \"flatten/Reshape/shape\""), std::string::npos) << reshape;
  EXPECT_NE(reshape.find("key: \"Tshape\"\n    value {\n      type: DT_INT32"), std::string::npos) << reshape;
  const std::string shape = node_text("flatten/Reshape/shape");
  EXPECT_NE(shape.find("op: \"Const\""), std::string::npos) << shape;
  EXPECT_NE(node_text("accuracy").find("op: \"Mean\""), std::string::npos);
}

// TensorBoard's own event reader finds the graph that a Supervisor (through a
// MonitoredTrainingSession) wrote first into its event file, with actorflow's node names.
TEST(TfExportTest, TensorBoardsReaderFindsTheSupervisorsGraph) {
  if (tf_python().empty()) GTEST_SKIP() << "no .venv-tf/bin/python (bench/tf_venv.sh makes it)";
  Cnn c;
  ASSERT_TRUE(c.status.ok()) << c.status;
  auto server = Server::local(LocalServerOptions{});
  ASSERT_TRUE(server.ok()) << server.status();
  TempDir dir;
  {
    train::MonitoredTrainingSession::Options o;
    o.master = (*server)->target();
    o.checkpoint_dir = dir.path();
    o.init_op = c.m.init_op;
    o.hooks.push_back(std::make_shared<train::SummarySaverHook>(1, std::map<std::string, Output>{{"loss", c.m.loss}}));
    auto sess = train::MonitoredTrainingSession::create(c.root, o);
    ASSERT_TRUE(sess.ok()) << sess.status();
    FeedDict feeds;
    for (const auto& [name, t] : c.feeds()) feeds.emplace_back(name == c.m.x.name() ? c.m.x : c.m.labels, t);
    for (int i = 0; i < 2; ++i) ASSERT_TRUE((*sess)->run(feeds, {}, {c.m.train_op}).ok());
    ASSERT_TRUE((*sess)->close().ok());
  }
  auto tb = run_python(dir, "tb_read_graph.py", dir.path());
  ASSERT_TRUE(tb.ok()) << tb.status();
  EXPECT_EQ((*tb)["reader"], "EventAccumulator");  // pip's tensorboard in .venv-tf (bench/tf_venv.sh)
  const auto& nodes = (*tb)["nodes"];
  const Graph& g = *c.root.graph();
  for (int id = 0; id < g.num_nodes(); ++id) EXPECT_TRUE(nodes.contains(g.node(id)->name)) << g.node(id)->name;
  EXPECT_EQ(nodes["conv1/Conv2D"]["op"], "Conv2D");
  EXPECT_EQ(nodes["conv1/Conv2D"]["input"], (std::vector<std::string>{"Reshape", "conv1/weights"}));
  EXPECT_EQ(nodes["flatten/Reshape"]["input"], (std::vector<std::string>{"pool2/MaxPool", "flatten/Reshape/shape"}));
  EXPECT_EQ(nodes["pred/MatMul"]["op"], "MatMul");
  // An optimizer update TensorFlow has no op for: drawn with actorflow's op, from its variable.
  bool adam = false;
  for (const auto& [name, n] : nodes.items())
    if (n["op"] == "ApplyAdam" && n["input"][0] == "conv1/weights") adam = true;
  EXPECT_TRUE(adam);
  EXPECT_TRUE(nodes.contains("cross_entropy"));
}

// Whole training graphs: actorflow's Momentum, Adam, RMSProp, Adagrad and FTRL updates keep their slots in
// the variable actor; exported, they become TensorFlow's slot variables (w1/Momentum; w1/Adam and
// w1/Adam_1 with the shared beta1_power/beta2_power and their updates; w1/RMSProp and w1/RMSProp_1;
// w1/Adagrad; w1/Ftrl and w1/Ftrl_1, as ApplyFtrlV2 with an l2 shrinkage), initialised by the graph's own init, and TensorFlow's ApplyX ops on them. TensorFlow
// runs init and three steps of the exported train op: every variable equals actorflow's after its
// three steps (1e-5). Then a checkpoint actorflow's Saver wrote in TensorFlow's format after those
// steps restores into the exported graph in TensorFlow by the slot names (every variable and slot
// of the checkpoint is one of the graph's), and TensorFlow's fourth step equals actorflow's.
TEST(TfExportTest, TensorFlowTrainsTheExportedTrainingGraphAsActorflowDoes) {
  if (tf_python().empty()) GTEST_SKIP() << "no .venv-tf (bench/tf_venv.sh makes it)";
  struct Case {
    std::string name;
    std::function<std::unique_ptr<train::Optimizer>()> make;
    std::vector<std::string> slots;
  };
  const std::vector<Case> cases = {
      {"sgd", [] { return std::make_unique<train::GradientDescentOptimizer>(0.1f); }, {}},
      {"momentum", [] { return std::make_unique<train::MomentumOptimizer>(0.1f, 0.9f); }, {"w1/Momentum"}},
      {"adam", [] { return std::make_unique<train::AdamOptimizer>(0.01f); }, {"w1/Adam", "w1/Adam_1", "beta1_power"}},
      {"rmsprop", [] { return std::make_unique<train::RMSPropOptimizer>(0.01f, 0.9f, 0.5f); }, {"w1/RMSProp", "w1/RMSProp_1"}},
      {"adagrad", [] { return std::make_unique<train::AdagradOptimizer>(0.1f, 0.2f); }, {"w1/Adagrad"}},
      {"ftrl", [] { return std::make_unique<train::FtrlOptimizer>(0.05f, -0.5f, 0.2f, 0.001f, 0.01f); },
       {"w1/Ftrl", "w1/Ftrl_1"}},
      {"ftrl_v2", [] { return std::make_unique<train::FtrlOptimizer>(0.05f, -0.7f, 0.1f, 0.002f, 0.0f, 0.03f); },
       {"w1/Ftrl", "w1/Ftrl_1"}},
  };
  const std::vector<std::string> vars = {"w1", "b1", "w2", "b2"};
  for (const Case& tc : cases) {
    SCOPED_TRACE(tc.name);
    TempDir dir;
    Mlp m;
    auto opt = tc.make();
    auto train_op = opt->minimize(m.root, m.loss);
    ASSERT_TRUE(train_op.ok()) << train_op.status();
    ExportGraphDefOptions o;
    o.format = GraphDefFormat::kText;
    auto gd = export_graph_def(*m.root.graph(), o);
    ASSERT_TRUE(gd.ok()) << gd.status();
    for (const std::string& slot : tc.slots)
      EXPECT_NE(gd->find("name: \"" + slot + "\"\n  op: \"VariableV2\""), std::string::npos) << slot;
    if (tc.name.rfind("ftrl", 0) == 0) {
      EXPECT_NE(gd->find(tc.name == "ftrl_v2" ? "op: \"ApplyFtrlV2\"" : "op: \"ApplyFtrl\"\n"), std::string::npos);
    }
    const std::string file = dir.write("train.pbtxt", *gd);
    Session sess(m.root);
    ASSERT_TRUE(sess.run({}, {}, {m.init}).ok());
    for (int i = 0; i < 3; ++i) ASSERT_TRUE(sess.run_by_name(m.feeds(), {}, {train_op->node()->name}).ok());
    auto three = sess.run_by_name({}, vars);
    ASSERT_TRUE(three.ok()) << three.status();
    train::SaverOptions so;
    so.tensorflow_format = true;
    train::Saver saver(m.root, {}, so);
    ASSERT_TRUE(saver.status().ok()) << saver.status();
    auto ckpt = saver.save(sess, dir.path() + "/model.ckpt", 3);
    ASSERT_TRUE(ckpt.ok()) << ckpt.status();
    ASSERT_TRUE(sess.run_by_name(m.feeds(), {}, {train_op->node()->name}).ok());
    auto four = sess.run_by_name({}, vars);
    ASSERT_TRUE(four.ok()) << four.status();

    nlohmann::json spec = spec_of(m.feeds(), vars, "init");
    spec["train"] = train_op->node()->name;
    spec["steps"] = 3;
    auto tf = run_python(dir, "tf_run_export.py", file + " " + dir.write("spec.json", spec.dump()));
    ASSERT_TRUE(tf.ok()) << tf.status();
    for (size_t i = 0; i < vars.size(); ++i) {
      expect_near((*three)[i], (*tf)["fetches"][vars[i]], vars[i] + " after three steps");
      const auto before = (*tf)["fetches"][vars[i]]["values"].get<std::vector<double>>();
      EXPECT_FALSE(before.empty());
    }
    spec["restore"] = *ckpt;
    spec["steps"] = 1;
    auto resumed = run_python(dir, "tf_run_export.py", file + " " + dir.write("spec2.json", spec.dump()));
    ASSERT_TRUE(resumed.ok()) << resumed.status();
    const auto restored = (*resumed)["restored"].get<std::vector<std::string>>();
    for (const std::string& slot : tc.slots)
      if (slot.find("_power") == std::string::npos) {
        EXPECT_NE(std::find(restored.begin(), restored.end(), slot), restored.end()) << slot << " not restored";
      }
    for (size_t i = 0; i < vars.size(); ++i)
      expect_near((*four)[i], (*resumed)["fetches"][vars[i]], vars[i] + " after TensorFlow's fourth step");
  }
}

// Sparse updates: an embedding [6, 3] looked up by ids with a repeated index ([1, 4, 1, 0]), then
// a dense layer; actorflow's SGD, Momentum, Adagrad, RMSProp and FTRL (with and without an l2
// shrinkage) update only the rows looked up, duplicates summed first. Exported, they are
// TensorFlow's ScatterSub, and Unique + UnsortedSegmentSum + SparseApplyX on the slot variables,
// as TensorFlow's own optimizers write them; TensorFlow runs init and three steps and every
// variable equals actorflow's (1e-5). Lazy Adam (rows only) has no TensorFlow op: refused, naming it.
TEST(TfExportTest, TensorFlowTrainsTheExportedSparseUpdatesAsActorflowDoes) {
  if (tf_python().empty()) GTEST_SKIP() << "no .venv-tf (bench/tf_venv.sh makes it)";
  struct Case {
    std::string name;
    std::function<std::unique_ptr<train::Optimizer>()> make;
    std::string tf_op;
  };
  const std::vector<Case> cases = {
      {"sgd", [] { return std::make_unique<train::GradientDescentOptimizer>(0.1f); }, "ScatterSub"},
      {"momentum", [] { return std::make_unique<train::MomentumOptimizer>(0.1f, 0.9f); }, "SparseApplyMomentum"},
      {"adagrad", [] { return std::make_unique<train::AdagradOptimizer>(0.1f, 0.2f); }, "SparseApplyAdagrad"},
      {"rmsprop", [] { return std::make_unique<train::RMSPropOptimizer>(0.01f, 0.9f, 0.5f); }, "SparseApplyRMSProp"},
      {"ftrl", [] { return std::make_unique<train::FtrlOptimizer>(0.05f, -0.5f, 0.2f, 0.001f, 0.01f); }, "SparseApplyFtrl"},
      {"ftrl_v2", [] { return std::make_unique<train::FtrlOptimizer>(0.05f, -0.7f, 0.1f, 0.002f, 0.0f, 0.03f); },
       "SparseApplyFtrlV2"},
      {"adam", [] { return std::make_unique<train::AdamOptimizer>(0.01f); }, ""},
  };
  const std::vector<std::string> vars = {"emb", "w"};
  for (const Case& tc : cases) {
    SCOPED_TRACE(tc.name);
    TempDir dir;
    Scope root = Scope::root();
    std::vector<Output> assigns;
    auto var = [&](const std::string& name, const Shape& shape, uint32_t seed) {
      Output v = ops::variable(root.with_op_name(name), shape, DType::kFloat32);
      assigns.push_back(ops::assign(root.with_op_name(name + "/Assign"), v,
                                    ops::constant(root.with_op_name(name + "/initial_value"), testing::random_tensor(shape, seed))));
      return v;
    };
    Output emb = var("emb", Shape{6, 3}, 21), w = var("w", Shape{3, 2}, 22);
    Output ids = ops::placeholder(root, DType::kInt32, Shape{4}, "ids");
    Output target = ops::placeholder(root, DType::kFloat32, Shape{4, 2}, "target");
    Output pred = ops::matmul(root, ops::gather(root, emb, ids), w);
    Output loss = ops::reduce_mean(root.with_op_name("loss"), ops::square(root, ops::sub(root, pred, target)));
    Output init = ops::no_op(root, assigns, "init");
    auto opt = tc.make();
    auto train_op = opt->minimize(root, loss);
    ASSERT_TRUE(train_op.ok()) << train_op.status();
    ExportGraphDefOptions o;
    o.format = GraphDefFormat::kText;
    auto gd = export_graph_def(*root.graph(), o);
    if (tc.tf_op.empty()) {
      ASSERT_FALSE(gd.ok());
      EXPECT_NE(gd.status().message().find("SparseApplyAdam"), std::string::npos) << gd.status();
      continue;
    }
    ASSERT_TRUE(gd.ok()) << gd.status();
    EXPECT_NE(gd->find("op: \"" + tc.tf_op + "\""), std::string::npos) << tc.tf_op;
    if (tc.name != "sgd") {
      EXPECT_NE(gd->find("op: \"Unique\""), std::string::npos);
    }
    const std::string file = dir.write("train.pbtxt", *gd);
    const std::vector<std::pair<std::string, Tensor>> feeds = {
        {"ids", Tensor::from_vector<int32_t>({1, 4, 1, 0}, Shape{4})}, {"target", testing::random_tensor(Shape{4, 2}, 23)}};
    Session sess(root);
    ASSERT_TRUE(sess.run({}, {}, {init}).ok());
    for (int i = 0; i < 3; ++i) ASSERT_TRUE(sess.run_by_name(feeds, {}, {train_op->node()->name}).ok());
    auto three = sess.run_by_name({}, vars);
    ASSERT_TRUE(three.ok()) << three.status();
    // The rows not looked up (2, 3, 5) did not move; row 1 (looked up twice) did.
    const Tensor start = testing::random_tensor(Shape{6, 3}, 21);
    for (int row : {2, 3, 5})
      for (int c = 0; c < 3; ++c) EXPECT_EQ((*three)[0].data<float>()[row * 3 + c], start.data<float>()[row * 3 + c]);
    EXPECT_NE((*three)[0].data<float>()[3], start.data<float>()[3]);
    nlohmann::json spec = spec_of(feeds, vars, "init");
    spec["train"] = train_op->node()->name;
    spec["steps"] = 3;
    auto tf = run_python(dir, "tf_run_export.py", file + " " + dir.write("spec.json", spec.dump()));
    ASSERT_TRUE(tf.ok()) << tf.status();
    for (size_t i = 0; i < vars.size(); ++i) expect_near((*three)[i], (*tf)["fetches"][vars[i]], vars[i] + " after three steps");
  }
}

}  // namespace
}  // namespace actorflow

