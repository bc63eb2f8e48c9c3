#include "backends/cuda_image.h"

#include <fcntl.h>
#include <unistd.h>

#include <cstdint>
#include <cstring>

namespace warmprof::backends::cuda_image {

namespace {

// Fatbin layout (not in the toolkit's public headers; as cuobjdump reads it): a 16-byte header
// {u32 magic, u16 version, u16 header size, u64 size of the entries}, then entries one after
// another, each {u16 kind, u16, u32 entry header size, u64 payload size, ..., u32 arch at +28}
// followed by its payload. Kind 1 is PTX, 2 (and 0x10 in newer toolkits) an ELF cubin.
constexpr uint32_t kFatbinMagic = 0xBA55ED50u;
// fatbinary_section.h's FATBINC_MAGIC: the __fatBinC_Wrapper_t {int magic, int version, const
// unsigned long long* data, void*} that nvcc embeds and cuModuleLoadFatBinary accepts; `data`
// points at the fatbin. The same magic also opens a relocatable fatbin container, whose u16
// version 1 and u16 header size 16 read as 0x00100001 where a wrapper has its version 1 or 2.
constexpr uint32_t kWrapperMagic = 0x466243B1u;
constexpr uint16_t kEntryPtx = 1, kEntryElf = 2, kEntryElfAlt = 0x10;
constexpr int kMaxEntries = 4096;  // a fatbin of one module holds a few dozen
constexpr int kMaxLeadingSpace = 4096;

class Reader {
 public:
  static Reader memory(const void* p, size_t size) { return Reader(static_cast<const unsigned char*>(p), size, -1); }
  static Reader file(int fd) { return Reader(nullptr, 0, fd); }

  bool read(uint64_t off, void* out, size_t n) const {
    if (fd_ >= 0) return pread(fd_, out, n, off_t(off)) == ssize_t(n);
    if (base_ == nullptr) return false;
    if (size_ != 0 && (off > size_ || n > size_ - off)) return false;
    std::memcpy(out, base_ + off, n);
    return true;
  }
  // One byte at a time: text is compared up to its first mismatch (its NUL at the latest), so a
  // short string of unknown size is never read past its end.
  int byte(uint64_t off) const {
    unsigned char c = 0;
    return read(off, &c, 1) ? c : -1;
  }
  bool in_memory() const { return fd_ < 0; }

 private:
  Reader(const unsigned char* base, size_t size, int fd) : base_(base), size_(size), fd_(fd) {}
  const unsigned char* base_;
  size_t size_;
  int fd_;
};

template <typename T>
T load(const unsigned char* p) {
  T v;
  std::memcpy(&v, p, sizeof(T));
  return v;
}

bool text_at(const Reader& r, uint64_t off, const char* word) {
  for (size_t i = 0; word[i] != 0; ++i)
    if (r.byte(off + i) != static_cast<unsigned char>(word[i])) return false;
  return true;
}

bool is_ptx(const Reader& r) {
  uint64_t off = 0;
  for (int c = r.byte(0); off < kMaxLeadingSpace && (c == ' ' || c == '\t' || c == '\n' || c == '\r');
       c = r.byte(++off)) {
  }
  return text_at(r, off, "//") || text_at(r, off, "/*") || text_at(r, off, ".version");
}

// A fatbin's entries against the device: a cubin it runs, else PTX at or below its arch.
Kind fatbin(const Reader& r, uint64_t at, int arch) {
  unsigned char h[16];
  if (!r.read(at, h, sizeof(h))) return Kind::kUnknown;
  const uint64_t header = load<uint16_t>(h + 6);
  const uint64_t size = load<uint64_t>(h + 8);
  if (size > UINT64_MAX - at - header) return Kind::kUnknown;  // a corrupt size: no end to trust
  const uint64_t end = at + header + size;
  bool cubin_any = false, cubin_here = false, ptx_any = false, ptx_here = false;
  uint64_t off = at + header;
  for (int i = 0; i < kMaxEntries && off + 32 <= end; ++i) {
    unsigned char e[32];
    if (!r.read(off, e, sizeof(e))) break;
    const uint16_t kind = load<uint16_t>(e);
    const uint32_t entry_header = load<uint32_t>(e + 4);
    const uint64_t payload = load<uint64_t>(e + 8);
    const int entry_arch = int(load<uint32_t>(e + 28));
    // Not a layout we know, or an entry running past the fatbin's end: stop reading.
    if (entry_header < 32 || entry_header > end - off || payload > end - off - entry_header) break;
    if (kind == kEntryElf || kind == kEntryElfAlt) {
      cubin_any = true;
      cubin_here |= arch > 0 && entry_arch / 10 == arch / 10 && entry_arch <= arch;
    } else if (kind == kEntryPtx) {
      ptx_any = true;
      ptx_here |= arch > 0 && entry_arch <= arch;
    }
    off += entry_header + payload;
  }
  if (arch <= 0) return cubin_any ? Kind::kFatbinCubin : ptx_any ? Kind::kFatbinPtx : Kind::kUnknown;
  if (cubin_here) return Kind::kFatbinCubin;
  return ptx_here ? Kind::kFatbinPtx : Kind::kUnknown;
}

Kind sniff(const Reader& r, int arch) {
  unsigned char m[4];
  for (int i = 0; i < 4; ++i) {
    const int c = r.byte(uint64_t(i));
    if (c < 0) return Kind::kUnknown;
    m[i] = static_cast<unsigned char>(c);
    if (c == 0) return Kind::kUnknown;  // none of the magics holds a NUL; text this short is not PTX
  }
  if (m[0] == 0x7f && m[1] == 'E' && m[2] == 'L' && m[3] == 'F') return Kind::kCubin;
  const uint32_t magic = load<uint32_t>(m);
  if (magic == kFatbinMagic) return fatbin(r, 0, arch);
  if (magic == kWrapperMagic) {
    unsigned char w[16];
    if (!r.read(0, w, sizeof(w))) return Kind::kUnknown;
    const int32_t version = load<int32_t>(w + 4);
    if (version != 1 && version != 2) return fatbin(r, 0, arch);  // a relocatable container
    const void* data = load<const void*>(w + 8);
    if (!r.in_memory() || data == nullptr) return Kind::kUnknown;
    const Reader inner = Reader::memory(data, 0);
    unsigned char im[4];
    if (!inner.read(0, im, sizeof(im)) || load<uint32_t>(im) != kFatbinMagic) return Kind::kUnknown;
    return fatbin(inner, 0, arch);
  }
  return is_ptx(r) ? Kind::kPtx : Kind::kUnknown;
}

}  // namespace

Kind of_memory(const void* image, size_t size, int arch) {
  if (image == nullptr) return Kind::kUnknown;
  return sniff(Reader::memory(image, size), arch);
}

Kind of_file(const char* path, int arch) {
  if (path == nullptr) return Kind::kUnknown;
  const int fd = open(path, O_RDONLY | O_CLOEXEC);
  if (fd < 0) return Kind::kUnknown;
  const Kind k = sniff(Reader::file(fd), arch);
  close(fd);
  return k;
}

const char* name(Kind k) {
  switch (k) {
    case Kind::kCubin: return "cubin";
    case Kind::kPtx: return "ptx";
    case Kind::kFatbinCubin: return "fatbin(cubin)";
    case Kind::kFatbinPtx: return "fatbin(ptx)";
    default: return "unknown";
  }
}

}  // namespace warmprof::backends::cuda_image
