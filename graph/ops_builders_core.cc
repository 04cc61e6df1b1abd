#include "graph/ops.h"

namespace actorflow {
namespace ops {

Output constant(const Scope& s, const std::vector<float>& values, const Shape& shape, const std::string& name) {
  const int64_t n = shape.num_elements();
  if (n < 0) {
    s.update_status(InvalidArgument("Const '" + name + "': shape " + shape.to_string() + " is not fully defined"));
    return Output();
  }
  if (values.size() != static_cast<size_t>(n) && values.size() != 1) {
    s.update_status(InvalidArgument("Const '" + (name.empty() ? std::string("Const") : name) + "': " +
                                    std::to_string(values.size()) + " values do not fill shape " +
                                    shape.to_string() + " (" + std::to_string(n) + " elements)"));
    return Output();
  }
  Tensor t(DType::kFloat32, shape);
  float* d = t.data<float>();
  for (int64_t i = 0; i < n; ++i) d[i] = values.size() == 1 ? values[0] : values[static_cast<size_t>(i)];
  return constant(s, t, name);
}

Output constant(const Scope& s, const Tensor& value, const std::string& name) {
  Scope sc = name.empty() ? s : s.with_op_name(name);
  return NodeBuilder(sc, "Const").attr("value", value).attr("dtype", value.dtype()).output();
}

Output placeholder(const Scope& s, DType dtype, const Shape& shape, const std::string& name) {
  Scope sc = name.empty() ? s : s.with_op_name(name);
  return NodeBuilder(sc, "Placeholder").attr("dtype", dtype).attr("shape", shape).output();
}

Output identity(const Scope& s, Input x) { return NodeBuilder(s, "Identity").input(x).output(); }

Output placeholder_with_default(const Scope& s, Input value, const std::string& name) {
  Scope sc = name.empty() ? s : s.with_op_name(name);
  return NodeBuilder(sc, "Identity", "PlaceholderWithDefault").input(value).output();
}

Output stop_gradient(const Scope& s, Input x) { return NodeBuilder(s, "StopGradient").input(x).output(); }

Output no_op(const Scope& s, const std::vector<Output>& control_deps, const std::string& name) {
  Scope sc = name.empty() ? s : s.with_op_name(name);
  NodeBuilder b(sc, "NoOp");
  for (const auto& d : control_deps) b.control_input(d);
  Node* n = b.finalize();
  return n ? Output(n, 0) : Output();
}

}  // namespace ops
}  // namespace actorflow
