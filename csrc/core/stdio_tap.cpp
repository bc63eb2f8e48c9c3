#include "core/stdio_tap.h"

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <mutex>
#include <new>

#include <pthread.h>

#include <unistd.h>

#include "core/causes.h"
#include "core/clock.h"
#include "core/fd_tap.h"
#include "core/recorder.h"

namespace warmprof::stdio_tap {

// Per thread: oneDNN prints a creation's line on the thread that made it, which the tap's line() runs on.
thread_local uint64_t t_miss_ns = 0;

uint64_t miss_ns() { return t_miss_ns; }

// --- the filter ---

namespace {

// "v<digits>," at k: oneDNN's version tag after its prefix ("onednn_verbose,v1,...").
bool version_tag_at(const std::string& d, size_t k) {
  if (k >= d.size() || d[k] != 'v') return false;
  size_t j = k + 1;
  while (j < d.size() && std::isdigit(static_cast<unsigned char>(d[j]))) ++j;
  return j > k + 1 && j < d.size() && d[j] == ',';
}

// The rest of d from k could still become a version tag (the data ran out before it could tell).
bool maybe_version_tag(const std::string& d, size_t k) {
  if (k >= d.size()) return true;
  if (d[k] != 'v') return false;
  for (size_t j = k + 1; j < d.size(); ++j) {
    if (d[j] == ',') return false;  // complete: version_tag_at decided it
    if (!std::isdigit(static_cast<unsigned char>(d[j]))) return false;
  }
  return true;
}

}  // namespace

size_t Filter::find_start(const std::string& data, size_t i, size_t* undecided) const {
  auto starts_line = [&](size_t k) { return k == 0 ? line_start_ : data[k - 1] == '\n'; };
  size_t best = std::string::npos;
  *undecided = std::string::npos;
  for (const std::string& pre : prefixes_) {
    if (pre.empty()) continue;
    for (size_t k = data.find(pre, i); k != std::string::npos && k < best; k = data.find(pre, k + 1)) {
      size_t after = k + pre.size();
      if (starts_line(k) || version_tag_at(data, after)) {
        best = k;
        break;
      }
      if (maybe_version_tag(data, after)) *undecided = std::min(*undecided, k);
    }
    // the data's end is a prefix's beginning: undecided until the rest comes
    for (size_t len = std::min(pre.size() - 1, data.size() - i); len > 0; --len)
      if (data.compare(data.size() - len, len, pre, 0, len) == 0) {
        *undecided = std::min(*undecided, data.size() - len);
        break;
      }
  }
  return best;
}

bool Filter::feed(const char* p, size_t n, bool cut, Sink& sink) {
  std::string data;
  data.reserve(held_.size() + n);
  data.append(held_).append(p, n);
  held_.clear();
  bool ok = true;
  size_t i = 0;
  while (i < data.size()) {
    if (in_line_) {
      size_t nl = data.find('\n', i);
      if (nl == std::string::npos) {
        line_.append(data, i, std::string::npos);
        if (line_.size() > kMaxLine) {  // no oneDNN line is this long: the user's text
          ok = sink.out(line_.data(), line_.size()) && ok;
          line_.clear();
          in_line_ = false;
          line_start_ = false;
        }
        return ok;
      }
      line_.append(data, i, nl - i);
      sink.line(line_);
      line_.clear();
      in_line_ = false;
      i = nl + 1;
      continue;
    }
    size_t undecided = std::string::npos;
    size_t at = find_start(data, i, &undecided);
    if (at != std::string::npos) {
      if (at > i) ok = sink.out(data.data() + i, at - i) && ok;
      in_line_ = true;
      i = at;
      continue;
    }
    // No taken line from i: all of it goes out, but for a cut write's end that may begin one.
    size_t keep_from = cut && undecided != std::string::npos ? undecided : data.size();
    if (keep_from > i) ok = sink.out(data.data() + i, keep_from - i) && ok;
    if (keep_from > 0) line_start_ = data[keep_from - 1] == '\n';
    held_.assign(data, keep_from, std::string::npos);
    return ok;
  }
  if (!data.empty()) line_start_ = data.back() == '\n';
  return ok;
}

void Filter::finish(Sink& sink) {
  if (in_line_ && !line_.empty()) sink.out(line_.data(), line_.size());
  if (!held_.empty()) sink.out(held_.data(), held_.size());
  if (in_line_ || !held_.empty()) line_start_ = false;
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
  bool out(const char* d, size_t n) override {
    out_.append(d, n);
    return true;
  }
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
  std::unique_ptr<char[]> buffer;  // the FILE's (kBuffer bytes: a full one is a cut write)
  int err = 0;                     // errno of the last failed passthrough in the current write

  bool out(const char* d, size_t n) override {
    if (fd_tap::write_all(fd, d, n)) {
      st.passed += n;
      return true;
    }
    err = errno;
    if (st.write_error.empty()) st.write_error = std::strerror(err);  // the first, said in the record
    return false;
  }
  void line(const std::string& l) override {
    ++st.lines;
    Creation c = parse(l);
    if (c.outcome == "cache_hit") {
      ++st.hits;
    } else if (c.outcome == "cache_miss" && c.ms >= 0.0) {
      ++st.misses;
      st.miss_ms += c.ms;
      t_miss_ns += uint64_t(c.ms * 1e6);
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

// glibc writes a full buffer where a line runs past it (and large writes in whole buffers): only such a
// write may end mid-line. A failed passthrough is a failed write (ferror, printf's -1), as it was.
ssize_t cookie_write(void* cookie, const char* buf, size_t size) {
  auto* t = static_cast<Tap*>(cookie);
  bool cut = size >= kBuffer && size % kBuffer == 0;
  t->err = 0;
  if (!t->filter.feed(buf, size, cut, *t)) {
    errno = t->err ? t->err : EIO;
    return -1;
  }
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
  t->buffer.reset(new char[kBuffer]);
  setvbuf(f, t->buffer.get(), _IOLBF, kBuffer);  // a line at a time (oneDNN's, as it is printed)
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
  // Under the FILE's lock: no thread writes through the filter between its last flush and the swap.
  flockfile(g_tap->mine);
  stdout = g_tap->orig;
  fflush_unlocked(g_tap->mine);
  g_tap->filter.finish(*g_tap);
  funlockfile(g_tap->mine);
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

void split(const std::vector<std::string>& chunks, const std::vector<bool>& cut,
           const std::vector<std::string>& prefixes, std::string* passthrough, std::vector<std::string>* lines) {
  Filter f(prefixes);
  Collect c;
  for (size_t i = 0; i < chunks.size(); ++i) f.feed(chunks[i].data(), chunks[i].size(), i < cut.size() && cut[i], c);
  f.finish(c);
  *passthrough = std::move(c.out_);
  *lines = std::move(c.lines_);
}

}  // namespace warmprof::stdio_tap
