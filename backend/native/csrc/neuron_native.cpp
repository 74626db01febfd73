// One translation unit for the whole extension (the torch headers dominate the build time, so
// they are parsed once): conversion helpers, the device fast path, the recorder hook, the module.
#include "convert.cpp"
#include "device.cpp"
#include "explicit_kernels.cpp"
#include "recorder.cpp"
#include "executor.cpp"
#include "module.cpp"
