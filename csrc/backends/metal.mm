// The Metal backend (Apple only; Objective-C++ compiled with -fobjc-arc: ARC owns every Metal
// object here, nothing is retained or released by hand). See metal.h for what the probe measures.
//
// Written for macOS 14+ and Xcode's clang; every API used exists since macOS 10.15 (GPUStartTime,
// GPUEndTime) or earlier. Not yet compiled or run on a Mac by its authors: the first run there is
// its first proof.
#include "backends/metal.h"

#if !__has_feature(objc_arc)
#error "metal.mm must be compiled with -fobjc-arc (CMakeLists.txt sets it)"
#endif

#import <Foundation/Foundation.h>
#import <Metal/Metal.h>
#include <TargetConditionals.h>
#include <mach/mach_time.h>
#include <unistd.h>

#include <cmath>
#include <cstdio>
#include <mutex>

#include "core/clock.h"

namespace warmprof::backends::metal {
namespace {

// The device, opened once per process. In macOS a command-line process gets a default device only
// when CoreGraphics is linked (CMakeLists.txt links it); MTLCopyAllDevices is the fallback.
struct DeviceSlot {
  id<MTLDevice> device = nil;  // strong (ARC): kept for the life of the process
  int64_t open_ns = 0;
  std::string reason;
};

// An NSString as UTF-8 ("" for nil, or for a string UTF8String cannot convert: it returns NULL then).
std::string text(NSString* s) {
  const char* c = s ? [s UTF8String] : nullptr;
  return c ? std::string(c) : std::string();
}

DeviceSlot& device_slot() {
  static DeviceSlot slot;
  static std::once_flag once;
  std::call_once(once, [] {
    @autoreleasepool {
      @try {
        clock::calibration();  // calibrated before t0: its ~20 ms spin is not the device's open time
        const int64_t t0 = clock::to_ns(clock::ticks());
        id<MTLDevice> dev = MTLCreateSystemDefaultDevice();
#if TARGET_OS_OSX
        if (dev == nil) {
          NSArray<id<MTLDevice>>* all = MTLCopyAllDevices();
          if (all.count > 0) dev = all[0];
        }
#endif
        slot.open_ns = clock::to_ns(clock::ticks()) - t0;
        slot.device = dev;
        if (dev == nil)
          slot.reason = "Metal: no Metal device (MTLCreateSystemDefaultDevice returned nil and MTLCopyAllDevices is empty)";
      } @catch (NSException* e) {
        slot.device = nil;
        slot.reason = "Metal: opening the device raised " + text(e.name) + ": " + text(e.reason);
      }
    }
  });
  return slot;
}


// "Metal: <stage> failed: <NSError's description> (domain code)".
std::string failure(const std::string& stage, NSError* err) {
  std::string out = "Metal: " + stage + " failed";
  if (err != nil) {
    out += ": " + text(err.localizedDescription);
    out += " (" + text(err.domain) + " " + std::to_string(long(err.code)) + ")";
  } else {
    out += " (no NSError given)";
  }
  return out;
}

// Seconds of the mach time base: GPUStartTime/GPUEndTime are host times in this base
// (CACurrentMediaTime's), so a command buffer's GPU window should sit between commit and done.
double mach_seconds() {
  static mach_timebase_info_data_t tb = [] {
    mach_timebase_info_data_t t;
    mach_timebase_info(&t);
    return t;
  }();
  return double(mach_absolute_time()) * double(tb.numer) / double(tb.denom) * 1e-9;
}

int64_t elapsed_ns(uint64_t t0, uint64_t t1) { return clock::to_ns(t1) - clock::to_ns(t0); }

// A row softmax over LEN floats per thread: LEN is a function constant, so every length is a new
// specialisation and a new pipeline compile. SALT (top bit set, never a row) keeps the source
// and the kernel name unique to this process, so no earlier run's shader cache answers it.
std::string kernel_source(const std::string& name, uint32_t salt) {
  char buf[1400];
  std::snprintf(buf, sizeof buf,
                "#include <metal_stdlib>\n"
                "using namespace metal;\n"
                "constant uint LEN [[function_constant(0)]];\n"
                "constant uint SALT = %uu;\n"
                "kernel void %s(device const float* x [[buffer(0)]],\n"
                "               device float* y [[buffer(1)]],\n"
                "               constant uint& rows [[buffer(2)]],\n"
                "               uint row [[thread_position_in_grid]]) {\n"
                "  if (row >= rows || row == SALT) return;\n"
                "  device const float* xr = x + row * LEN;\n"
                "  device float* yr = y + row * LEN;\n"
                "  float m = xr[0];\n"
                "  for (uint i = 1; i < LEN; ++i) m = max(m, xr[i]);\n"
                "  float s = 0.0f;\n"
                "  for (uint i = 0; i < LEN; ++i) { float e = exp(xr[i] - m); yr[i] = e; s += e; }\n"
                "  float inv = 1.0f / s;\n"
                "  for (uint i = 0; i < LEN; ++i) yr[i] *= inv;\n"
                "}\n",
                salt, name.c_str());
  return buf;
}

// One build: specialise the kernel for `length`, then build its pipeline. nil and `*error` set on failure.
id<MTLComputePipelineState> build(id<MTLDevice> dev, id<MTLLibrary> lib, NSString* fn_name, int length,
                                  bool seen, ProbeResult* r) {
  MTLFunctionConstantValues* values = [[MTLFunctionConstantValues alloc] init];
  const uint32_t len = uint32_t(length);
  [values setConstantValue:&len type:MTLDataTypeUInt atIndex:0];
  NSError* err = nil;
  Build b;
  b.length = length;
  b.seen = seen;
  uint64_t t0 = clock::ticks();
  id<MTLFunction> fn = [lib newFunctionWithName:fn_name constantValues:values error:&err];
  uint64_t t1 = clock::ticks();
  if (fn == nil) {
    r->error = failure("newFunctionWithName:constantValues:error: for length " + std::to_string(length), err);
    return nil;
  }
  b.specialise_ns = elapsed_ns(t0, t1);
  err = nil;
  t0 = clock::ticks();
  id<MTLComputePipelineState> pipe = [dev newComputePipelineStateWithFunction:fn error:&err];
  t1 = clock::ticks();
  if (pipe == nil) {
    r->error = failure("newComputePipelineStateWithFunction:error: for length " + std::to_string(length), err);
    return nil;
  }
  b.pipeline_ns = elapsed_ns(t0, t1);
  r->builds.push_back(b);
  return pipe;
}

// `repeats` command buffers of one dispatch each; false and `r->error` set on failure.
bool dispatch(id<MTLCommandQueue> queue, id<MTLComputePipelineState> pipe, id<MTLBuffer> x, id<MTLBuffer> y,
              int length, int repeats, ProbeResult* r) {
  const uint32_t rows = uint32_t(kRows);
  NSUInteger width = pipe.maxTotalThreadsPerThreadgroup;
  if (width > NSUInteger(kRows)) width = NSUInteger(kRows);
  if (width == 0) width = 1;
  const MTLSize groups = MTLSizeMake((NSUInteger(kRows) + width - 1) / width, 1, 1);
  const MTLSize per_group = MTLSizeMake(width, 1, 1);
  for (int i = 0; i < repeats; ++i) {
    @autoreleasepool {
      id<MTLCommandBuffer> cb = [queue commandBuffer];
      if (cb == nil) {
        r->error = "Metal: commandBuffer returned nil (length " + std::to_string(length) + ")";
        return false;
      }
      id<MTLComputeCommandEncoder> enc = [cb computeCommandEncoder];
      if (enc == nil) {
        r->error = "Metal: computeCommandEncoder returned nil (length " + std::to_string(length) + ")";
        return false;
      }
      [enc setComputePipelineState:pipe];
      [enc setBuffer:x offset:0 atIndex:0];
      [enc setBuffer:y offset:0 atIndex:1];
      [enc setBytes:&rows length:sizeof rows atIndex:2];
      [enc dispatchThreadgroups:groups threadsPerThreadgroup:per_group];
      [enc endEncoding];
      Dispatch d;
      d.length = length;
      d.index = i;
      d.host_commit_s = mach_seconds();
      const uint64_t t0 = clock::ticks();
      [cb commit];
      [cb waitUntilCompleted];
      const uint64_t t1 = clock::ticks();
      d.host_done_s = mach_seconds();
      if (cb.status != MTLCommandBufferStatusCompleted) {
        r->error = failure("command buffer for length " + std::to_string(length) + " did not complete", cb.error);
        return false;
      }
      d.host_ns = elapsed_ns(t0, t1);
      // guarded: a build whose deployment target is below 10.15 (an x86_64 or universal2 python.org
      // interpreter passes its own) would warn; there the GPU times stay 0 and the parser says so
      if (@available(macOS 10.15, iOS 10.3, *)) {
        d.gpu_start_s = cb.GPUStartTime;
        d.gpu_end_s = cb.GPUEndTime;
      }
      r->dispatches.push_back(d);
    }
  }
  const float* out = static_cast<const float*>(y.contents);
  double sum = 0.0;
  for (int i = 0; i < length; ++i) sum += double(out[i]);
  r->row_sums.push_back(sum);
  return true;
}

void run(id<MTLDevice> dev, const std::vector<int>& lengths, int repeats, ProbeResult* r) {
  r->device = text(dev.name);
  r->rows = kRows;
  const uint32_t salt = 0x80000000u | uint32_t((clock::ticks() ^ (uint64_t(getpid()) << 16)) & 0x7fffffffu);
  char name[64];
  std::snprintf(name, sizeof name, "warmprof_softmax_%08x", salt);
  r->kernel = name;
  NSString* fn_name = [NSString stringWithUTF8String:name];
  NSString* source = [NSString stringWithUTF8String:kernel_source(name, salt).c_str()];

  id<MTLCommandQueue> queue = [dev newCommandQueue];
  if (queue == nil) {
    r->error = "Metal: newCommandQueue returned nil";
    return;
  }
  MTLCompileOptions* options = [[MTLCompileOptions alloc] init];
  NSError* err = nil;
  uint64_t t0 = clock::ticks();
  id<MTLLibrary> lib = [dev newLibraryWithSource:source options:options error:&err];
  uint64_t t1 = clock::ticks();
  if (lib == nil) {
    r->error = failure("newLibraryWithSource:options:error:", err);
    return;
  }
  r->library_ns = elapsed_ns(t0, t1);

  for (int length : lengths) {
    @autoreleasepool {
      const NSUInteger bytes = NSUInteger(kRows) * NSUInteger(length) * sizeof(float);
      id<MTLBuffer> x = [dev newBufferWithLength:bytes options:MTLResourceStorageModeShared];
      id<MTLBuffer> y = [dev newBufferWithLength:bytes options:MTLResourceStorageModeShared];
      if (x == nil || y == nil) {
        r->error = "Metal: newBufferWithLength:options: returned nil for " + std::to_string(bytes) + " bytes";
        return;
      }
      float* input = static_cast<float*>(x.contents);
      for (NSUInteger i = 0; i < NSUInteger(kRows) * NSUInteger(length); ++i) input[i] = float(std::sin(double(i)) * 4.0);
      id<MTLComputePipelineState> pipe = build(dev, lib, fn_name, length, false, r);
      if (pipe == nil) return;
      if (!dispatch(queue, pipe, x, y, length, repeats, r)) return;
    }
  }
  // The seen lengths again, after all of them: what a second build of a known shape costs.
  for (int length : lengths) {
    @autoreleasepool {
      if (build(dev, lib, fn_name, length, true, r) == nil) return;
    }
  }
}

}  // namespace

bool compiled() { return true; }

bool available() { return device_slot().device != nil; }

std::string unavailable_reason() {
  const DeviceSlot& s = device_slot();
  return s.device != nil ? std::string() : s.reason;
}

ProbeResult probe(const std::vector<int>& lengths, int repeats) {
  static std::mutex one_at_a_time;
  std::lock_guard<std::mutex> lock(one_at_a_time);
  ProbeResult r;
  clock::calibration();  // calibrated before the first timed call, not inside it
  DeviceSlot& slot = device_slot();
  r.device_ns = slot.open_ns;
  if (slot.device == nil) {
    r.error = slot.reason;
    return r;
  }
  @autoreleasepool {
    @try {
      run(slot.device, lengths, repeats, &r);
    } @catch (NSException* e) {
      r.error = "Metal: " + text(e.name) + ": " + text(e.reason);
    }
  }
  return r;
}

}  // namespace warmprof::backends::metal
