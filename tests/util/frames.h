// Reading net::Frame values in tests: the key, tensor or error of whichever kind a frame is.
#pragma once

#include <string>

#include "net/frames.h"

namespace actorflow {
namespace testing {

// The rendezvous key of a tensor, error or feed frame; "" for the other kinds.
inline std::string key_of(const net::Frame& m) {
  if (const auto* t = m.as<net::TensorFrame>()) return t->key;
  if (const auto* e = m.as<net::ErrorFrame>()) return e->key;
  if (const auto* f = m.as<net::FeedFrame>()) return f->key;
  return "";
}

// The tensor of a tensor, feed or ret frame; an uninitialised tensor for the other kinds.
inline Tensor tensor_of(const net::Frame& m) {
  if (const auto* t = m.as<net::TensorFrame>()) return t->tensor;
  if (const auto* f = m.as<net::FeedFrame>()) return f->tensor;
  if (const auto* r = m.as<net::RetFrame>()) return r->tensor;
  return Tensor();
}

// The text of an error frame, the message of a done frame; "" for the other kinds.
inline std::string error_of(const net::Frame& m) {
  if (const auto* e = m.as<net::ErrorFrame>()) return e->error;
  if (const auto* d = m.as<net::DoneFrame>()) return d->message;
  return "";
}

}  // namespace testing
}  // namespace actorflow
