// Core ops: Const, Placeholder, Identity, StopGradient, NoOp, and the runtime's own _Arg,
// _Retval, _Send, _Recv (inserted by the master, never by users).
#include "graph/op_registry.h"

namespace actorflow {

void register_core_ops(OpRegistry& r) {
  r.add({"Const", 0, [](InferenceContext& c) -> Status {
           auto v = c.attrs().get<Tensor>("value");
           if (!v.ok()) return InvalidArgument("Const needs a 'value' tensor attribute");
           if (!v->is_initialized()) return InvalidArgument("Const value is an uninitialised tensor");
           c.set_output(0, v->dtype(), v->shape());
           return Status::OK();
         }, nullptr, false, true});
  r.add({"Placeholder", 0, [](InferenceContext& c) -> Status {
           auto t = c.attrs().get<DType>("dtype");
           if (!t.ok()) return InvalidArgument("Placeholder needs a 'dtype' attribute");
           c.set_output(0, *t, c.attrs().get_or<Shape>("shape", Shape::unknown()));
           return Status::OK();
         }, nullptr, true, true});
  auto identity_shape = [](InferenceContext& c) -> Status {
    c.set_output(0, c.input_type(0), c.input_shape(0));
    return Status::OK();
  };
  r.add({"Identity", 1, identity_shape});
  r.add({"StopGradient", 1, identity_shape});
  r.add({"NoOp", -1, [](InferenceContext& c) -> Status {
           if (c.num_inputs() != 0) return InvalidArgument("NoOp takes no data inputs");
           return Status::OK();
         }, nullptr, false, true});
  r.add({"_Arg", 0, [](InferenceContext& c) -> Status {
           AF_ASSIGN_OR_RETURN(DType t, c.attrs().get<DType>("dtype"));
           c.set_output(0, t, c.attrs().get_or<Shape>("shape", Shape::unknown()));
           return Status::OK();
         }, nullptr, true, true});
  r.add({"_Retval", 1, [](InferenceContext&) { return Status::OK(); }, nullptr, true});
  r.add({"_Send", 1, [](InferenceContext&) { return Status::OK(); }, nullptr, true});
  r.add({"_Recv", 0, [](InferenceContext& c) -> Status {
           AF_ASSIGN_OR_RETURN(DType t, c.attrs().get<DType>("dtype"));
           c.set_output(0, t, c.attrs().get_or<Shape>("shape", Shape::unknown()));
           return Status::OK();
         }, nullptr, true, true});
}

}  // namespace actorflow
