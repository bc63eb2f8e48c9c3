#include "core/stdio_tap.h"

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <new>

#include <pthread.h>

#include <unistd.h>

#include "core/causes.h"
#include "core/clock.h"
#include "core/fd_tap.h"
#include "core/recorder.h"

namespace warmprof::stdio_tap {

// --- the filter ---

void Filter::feed(const char* p, size_t n, Sink& sink) {
  std::string data;
  data.reserve(held_.size() + n);
  data.append(held_).append(p, n);
  held_.clear();
  size_t i = 0;
  while (i < data.size()) {
    if (in_line_) {
      size_t nl = data.find('\n', i);
      if (nl == std::string::npos) {
        line_.append(data, i, std::string::npos);
        if (line_.size() > kMaxLine) {  // no oneDNN line is this long: the user's text
          sink.out(line_.data(), line_.size());
          line_.clear();
          in_line_ = false;
        }
        return;
      }
      line_.append(data, i, nl - i);
      sink.line(line_);
      line_.clear();
      in_line_ = false;
      i = nl + 1;
      continue;
    }
    // The earliest prefix from i: at a line's start, or after a partial line of the user's.
    size_t at = std::string::npos;
    for (const std::string& pre : prefixes_) {
      if (pre.empty()) continue;
      size_t k = data.find(pre, i);
      if (k < at) at = k;
    }
    if (at != std::string::npos) {
      if (at > i) sink.out(data.data() + i, at - i);
      in_line_ = true;
      i = at;
      continue;
    }
    // No prefix: all goes out but an end long enough that may be the start of one.
    size_t keep = 0;
    for (const std::string& pre : prefixes_)
      for (size_t len = std::min(pre.size() - 1, data.size() - i); len >= kMinHeld && len > keep; --len)
        if (data.compare(data.size() - len, len, pre, 0, len) == 0) {
          keep = len;
          break;
        }
    if (data.size() - keep > i) sink.out(data.data() + i, data.size() - keep - i);
    held_.assign(data, data.size() - keep, keep);
    return;
  }
}

void Filter::finish(Sink& sink) {
  if (in_line_ && !line_.empty()) sink.out(line_.data(), line_.size());
  if (!held_.empty()) sink.out(held_.data(), held_.size());
  line_.clear();
  held_.clear();
  in_line_ = false;
}

Creation parse(const std::string& line) {
  // onednn_verbose,v1,[timestamp,]primitive,create:cache_miss,cpu,matmul,impl,...,time
  Creation c;
  size_t at = line.find(",create:");
  if (at == std::string::npos) return c;
  size_t o = at + 8, oe = line.find(',', o);
  if (oe == std::string::npos) return c;
  c.outcome = line.substr(o, oe - o);
  size_t ke = line.find(',', oe + 1);  // engine kind (cpu), then the primitive
  if (ke != std::string::npos) {
    size_t pe = line.find(',', ke + 1);
    if (pe != std::string::npos) c.primitive = line.substr(ke + 1, pe - ke - 1);
  }
  size_t last = line.rfind(',');
  const char* s = line.c_str() + last + 1;
  char* end = nullptr;
  errno = 0;
  double ms = std::strtod(s, &end);
  if (end != s && errno == 0 && ms >= 0.0 && ms < 1e9) c.ms = ms;
  return c;
}

namespace {

struct Collect : Filter::Sink {
  std::string out_;
  std::vector<std::string> lines_;
  void out(const char* d, size_t n) override { out_.append(d, n); }
  void line(const std::string& l) override { lines_.push_back(l); }
};

#ifdef __GLIBC__
struct Tap : Filter::Sink {
  explicit Tap(std::vector<std::string> p) : filter(std::move(p)) {}
  Filter filter;
  FILE* orig = nullptr;
  FILE* mine = nullptr;
  uint8_t cause = 0;
  int fd = 1;
  Stats st;  // guarded by the FILE's lock (writes) and g_mu (start/stop/stats)

  void out(const char* d, size_t n) override {
    if (!st.write_error.empty()) return;
    if (fd_tap::write_all(fd, d, n)) {
      st.passed += n;
    } else {
      st.write_error = std::strerror(errno);
    }
  }
  void line(const std::string& l) override {
    ++st.lines;
    Creation c = parse(l);
    if (c.outcome == "cache_hit") {
      ++st.hits;
    } else if (c.outcome == "cache_miss" && c.ms >= 0.0) {
      ++st.misses;
      st.miss_ms += c.ms;
      uint64_t end = clock::ticks();
      uint64_t begin = clock::from_ns(clock::to_ns(end) - int64_t(c.ms * 1e6));
      uint32_t name = recorder::intern("onednn:" + (c.primitive.empty() ? std::string("primitive") : c.primitive));
      recorder::append(kBegin, cause, name, 0, begin);
      recorder::append(kEnd, cause, name, 0, end);
    }
  }
};

Tap* g_tap = nullptr;  // never freed while stdout may still point at its FILE
std::mutex g_mu;
// A fork child gets the mutex as some other thread may have held it at the fork: made anew there.
void remake_mutex() { new (&g_mu) std::mutex(); }

ssize_t cookie_write(void* cookie, const char* buf, size_t size) {
  static_cast<Tap*>(cookie)->filter.feed(buf, size, *static_cast<Tap*>(cookie));
  return ssize_t(size);
}
#endif

}  // namespace

std::string start(const std::vector<std::string>& prefixes, uint8_t cause) {
#ifdef __GLIBC__
  static const int at_fork = pthread_atfork(nullptr, nullptr, remake_mutex);
  (void)at_fork;
  std::lock_guard<std::mutex> lk(g_mu);
  if (g_tap != nullptr && g_tap->mine != nullptr && stdout == g_tap->mine) return "a C stdout tap is on already";
  if (cause >= kNumCauses) return "cause out of range";
  if (stdout == nullptr) return "the process has no C stdout";
  auto* t = new Tap(prefixes);
  t->cause = cause;
  t->fd = fileno(stdout);
  if (t->fd < 0) {
    delete t;
    return "C stdout has no file descriptor";
  }
  cookie_io_functions_t io{};
  io.write = cookie_write;
  FILE* f = fopencookie(t, "w", io);
  if (f == nullptr) {
    std::string why = std::string("fopencookie failed: ") + std::strerror(errno);
    delete t;
    return why;
  }
  setvbuf(f, nullptr, _IOLBF, 64 << 10);  // a line at a time (oneDNN's, as it is printed), or 64 KiB
  f->_fileno = t->fd;                     // fileno(stdout), isatty(fileno(stdout)) still answer for fd 1
  std::fflush(stdout);
  t->orig = stdout;
  t->mine = f;
  stdout = f;
  g_tap = t;  // an earlier, stopped tap's FILE stays allocated: a thread may still hold its pointer
  return "";
#else
  (void)prefixes;
  (void)cause;
  return "needs glibc (fopencookie and an assignable stdout)";
#endif
}

void stop() {
#ifdef __GLIBC__
  std::lock_guard<std::mutex> lk(g_mu);
  if (g_tap == nullptr || g_tap->mine == nullptr || stdout != g_tap->mine) return;
  std::fflush(g_tap->mine);
  flockfile(g_tap->mine);
  g_tap->filter.finish(*g_tap);
  funlockfile(g_tap->mine);
  stdout = g_tap->orig;
#endif
}

Stats stats() {
#ifdef __GLIBC__
  std::lock_guard<std::mutex> lk(g_mu);
  if (g_tap == nullptr || g_tap->mine == nullptr) return {};
  flockfile(g_tap->mine);
  Stats s = g_tap->st;
  funlockfile(g_tap->mine);
  s.on = stdout == g_tap->mine;
  return s;
#else
  return {};
#endif
}

void split(const std::vector<std::string>& chunks, const std::vector<std::string>& prefixes,
           std::string* passthrough, std::vector<std::string>* lines) {
  Filter f(prefixes);
  Collect c;
  for (const std::string& ch : chunks) f.feed(ch.data(), ch.size(), c);
  f.finish(c);
  *passthrough = std::move(c.out_);
  *lines = std::move(c.lines_);
}

}  // namespace warmprof::stdio_tap
