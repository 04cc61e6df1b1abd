// Reading net::Frame values in tests: the key, tensor or error of whichever kind a frame is.
#pragma once

#include <string>

#include "net/frames.h"

namespace actorflow {
namespace testing {

// The rendezvous key of a tensor, error or feed frame; "" for the other kinds.
inline std::string key_of(const net::Frame& m) {
  const bool keyed = m.as<net::TensorFrame>() || m.as<net::ErrorFrame>() || m.as<net::FeedFrame>();
  return keyed ? net::frame_name(m.body) : std::string();
}

// The tensor of a tensor, feed or ret frame; an uninitialised tensor for the other kinds.
inline Tensor tensor_of(const net::Frame& m) {
  const Tensor* t = net::frame_tensor(m.body);
  return t ? *t : Tensor();
}

// The text of an error frame, the message of a done frame; "" for the other kinds.
inline std::string error_of(const net::Frame& m) {
  if (const auto* e = m.as<net::ErrorFrame>()) return e->error;
  if (const auto* d = m.as<net::DoneFrame>()) return d->message;
  return "";
}

}  // namespace testing
}  // namespace actorflow
