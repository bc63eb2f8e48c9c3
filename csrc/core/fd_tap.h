// Tap of a pipe that stands in for stdout: a native reader thread takes lines that start with
// given prefixes (oneDNN's verbose lines) and writes every other byte on to the real stdout.
//
// Why native: the writer of the pipe may hold Python's GIL (a torch op while oneDNN prints, any
// C extension); a Python reader would need that GIL to drain the pipe, and a write past the
// pipe's capacity would then block forever. This reader never touches Python.
//
// Python-free. One tap at a time per process; python/warmprof/instruments/fd_capture.py owns
// the descriptors' plumbing (pipe, dup2 of fd 1) and calls these through _native.
#pragma once
#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

namespace warmprof::fd_tap {

// All of [p, p + n) to fd, resuming partial writes and waiting out a non-blocking fd that is full;
// false with errno set on failure.
bool write_all(int fd, const char* p, size_t n);

constexpr size_t kMaxLine = 64 << 10;        // longer than any oneDNN line: past it, the user's text
constexpr size_t kMaxStoredLines = 20000;    // taken lines kept until take(); past it, counted only
constexpr size_t kMaxStoredBytes = 16 << 20;

// The stream logic without descriptors or threads, the same as fd_capture.LineSplitter: a prefix
// is looked for anywhere in the stream (oneDNN's line may follow a partial line of the user's);
// the line runs to its newline; a NUL (the marker's first byte) or a length past kMaxLine says it
// was the user's text, and it is let through. The marker is removed and counted.
class Splitter {
 public:
  struct Sink {
    virtual void out(const char* data, size_t n) = 0;            // passthrough, in order
    virtual void line(const std::string& line, uint64_t marks) = 0;  // a taken line, markers before it
    virtual void mark(uint64_t marks) = 0;  // a marker was removed (the count so far)
    virtual ~Sink() = default;
  };

  Splitter(std::vector<std::string> prefixes, std::string marker);
  void feed(const char* data, size_t n, Sink& sink);
  // The pipe is empty: a held end cannot be the start of a prefix or the marker (each is written
  // whole by one write() of at most PIPE_BUF bytes, which a pipe keeps together), so it goes out.
  void release(Sink& sink);
  // End of the stream: the held end and an unfinished line go out.
  void finish(Sink& sink);
  bool holding() const { return !held_.empty(); }

 private:
  size_t collect(size_t i, Sink& sink);
  size_t partial_start(size_t i) const;
  void flush_out(Sink& sink);

  std::vector<std::string> starts_;  // the marker first, then the prefixes
  std::vector<size_t> next_;         // per start: where it next occurs in data_ (npos: nowhere)
  size_t longest_ = 0;
  std::string data_;   // held end + the current chunk (reused: no allocation per read)
  std::string held_;   // a chunk's end that may begin a prefix or the marker
  std::string line_;   // the taken line being collected (in_line_)
  std::string out_;    // passthrough gathered within one feed, written together
  bool in_line_ = false;
  uint64_t marks_ = 0;
};

// Test-only: runs the splitter over chunks; an empty chunk stands for "the pipe is empty here"
// (release). Returns the passthrough, the taken lines and the marks seen before each.
void split(const std::vector<std::string>& chunks, const std::vector<std::string>& prefixes,
           const std::string& marker, std::string* passthrough, std::vector<std::string>* lines,
           std::vector<uint64_t>* segments);

// Starts the reader on read_fd (the pipe's read end), writing passthrough to out_fd. Takes both
// descriptors whatever the outcome. Taken lines containing `keep` (all, if empty) are stored.
// Returns "" or why it could not start.
std::string start(int read_fd, int out_fd, const std::vector<std::string>& prefixes,
                  const std::string& marker, const std::string& keep);

// Blocks until the reader has removed `count` markers (true), or it stopped or the timeout passed.
bool wait_mark(uint64_t count, double timeout_s);

struct Taken {
  std::vector<std::string> lines;
  std::vector<uint64_t> segments;  // per line: markers removed before it
  std::string write_error;         // the first failed write to stdout ("" if none): output discarded since
  uint64_t dropped = 0;            // stored-line bound reached: taken lines not kept, since start
  std::string failure;             // the reader failed and passed the rest through unfiltered
};
// The stored lines (moved out) and the reader's state so far.
Taken take();

// After the caller gave fd 1 back: waits up to grace_s for the pipe's end. If writers remain (a
// process started during the tap inherited the pipe), the reader lets go and the read end is
// handed to the caller ("handoff", fd >= 0), with everything read so far written out. If the
// reader is stuck longer than busy_s (stdout does not take bytes), it is left forwarding to the
// pipe's end in the background ("busy"). Else "ended"; "none" without a tap.
struct Stopped {
  std::string state;
  int fd = -1;
};
Stopped stop(double grace_s, double busy_s);

// Raw forwarding read_fd -> out_fd in a detached thread until the pipe ends (when no helper
// process could take a handed-off read end). Takes both descriptors. "" or why not.
std::string forward(int read_fd, int out_fd);

}  // namespace warmprof::fd_tap
