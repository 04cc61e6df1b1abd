#include "core/hang_report.h"

#include <dirent.h>
#include <fcntl.h>
#include <signal.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstdlib>
#include <cstdio>
#include <list>
#include <mutex>
#include <sstream>
#include <thread>
#include <vector>

#include "core/logging.h"
#include "core/waits.h"

namespace actorflow {

struct DumpReporter::Entry {
  std::string name;
  std::mutex mu;  // held while `report` runs, and by the owner while it drops it
  std::function<std::string()> report;
};

namespace {

struct Reporters {
  std::mutex mu;
  std::list<std::shared_ptr<DumpReporter::Entry>> entries;  // guarded by mu
};

Reporters& reporters() {
  static Reporters* r = new Reporters;  // never destroyed: reporters may go at exit
  return *r;
}

// A small /proc file, whole (at most 4 KiB), without its trailing newline; "" when unreadable.
std::string read_proc(const std::string& path) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK);
  if (fd < 0) return "";
  char buf[4096];
  size_t n = 0;
  while (n < sizeof buf) {
    const ssize_t r = ::read(fd, buf + n, sizeof buf - n);
    if (r <= 0) break;
    n += static_cast<size_t>(r);
  }
  ::close(fd);
  std::string s(buf, n);
  while (!s.empty() && (s.back() == '\n' || s.back() == '\0')) s.pop_back();
  return s;
}

std::string threads_section() {
  std::ostringstream o;
  DIR* d = ::opendir("/proc/self/task");
  if (!d) return "(cannot read /proc/self/task)\n";
  std::vector<long> tids;
  while (dirent* e = ::readdir(d)) {
    if (e->d_name[0] < '0' || e->d_name[0] > '9') continue;
    tids.push_back(std::strtol(e->d_name, nullptr, 10));
  }
  ::closedir(d);
  std::sort(tids.begin(), tids.end());
  o << tids.size() << " threads\n";
  size_t shown = 0;
  for (long tid : tids) {
    if (++shown > kMaxThreads) {
      o << "  ... " << tids.size() - kMaxThreads << " more\n";
      break;
    }
    const std::string base = "/proc/self/task/" + std::to_string(tid) + "/";
    const std::string comm = read_proc(base + "comm");
    // stat: "tid (comm) S ...": the state is the first field after the last ')'.
    const std::string stat = read_proc(base + "stat");
    const size_t rp = stat.rfind(')');
    const char state = rp != std::string::npos && rp + 2 < stat.size() ? stat[rp + 2] : '?';
    std::string wchan = read_proc(base + "wchan");
    if (wchan.empty() || wchan == "0") wchan = "-";
    o << "  " << tid << "  " << (comm.empty() ? "?" : comm) << "  " << state << "  " << wchan << "\n";
  }
  return o.str();
}

}  // namespace

DumpReporter::DumpReporter(std::string name, std::function<std::string()> report) {
  auto e = std::make_shared<Entry>();
  e->name = std::move(name);
  e->report = std::move(report);
  Reporters& r = reporters();
  std::lock_guard<std::mutex> l(r.mu);
  if (r.entries.size() >= kMaxReporters) return;  // not registered: the report stays bounded
  r.entries.push_back(e);
  entry_ = std::move(e);
}

DumpReporter::~DumpReporter() { reset(); }

DumpReporter::DumpReporter(DumpReporter&& o) noexcept : entry_(std::move(o.entry_)) {}

DumpReporter& DumpReporter::operator=(DumpReporter&& o) noexcept {
  if (this != &o) {
    reset();
    entry_ = std::move(o.entry_);
  }
  return *this;
}

void DumpReporter::reset() {
  if (!entry_) return;
  {
    Reporters& r = reporters();
    std::lock_guard<std::mutex> l(r.mu);
    r.entries.remove(entry_);
  }
  {
    std::lock_guard<std::mutex> l(entry_->mu);  // a report in progress ends first
    entry_->report = nullptr;
  }
  entry_.reset();
}

std::string hang_report(const std::string& task) {
  std::ostringstream o;
  o << "hang report of " << (task.empty() ? "this process" : task) << " (pid " << ::getpid() << ")\n";
  const auto waits = WaitRegistry::global().snapshot();
  o << "== waits (" << waits.size() << ")\n";
  for (const auto& w : waits) {
    char age[32];
    std::snprintf(age, sizeof age, "%.1f", w.age_secs);
    o << "  " << age << " s  " << w.kind << "  on " << (w.on.empty() ? "-" : w.on) << "  " << w.what << "\n";
    if (o.tellp() > static_cast<std::streamoff>(kMaxDumpBytes)) break;
  }
  o << "== threads\n" << threads_section();
  std::vector<std::shared_ptr<DumpReporter::Entry>> entries;
  {
    Reporters& r = reporters();
    std::lock_guard<std::mutex> l(r.mu);
    entries.assign(r.entries.begin(), r.entries.end());
  }
  o << "== reporters (" << entries.size() << ")\n";
  for (const auto& e : entries) {
    if (o.tellp() > static_cast<std::streamoff>(kMaxDumpBytes)) break;
    std::string text;
    {
      std::lock_guard<std::mutex> l(e->mu);
      if (!e->report) continue;  // dropped meanwhile
      text = e->report();
    }
    if (text.size() > DumpReporter::kMaxReportBytes) text = text.substr(0, DumpReporter::kMaxReportBytes) + "...\n";
    if (!text.empty() && text.back() != '\n') text += '\n';
    o << "-- " << e->name << "\n" << text;
  }
  std::string s = o.str();
  if (s.size() > kMaxDumpBytes) s = s.substr(0, kMaxDumpBytes) + "\n... (report cut at " + std::to_string(kMaxDumpBytes) + " bytes)\n";
  return s;
}

// ---- DumpOnSignal ----------------------------------------------------------------------------

namespace {
std::atomic<int> g_dump_fd{-1};
extern "C" void dump_signal_handler(int) {
  const int fd = g_dump_fd.load();
  if (fd >= 0) {
    const char b = 1;
    ssize_t r = ::write(fd, &b, 1);  // async-signal-safe; a full pipe already has a report due
    (void)r;
  }
}
}  // namespace

struct DumpOnSignal::Impl {
  int signo = 0;
  int rd = -1, wr = -1;
  struct sigaction old {};
  std::thread thread;
  std::atomic<int> reports{0};
  std::function<std::string()> task;
};

DumpOnSignal::DumpOnSignal(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}

Result<std::unique_ptr<DumpOnSignal>> DumpOnSignal::install(int signo, std::function<std::string()> task) {
  if (g_dump_fd.load() >= 0) return FailedPrecondition("a hang report is already installed on a signal in this process");
  auto impl = std::make_unique<Impl>();
  impl->signo = signo;
  impl->task = std::move(task);
  int fds[2];
  if (::pipe2(fds, O_CLOEXEC) != 0) return Internal("hang report: cannot make a pipe");
  impl->rd = fds[0];
  impl->wr = fds[1];
  ::fcntl(impl->wr, F_SETFL, O_NONBLOCK);
  g_dump_fd.store(impl->wr);
  struct sigaction sa {};
  sa.sa_handler = dump_signal_handler;
  sigemptyset(&sa.sa_mask);
  sa.sa_flags = SA_RESTART;
  if (::sigaction(signo, &sa, &impl->old) != 0) {
    g_dump_fd.store(-1);
    ::close(impl->rd);
    ::close(impl->wr);
    return Internal("hang report: cannot install the handler of signal " + std::to_string(signo));
  }
  Impl* p = impl.get();
  impl->thread = std::thread([p] {
    char buf[64];
    while (true) {
      const ssize_t n = ::read(p->rd, buf, sizeof buf);
      if (n < 0 && errno == EINTR) continue;
      if (n <= 0) return;  // the write end closed: uninstalled
      bool quit = false;
      for (ssize_t i = 0; i < n; ++i) quit |= buf[i] == 0;
      if (quit) return;
      const std::string report = hang_report(p->task ? p->task() : "");
      std::istringstream in(report);
      std::string line;
      AF_LOG(WARNING) << "hang report requested by signal " << p->signo << ":";
      while (std::getline(in, line)) AF_LOG(WARNING) << "  " << line;
      p->reports.fetch_add(1);
    }
  });
  return std::unique_ptr<DumpOnSignal>(new DumpOnSignal(std::move(impl)));
}

DumpOnSignal::~DumpOnSignal() {
  if (!impl_) return;
  ::sigaction(impl_->signo, &impl_->old, nullptr);
  g_dump_fd.store(-1);
  const char quit = 0;
  ssize_t r = ::write(impl_->wr, &quit, 1);
  (void)r;
  ::close(impl_->wr);  // the reader ends at the quit byte or at end of file
  if (impl_->thread.joinable()) impl_->thread.join();
  ::close(impl_->rd);
}

int DumpOnSignal::reports() const { return impl_->reports.load(); }

}  // namespace actorflow
