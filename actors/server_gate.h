// ServerGate: how Sessions use a Server only while it serves.
//
// A Session holds a raw Server* (found by target, or its own). Each of its calls that touches
// the server enters the server's gate first and leaves it when done (ServerGate::Entry); the
// server closes the gate when it stops, which makes every later call fail at once (Cancelled,
// naming the server) without touching it, and ~Server waits, bounded, until the calls inside
// have left (stopping cancels their waits: the master answers its in-flight runs, direct steps
// and connection attempts end) before it frees anything they use.
//
// Thread-safe: every method may be called from any thread.
#pragma once

#include <algorithm>
#include <chrono>
#include <condition_variable>
#include <functional>
#include <memory>
#include <mutex>
#include <vector>

namespace actorflow {

class ServerGate {
 public:
  ServerGate() = default;
  ServerGate(const ServerGate&) = delete;
  ServerGate& operator=(const ServerGate&) = delete;

  // One caller inside the gate, from construction to destruction. RAII; not copyable.
  class Entry {
   public:
    explicit Entry(const std::shared_ptr<ServerGate>& gate) : gate_(gate && gate->enter() ? gate.get() : nullptr) {}
    ~Entry() {
      if (gate_) gate_->leave();
    }
    Entry(const Entry&) = delete;
    Entry& operator=(const Entry&) = delete;
    // True when the caller got in (the server serves and may be used until this Entry ends).
    explicit operator bool() const { return gate_ != nullptr; }

   private:
    ServerGate* gate_;
  };

  // Closes the gate: no caller gets in any more; then runs the close hooks (on_close) whose
  // owners live. Idempotent.
  void close() {
    std::vector<Hook> hooks;
    {
      std::lock_guard<std::mutex> l(mu_);
      open_ = false;
      hooks.swap(hooks_);
    }
    for (auto& h : hooks)
      if (auto owner = h.owner.lock()) h.f();
  }
  // Runs `f` once when the gate closes (at once, here, if it is closed), while `owner` lives:
  // for callers that hold what the server owns (a session's cached device handles, which keep
  // the server's detached actors from ending) and must let go of it then. `f` must not block
  // and must not call back into the gate.
  void on_close(std::weak_ptr<void> owner, std::function<void()> f) {
    {
      std::lock_guard<std::mutex> l(mu_);
      if (open_) {
        hooks_.erase(std::remove_if(hooks_.begin(), hooks_.end(), [](const Hook& h) { return h.owner.expired(); }),
                     hooks_.end());
        hooks_.push_back(Hook{std::move(owner), std::move(f)});
        return;
      }
    }
    if (owner.lock()) f();
  }
  // Waits until no caller is inside or `bound` passed; returns whether none is inside.
  bool wait_empty(std::chrono::milliseconds bound) {
    std::unique_lock<std::mutex> l(mu_);
    return cv_.wait_for(l, bound, [&] { return inside_ == 0; });
  }
  // True until close().
  bool is_open() const {
    std::lock_guard<std::mutex> l(mu_);
    return open_;
  }
  // How many callers are inside now.
  int inside() const {
    std::lock_guard<std::mutex> l(mu_);
    return inside_;
  }
 private:
  bool enter() {
    std::lock_guard<std::mutex> l(mu_);
    if (!open_) return false;
    ++inside_;
    return true;
  }
  void leave() {
    {
      std::lock_guard<std::mutex> l(mu_);
      --inside_;
    }
    cv_.notify_all();
  }

  struct Hook {
    std::weak_ptr<void> owner;
    std::function<void()> f;
  };
  mutable std::mutex mu_;
  std::condition_variable cv_;
  bool open_ = true;
  int inside_ = 0;
  std::vector<Hook> hooks_;
};

}  // namespace actorflow
