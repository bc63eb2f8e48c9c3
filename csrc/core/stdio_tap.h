// C stdout as a line filter (glibc): the process's `stdout` FILE is swapped for one of
// fopencookie's whose writes come here. Lines that begin with a given prefix (oneDNN's verbose
// lines, printed with printf by whatever copy of oneDNN the process loaded, torch's or one linked
// into an extension such as vLLM's) are taken out; every other byte goes on to the same file
// descriptor, unbuffered past the line. A taken creation line (",create:cache_miss,") becomes a
// span of the recorder on the thread that printed it: it ends when the line arrives and lasts the
// time oneDNN printed as its last field (its own measure of the creation).
//
// Why this and not fd_tap's pipe: `warmprof run` keeps it for a process's whole life, across fork
// (a fork child's FILE is its own copy) and exec (gone with the image), with no thread, no pipe a
// dead parent could leave without a reader, and fd 1 untouched (Python's own prints never pass
// here). glibc calls the write under the FILE's own lock, so the state needs no lock of its own.
//
// Python-free. One tap per process.
#pragma once
#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

namespace warmprof::stdio_tap {

constexpr size_t kMaxLine = 64 << 10;  // a taken line longer than this was the user's text: let through
constexpr size_t kBuffer = 64 << 10;   // the FILE's buffer: a write of a multiple of it may end mid-line

// The stream logic, without FILE or recorder (tests drive it with chunks). A line is taken when it
// starts with a prefix at a line's start, or after a partial line of the user's where the prefix is
// followed by oneDNN's version tag ("onednn_verbose,v1,": no user text looks like that). A write's end
// that may be the start of one is held only when the write may have been cut mid-line (`cut`: glibc
// flushed a full buffer); any other write goes out whole, so what the program flushed is out.
class Filter {
 public:
  struct Sink {
    virtual bool out(const char* data, size_t n) = 0;   // passthrough, in order; false: the write failed
    virtual void line(const std::string& line) = 0;     // a taken line, without its newline
    virtual ~Sink() = default;
  };
  explicit Filter(std::vector<std::string> prefixes) : prefixes_(std::move(prefixes)) {}
  bool feed(const char* data, size_t n, bool cut, Sink& sink);  // false: a passthrough write failed
  void finish(Sink& sink);  // the held end and an unfinished taken line go out

 private:
  // Where a taken line starts in data from i (npos: none); *undecided: a candidate at the end too short to tell
  size_t find_start(const std::string& data, size_t i, size_t* undecided) const;
  std::vector<std::string> prefixes_;
  std::string line_;        // a taken line being collected
  bool in_line_ = false;
  bool line_start_ = true;  // the byte before the next one was a newline (or there was none)
  std::string held_;        // the end of a cut write, which may begin a taken line
};

// A creation line's parts: outcome ("cache_miss"/"cache_hit", "" if not a creation line), the
// primitive kind and the creation time in ms (negative if unreadable).
struct Creation {
  std::string outcome;
  std::string primitive;
  double ms = -1.0;
};
Creation parse(const std::string& line);

// Swaps stdout; taken creation misses are recorded with `cause`, named "onednn:<primitive>".
// "" or why not (not glibc; a tap already on; fopencookie failed).
std::string start(const std::vector<std::string>& prefixes, uint8_t cause);
void stop();  // stdout back (flushed first); no-op without a tap

struct Stats {
  bool on = false;
  uint64_t lines = 0;      // taken lines
  uint64_t misses = 0;     // creation lines "cache_miss" (each recorded as a span)
  uint64_t hits = 0;       // creation lines "cache_hit"
  double miss_ms = 0.0;    // sum of the misses' creation times
  uint64_t passed = 0;     // bytes let through
  std::string write_error; // the first failed write through ("" if none)
};
Stats stats();

// The misses' creation times so far (ns) on the calling thread (oneDNN prints a creation's line on the thread
// that made it): a thread-local read, no lock (a clock read's cost: read around a call to see what oneDNN
// created inside it, on that call's thread only).
uint64_t miss_ns();

// Test-only: the filter over chunks (each one write; `cut` says which may end mid-line); returns the
// passthrough and the taken lines.
void split(const std::vector<std::string>& chunks, const std::vector<bool>& cut,
           const std::vector<std::string>& prefixes, std::string* passthrough, std::vector<std::string>* lines);

}  // namespace warmprof::stdio_tap
