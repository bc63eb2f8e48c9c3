// What a module image handed to the CUDA driver holds: a cubin (ELF), PTX text, or a fatbin of
// cubins and/or PTX for several architectures. It decides the cause of a module load: a cubin is
// loaded as it is (runtime_init); PTX, or a fatbin with nothing but PTX for this device, is
// compiled by the driver's JIT first (jit_compile). Pure byte inspection: no driver, no CUPTI, no
// allocation (the load callbacks call it; files are read with pread into stack buffers).
#pragma once
#include <cstddef>
#include <cstdint>

namespace warmprof::backends::cuda_image {

enum class Kind : uint8_t {
  kUnknown = 0,      // not recognised or not readable: no claim of a JIT (treated as a load)
  kCubin = 1,        // an ELF cubin
  kPtx = 2,          // PTX text ("//" comment or ".version" first): the driver JIT-compiles it
  kFatbinCubin = 3,  // a fatbin with a cubin this device runs (or the device is unknown and it has one)
  kFatbinPtx = 4,    // a fatbin with no cubin for this device but PTX it can compile: JIT
};

// Whether loading an image of this kind runs the driver's PTX JIT.
inline bool jit(Kind k) { return k == Kind::kPtx || k == Kind::kFatbinPtx; }

// `arch` is the device's compute capability as major*10+minor (90 for sm_90), 0 when unknown.
// A cubin runs on a device of the same major version and an equal or higher minor one; PTX is
// compiled for any device at or above its target. With the device unknown, a fatbin holding any
// cubin is taken as a cubin load (the conservative reading: shipped libraries carry cubins for
// the architectures they support, and a JIT is never claimed without evidence).
//
// image: the bytes the driver reads (cuModuleLoadData, cuLibraryLoadData, MODULE_LOADED's pCubin,
// or the __fatBinC_Wrapper_t that cuModuleLoadFatBinary takes); `size` bounds the reads when
// known (0: unknown; the image is then trusted to be what its header says, as the driver does).
Kind of_memory(const void* image, size_t size, int arch);
// A module file (cuModuleLoad, cuLibraryLoadFromFile): its contents, not its name, decide.
Kind of_file(const char* path, int arch);

const char* name(Kind k);  // "cubin", "ptx", "fatbin(cubin)", "fatbin(ptx)", "unknown"

}  // namespace warmprof::backends::cuda_image
