#include "core/fd_tap.h"

#include <fcntl.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <condition_variable>
#include <cstring>
#include <memory>
#include <mutex>
#include <new>
#include <stdexcept>
#include <thread>
#include <utility>

namespace warmprof::fd_tap {

namespace {

constexpr size_t kChunk = 64 << 10;  // one read; the pipe's default capacity

// Owns one descriptor; closes it once.
class Fd {
 public:
  explicit Fd(int fd = -1) : fd_(fd) {}
  Fd(Fd&& o) noexcept : fd_(o.release()) {}
  Fd& operator=(Fd&& o) noexcept {
    reset(o.release());
    return *this;
  }
  Fd(const Fd&) = delete;
  Fd& operator=(const Fd&) = delete;
  ~Fd() { reset(); }
  int get() const { return fd_; }
  int release() { return std::exchange(fd_, -1); }
  void reset(int fd = -1) {
    if (fd_ >= 0) ::close(fd_);
    fd_ = fd;
  }

 private:
  int fd_;
};

short poll_now(int fd, int timeout_ms = 0) {
  pollfd pf{fd, POLLIN, 0};
  return ::poll(&pf, 1, timeout_ms) > 0 ? pf.revents : 0;
}

// How long held bytes that may begin a oneDNN line wait for the rest before they are let through:
// C stdio flushes a full buffer wherever it ends, so a prefix can come in two writes.
constexpr int kHoldMs = 5;

// After each read the reader waits this long before it reads again. A reader asleep in poll() is
// woken by every write into the pipe, and on a VM that wake-up (an IPI to the reader's CPU) costs
// the writer tens of us: with oneDNN's verbose lines (a few per pass, each flushed on its own) it
// was most of what the oneDNN instrument cost a pass (BERT: about 0.3 ms of a 1.7 ms pass). While
// the reader paces, writes only fill the pipe (enlarged to kPipeBytes where the kernel lets us): a
// pass's lines cost one wake-up per kPaceMs at most. Text the model prints reaches stdout up to
// kPaceMs later; a pass boundary's mark waits as long at most.
constexpr int kPaceMs = 2;

std::chrono::duration<double> seconds(double s) {
  if (!(s > 0)) s = 0;  // NaN too
  return std::chrono::duration<double>(std::min(s, 1e7));  // far from the clock's overflow
}

class Collect final : public Splitter::Sink {
 public:
  std::string passthrough;
  std::vector<std::string> lines;
  std::vector<uint64_t> segments;
  void out(const char* data, size_t n) override { passthrough.append(data, n); }
  void line(const std::string& l, uint64_t marks) override {
    lines.push_back(l);
    segments.push_back(marks);
  }
  void mark(uint64_t) override {}
};

}  // namespace

bool write_all(int fd, const char* p, size_t n) {
  while (n > 0) {
    ssize_t k = ::write(fd, p, n);
    if (k > 0) {
      p += k;
      n -= size_t(k);
    } else if (k < 0 && errno == EINTR) {
      continue;
    } else if (k < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
      pollfd pf{fd, POLLOUT, 0};  // someone made stdout non-blocking: wait until it takes bytes
      ::poll(&pf, 1, -1);
    } else {
      if (k == 0) errno = EIO;
      return false;
    }
  }
  return true;
}

// --- the splitter ---

Splitter::Splitter(std::vector<std::string> prefixes, std::string marker) {
  starts_.push_back(std::move(marker));
  for (std::string& p : prefixes)
    if (!p.empty()) starts_.push_back(std::move(p));  // an empty prefix would take every byte
  for (const std::string& s : starts_) longest_ = std::max(longest_, s.size());
  next_.resize(starts_.size());
  // Sized once so the reader does not allocate per read: data_ is a held end plus one chunk;
  // out_ is at most data_ plus a line given back; line_ never passes kMaxLine.
  data_.reserve(kChunk + longest_);
  out_.reserve(kChunk + longest_ + kMaxLine);
  line_.reserve(kMaxLine);
}

void Splitter::feed(const char* p, size_t n, Sink& sink) {
  data_.assign(held_);
  data_.append(p, n);
  held_.clear();
  for (size_t k = 0; k < starts_.size(); ++k) next_[k] = data_.find(starts_[k]);
  size_t i = 0;
  while (i < data_.size()) {
    if (in_line_) {
      i = collect(i, sink);
      continue;
    }
    // The nearest marker or prefix at or after i (on a tie the first in starts_, as the Python
    // regex's alternation). Positions found before are kept until passed: one scan per feed.
    size_t best = std::string::npos, which = 0;
    for (size_t k = 0; k < starts_.size(); ++k) {
      if (next_[k] != std::string::npos && next_[k] < i) next_[k] = data_.find(starts_[k], i);
      if (next_[k] < best) best = next_[k], which = k;
    }
    if (best == std::string::npos) {
      size_t keep = partial_start(i);
      out_.append(data_, i, keep - i);
      held_.assign(data_, keep, std::string::npos);
      break;
    }
    out_.append(data_, i, best - i);
    if (which == 0) {  // the marker: what came before it is out before it is counted
      flush_out(sink);
      sink.mark(++marks_);
      i = best + starts_[0].size();
    } else {
      in_line_ = true;  // collected from its prefix on
      line_.clear();
      i = best;
    }
  }
  flush_out(sink);
}

void Splitter::release(Sink& sink) {
  if (!held_.empty()) sink.out(held_.data(), held_.size());
  held_.clear();
}

void Splitter::finish(Sink& sink) {
  release(sink);
  if (in_line_) {  // no newline before the end: not one of the taken lines
    sink.out(line_.data(), line_.size());
    line_.clear();
    in_line_ = false;
  }
}

// Adds to the taken line up to its newline. A NUL (the marker's first byte: never in oneDNN's
// text) or a length past kMaxLine says the "line" was the user's: it goes out. A NUL is left to
// be looked at again (it may start the marker).
size_t Splitter::collect(size_t i, Sink& sink) {
  static const char kEnds[2] = {'\n', '\0'};
  size_t m = data_.find_first_of(kEnds, i, 2);
  bool found = m != std::string::npos;
  bool nul = found && data_[m] == '\0';
  size_t end = !found ? data_.size() : nul ? m : m + 1;
  if (nul || line_.size() + (end - i) > kMaxLine) {
    out_.append(line_);
    out_.append(data_, i, end - i);
    line_.clear();
    in_line_ = false;
  } else {
    line_.append(data_, i, end - i);
    if (found) {
      in_line_ = false;
      sink.line(line_, marks_);
      line_.clear();
    }
  }
  return end;
}

// Where the longest end of data_[i:] that could begin the marker or a prefix starts.
size_t Splitter::partial_start(size_t i) const {
  size_t n = data_.size();
  size_t c = std::max(i, n >= longest_ ? n - longest_ + 1 : size_t(0));
  for (; c < n; ++c) {
    size_t tail = n - c;
    for (const std::string& s : starts_)
      if (s.size() >= tail && s.compare(0, tail, data_, c, tail) == 0) return c;
  }
  return n;
}

void Splitter::flush_out(Sink& sink) {
  if (!out_.empty()) sink.out(out_.data(), out_.size());
  out_.clear();
}

void split(const std::vector<std::string>& chunks, const std::vector<std::string>& prefixes,
           const std::string& marker, std::string* passthrough, std::vector<std::string>* lines,
           std::vector<uint64_t>* segments) {
  Splitter s(prefixes, marker);
  Collect c;
  for (const std::string& chunk : chunks) {
    if (chunk.empty())
      s.release(c);
    else
      s.feed(chunk.data(), chunk.size(), c);
  }
  s.finish(c);
  *passthrough = std::move(c.passthrough);
  *lines = std::move(c.lines);
  *segments = std::move(c.segments);
}

// --- the reader thread ---

namespace {

struct Stored {
  std::string line;
  uint64_t segment;
};

// One tap: its descriptors, its splitter and what the reader hands to the caller. Shared by the
// reader thread and the module state, so a reader left forwarding in the background keeps it.
class Tap final : public Splitter::Sink {
 public:
  enum class OnWake { kIgnore, kHandoff, kForward };

  Tap(Fd r, Fd o, Fd wr, Fd ww, std::vector<std::string> prefixes, std::string marker, std::string keep)
      : read_fd(std::move(r)), out_fd(std::move(o)), wake_r(std::move(wr)), wake_w(std::move(ww)),
        splitter_(std::move(prefixes), std::move(marker)),
        keep_(std::move(keep)), buf_(kChunk) {}

  void run() noexcept;

  // Reader -> caller state, guarded by mu.
  std::mutex mu;
  std::condition_variable cv;
  uint64_t marks = 0;
  std::vector<Stored> stored;
  size_t stored_bytes = 0;
  uint64_t dropped = 0;
  std::string write_error, failure;
  bool eof = false;        // the pipe ended (no writer left)
  bool exited = false;     // run() is done with every member but mu/cv
  OnWake on_wake = OnWake::kIgnore;
  bool committed = false;  // the reader is letting go of the read end for a handoff
  bool abandoned = false;  // stop() gave up waiting: a committed reader drains to the end itself

  Fd read_fd, out_fd, wake_r, wake_w;

 private:
  void out(const char* data, size_t n) override;
  void line(const std::string& l, uint64_t segment) override;
  void mark(uint64_t m) override;
  bool let_go();
  void read_loop();
  void raw_drain();

  Splitter splitter_;
  std::string keep_;
  std::vector<char> buf_;
  bool discarding_ = false;  // reader only: a write to stdout failed; output is dropped since
};

void Tap::out(const char* data, size_t n) {
  if (discarding_) return;
  if (!write_all(out_fd.get(), data, n)) {
    int e = errno;  // keep draining: the writer must never block on a stdout we cannot use
    discarding_ = true;
    std::lock_guard<std::mutex> lk(mu);
    write_error = std::strerror(e);
  }
}

void Tap::line(const std::string& l, uint64_t segment) {
  if (!keep_.empty() && l.find(keep_) == std::string::npos) return;  // taken, not wanted
  std::lock_guard<std::mutex> lk(mu);
  if (stored.size() >= kMaxStoredLines || stored_bytes + l.size() > kMaxStoredBytes) {
    ++dropped;
    return;
  }
  try {
    stored.push_back({l, segment});
    stored_bytes += l.size();
  } catch (const std::bad_alloc&) {
    ++dropped;
  }
}

void Tap::mark(uint64_t m) {
  std::lock_guard<std::mutex> lk(mu);
  marks = m;
  cv.notify_all();
}

// stop() woke us: fd 1 is the caller's again, so only a process started during the tap can
// still write. True when the read end is to be handed over (everything read so far is out).
bool Tap::let_go() {
  char c;
  (void)!::read(wake_r.get(), &c, 1);
  if (poll_now(read_fd.get()) & POLLHUP) return false;  // no writer left: the end is a read away
  {
    std::lock_guard<std::mutex> lk(mu);
    if (on_wake != OnWake::kHandoff) return false;
    committed = true;
  }
  splitter_.finish(*this);
  return true;
}

void Tap::read_loop() {
  int fd = read_fd.get();
  pollfd fds[2] = {{fd, POLLIN, 0}, {wake_r.get(), POLLIN, 0}};
  for (;;) {
    if (::poll(fds, 2, -1) < 0) {
      if (errno == EINTR) continue;
      throw std::runtime_error(std::string("poll: ") + std::strerror(errno));
    }
    if (fds[0].revents) {
      ssize_t k = ::read(fd, buf_.data(), buf_.size());
      if (k < 0 && (errno == EINTR || errno == EAGAIN)) continue;
      if (k <= 0) {  // the end (or an unreadable pipe: the same to us)
        splitter_.finish(*this);
        std::lock_guard<std::mutex> lk(mu);
        eof = true;
        cv.notify_all();
        return;
      }
      splitter_.feed(buf_.data(), size_t(k), *this);
      if (splitter_.holding() && !(poll_now(fd, kHoldMs) & (POLLIN | POLLHUP))) splitter_.release(*this);
      if (fds[1].fd >= 0) {  // pace: only stop() cuts the wait short
        pollfd w{fds[1].fd, POLLIN, 0};
        while (::poll(&w, 1, kPaceMs) < 0 && errno == EINTR) {
        }
      } else {
        std::this_thread::sleep_for(std::chrono::milliseconds(kPaceMs));
      }
    }
    if (fds[1].revents) {
      if (let_go()) return;
      fds[1].fd = -1;  // not woken again: read on to the pipe's end
    }
  }
}

// After a failure of the splitter: everything else passes through as it is, to the end.
void Tap::raw_drain() {
  for (;;) {
    ssize_t k = ::read(read_fd.get(), buf_.data(), buf_.size());
    if (k < 0 && (errno == EINTR || errno == EAGAIN)) continue;
    if (k <= 0) break;
    out(buf_.data(), size_t(k));
  }
  std::lock_guard<std::mutex> lk(mu);
  eof = true;
}

void Tap::run() noexcept {
#ifdef __linux__
  pthread_setname_np(pthread_self(), "warmprof-tap");
#endif
  try {
    read_loop();
  } catch (const std::exception& e) {  // the buffers are sized up front: not expected
    {
      std::lock_guard<std::mutex> lk(mu);
      failure = e.what();
      cv.notify_all();
    }
    raw_drain();
  }
  // Checked and `exited` set under one lock: either stop() sees the reader done, or the reader
  // sees that stop() gave up on a handoff and forwards the rest itself (else a late writer
  // would fill the pipe and block forever on a read end nobody reads).
  std::unique_lock<std::mutex> lk(mu);
  if (committed && abandoned && !eof) {
    lk.unlock();
    raw_drain();
    lk.lock();
  }
  exited = true;
  cv.notify_all();
}

// Module state: one tap at a time; `tap` stays after stop() so take() can read its end.
struct State {
  std::mutex mu;
  std::shared_ptr<Tap> tap;
  std::thread thread;
};
// Never destroyed: a joinable std::thread's destructor calls std::terminate, and exit() may run
// while a reader is on (a process forked during the tap that exits normally, an exit mid-tap).
State& state() {
  static State* s = new State;
  return *s;
}

std::shared_ptr<Tap> current() {
  std::lock_guard<std::mutex> g(state().mu);
  return state().tap;
}

// Starts a thread with every signal blocked: signals are the interpreter's main thread's.
template <class F>
std::thread quiet_thread(F&& f) {
  sigset_t all, old;
  sigfillset(&all);
  pthread_sigmask(SIG_SETMASK, &all, &old);
  try {
    std::thread t(std::forward<F>(f));
    pthread_sigmask(SIG_SETMASK, &old, nullptr);
    return t;
  } catch (...) {
    pthread_sigmask(SIG_SETMASK, &old, nullptr);
    throw;
  }
}

}  // namespace

std::string start(int read_fd, int out_fd, const std::vector<std::string>& prefixes,
                  const std::string& marker, const std::string& keep) {
  Fd r(read_fd), o(out_fd);
  State& st = state();
  std::lock_guard<std::mutex> g(st.mu);
  if (st.thread.joinable()) return "another stdout tap is running";
  int w[2];
  if (::pipe(w) != 0) return std::string("cannot make the reader's wake pipe: ") + std::strerror(errno);
  Fd wake_r(w[0]), wake_w(w[1]);
  // Not inherited: a process started during the tap must hold nothing of ours but fd 1.
  ::fcntl(w[0], F_SETFD, FD_CLOEXEC);
  ::fcntl(w[1], F_SETFD, FD_CLOEXEC);
  try {
    auto tap = std::make_shared<Tap>(std::move(r), std::move(o), std::move(wake_r), std::move(wake_w),
                                     prefixes, marker, keep);
    st.thread = quiet_thread([tap] { tap->run(); });
    st.tap = std::move(tap);
  } catch (const std::exception& e) {
    return std::string("cannot start the stdout reader: ") + e.what();
  }
  return "";
}

bool wait_mark(uint64_t count, double timeout_s) {
  std::shared_ptr<Tap> tap = current();
  if (!tap) return false;
  std::unique_lock<std::mutex> lk(tap->mu);
  return tap->cv.wait_for(lk, seconds(timeout_s),
                          [&] { return tap->marks >= count || tap->exited || !tap->failure.empty(); }) &&
         tap->marks >= count;
}

Taken take() {
  Taken t;
  std::shared_ptr<Tap> tap = current();
  if (!tap) return t;
  std::vector<Stored> stored;
  {
    std::lock_guard<std::mutex> lk(tap->mu);
    stored.swap(tap->stored);
    tap->stored_bytes = 0;
    t.write_error = tap->write_error;
    t.dropped = tap->dropped;
    t.failure = tap->failure;
  }
  t.lines.reserve(stored.size());
  t.segments.reserve(stored.size());
  for (Stored& s : stored) {
    t.lines.push_back(std::move(s.line));
    t.segments.push_back(s.segment);
  }
  return t;
}

Stopped stop(double grace_s, double busy_s) {
  State& st = state();
  std::lock_guard<std::mutex> g(st.mu);
  if (!st.thread.joinable()) return {"none", -1};
  std::shared_ptr<Tap> tap = st.tap;
  std::unique_lock<std::mutex> lk(tap->mu);
  if (!tap->cv.wait_for(lk, seconds(grace_s), [&] { return tap->eof || tap->exited; })) {
    tap->on_wake = Tap::OnWake::kHandoff;  // a writer outlives fd 1's hand-back
    char c = 1;
    (void)!::write(tap->wake_w.get(), &c, 1);
  }
  if (!tap->cv.wait_for(lk, seconds(busy_s), [&] { return tap->exited; })) {
    // Stuck writing to a stdout that does not take bytes: it goes on to the pipe's end alone.
    if (!tap->committed) tap->on_wake = Tap::OnWake::kForward;
    tap->abandoned = true;
    lk.unlock();
    st.thread.detach();
    return {"busy", -1};
  }
  bool handoff = tap->committed && !tap->eof;
  lk.unlock();
  st.thread.join();
  int fd = handoff ? tap->read_fd.release() : -1;
  tap->read_fd.reset();
  tap->out_fd.reset();
  tap->wake_r.reset();
  tap->wake_w.reset();
  return {handoff ? "handoff" : "ended", fd};
}

std::string forward(int read_fd, int out_fd) {
  Fd r(read_fd), o(out_fd);
  try {
    std::vector<char> buf(kChunk);  // allocated here: nothing in the thread can throw
    quiet_thread([r = std::move(r), o = std::move(o), buf = std::move(buf)]() mutable {
      bool discarding = false;
      for (;;) {
        ssize_t k = ::read(r.get(), buf.data(), buf.size());
        if (k < 0 && (errno == EINTR || errno == EAGAIN)) continue;
        if (k <= 0) return;
        if (!discarding) discarding = !write_all(o.get(), buf.data(), size_t(k));
      }
    }).detach();
  } catch (const std::exception& e) {
    return std::string("cannot start a forwarding thread: ") + e.what();
  }
  return "";
}

}  // namespace warmprof::fd_tap
