// GPU variants: whether a device is there, the app's choice between GPU and CPU, device tensors
// wrapped without copies, and the CUDA context and stream the app wants kernels to run in.
// Halide's runtime loads the CUDA driver or the OpenCL ICD loader itself when a GPU variant first
// runs; the probes here load them the same way (dlopen), so nothing links against them.
#include "attngen/runtime.h"
#include "internal.h"

#include "HalideRuntime.h"
#if ATTNGEN_RUNTIME_GPU
#include "HalideRuntimeCuda.h"
#include "HalideRuntimeOpenCL.h"
#endif

#include <dlfcn.h>

#include <atomic>
#include <cstdlib>
#include <cstring>
#include <mutex>

namespace attngen {

namespace {

std::atomic<GpuPolicy> policy{GpuPolicy::prefer};

#if ATTNGEN_RUNTIME_GPU
/** libcuda, opened once; nullptr without a driver. */
void *cuda_driver() {
    static void *handle = dlopen("libcuda.so.1", RTLD_LAZY | RTLD_LOCAL);
    return handle;
}

template <typename Function> Function driver_symbol(void *library, const char *name) {
    return library ? reinterpret_cast<Function>(dlsym(library, name)) : nullptr;
}

/** Initializes the CUDA driver and finds device 0; false without a driver or a device. */
bool cuda_device_zero(int *device) {
    void *driver = cuda_driver();
    auto init = driver_symbol<int (*)(unsigned)>(driver, "cuInit");
    auto get = driver_symbol<int (*)(int *, int)>(driver, "cuDeviceGet");
    return init && get && init(0) == 0 && get(device, 0) == 0;
}

/** The compute capability of CUDA device 0 as major * 10 + minor; 0 without one. */
int probe_cuda_capability() {
    auto attribute = driver_symbol<int (*)(int *, int, int)>(cuda_driver(), "cuDeviceGetAttribute");
    const int major_attribute = 75,
              minor_attribute = 76; // CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_*
    int device = 0, major = 0, minor = 0;
    if (!attribute || !cuda_device_zero(&device) ||
        attribute(&major, major_attribute, device) != 0 ||
        attribute(&minor, minor_attribute, device) != 0)
        return 0;
    return major * 10 + minor;
}

int cuda_capability() {
    static const int capability = probe_cuda_capability();
    return capability;
}

bool probe_opencl() {
    void *loader = dlopen("libOpenCL.so.1", RTLD_LAZY | RTLD_LOCAL);
    using Platforms = int (*)(unsigned, void **, unsigned *);
    using Devices = int (*)(void *, uint64_t, unsigned, void **, unsigned *);
    auto platforms = driver_symbol<Platforms>(loader, "clGetPlatformIDs");
    auto devices = driver_symbol<Devices>(loader, "clGetDeviceIDs");
    if (!platforms || !devices)
        return false;
    void *ids[16];
    unsigned found = 0;
    if (platforms(16, ids, &found) != 0)
        return false;
    const uint64_t all_devices = 0xFFFFFFFF; // CL_DEVICE_TYPE_ALL
    for (unsigned i = 0; i < found && i < 16; i++) {
        unsigned count = 0;
        if (devices(ids[i], all_devices, 0, nullptr, &count) == 0 && count > 0)
            return true;
    }
    return false;
}
#endif

thread_local Device dispatched_device = Device::cpu;

// The app's CUDA context and stream (opaque CUcontext / CUstream).
std::mutex cuda_mutex;
void *app_context = nullptr;
void *app_stream = nullptr;

#if ATTNGEN_RUNTIME_GPU
void *primary_context = nullptr;

// Halide's CUDA runtime asks these for the context and stream of every launch and copy. They
// replace Halide's defaults, which would create a context of their own: memory the app
// allocated in its context would not be visible there.
int acquire_cuda_context(void *user_context, void **context, bool create) {
    (void)user_context;
    std::lock_guard<std::mutex> lock(cuda_mutex);
    if (app_context != nullptr) {
        *context = app_context;
        return 0;
    }
    if (primary_context == nullptr && create) {
        auto retain =
            driver_symbol<int (*)(void **, int)>(cuda_driver(), "cuDevicePrimaryCtxRetain");
        int device = 0;
        if (!retain || !cuda_device_zero(&device) || retain(&primary_context, device) != 0) {
            *context = nullptr;
            return halide_error_code_generic_error;
        }
    }
    *context = primary_context;
    return 0;
}

int release_cuda_context(void *user_context) {
    (void)user_context;
    return 0;
}

int get_cuda_stream(void *user_context, void *context, void **stream) {
    (void)user_context;
    (void)context;
    std::lock_guard<std::mutex> lock(cuda_mutex);
    *stream = app_stream;
    return 0;
}
#endif

} // namespace

const char *device_name(Device device) {
    switch (device) {
    case Device::cpu:
        return "cpu";
    case Device::cuda:
        return "cuda";
    case Device::opencl:
        return "opencl";
    }
    return "?";
}

// The hooks go in before anything that may touch a GPU: an app that probes gpu_available() or
// sets its context, then allocates device memory through Halide before its first run(), must
// find attngen's context there, not one Halide made for itself.
void set_gpu_policy(GpuPolicy value) {
    internal::install_halide_hooks();
    policy.store(value);
}
GpuPolicy gpu_policy() {
    return policy.load();
}

bool gpu_available(Device device) {
    internal::install_halide_hooks();
#if ATTNGEN_RUNTIME_GPU
    static const bool opencl = probe_opencl();
    return device == Device::cpu || (device == Device::cuda && cuda_capability() > 0) ||
           (device == Device::opencl && opencl);
#else
    return device == Device::cpu;
#endif
}

Device last_device() {
    return dispatched_device;
}

void set_cuda_context(void *context, void *stream) {
    internal::install_halide_hooks();
    std::lock_guard<std::mutex> lock(cuda_mutex);
    app_context = context;
    app_stream = stream;
}

namespace internal {

bool gpu_variant_runs(const LayerVariant &variant) {
#if ATTNGEN_RUNTIME_GPU
    if (!gpu_available(variant.device))
        return false;
    // PTX for capability N runs on devices of capability N and newer.
    const char *at = std::strstr(variant.target, "cuda_capability_");
    const int needed = at ? std::atoi(at + std::strlen("cuda_capability_")) : 0;
    return variant.device != Device::cuda || needed <= cuda_capability();
#else
    return gpu_available(variant.device);
#endif
}

void record_device(Device device) {
    dispatched_device = device;
}

void install_cuda_hooks() {
#if ATTNGEN_RUNTIME_GPU
    // Halide's CUDA runtime compiles a module's PTX with a cap of 64 registers per thread
    // unless HL_CUDA_JIT_MAX_REGISTERS says otherwise, and reads it as each module loads. The
    // GPU schedule's one-warp blocks keep the running state of the online form in registers
    // (up to about 250, no spills, as ptxas reports them): at 64 the driver would spill it to
    // local memory. So attngen lifts the cap to the hardware's 255 before any module loads;
    // an app that sets the variable itself keeps its value.
    setenv("HL_CUDA_JIT_MAX_REGISTERS", "255", 0);
    halide_set_cuda_acquire_context(acquire_cuda_context);
    halide_set_cuda_release_context(release_cuda_context);
    halide_set_cuda_get_stream(get_cuda_stream);
#endif
}

#if ATTNGEN_RUNTIME_GPU
Status attach_to_device(Device device, void *user_context, halide_buffer_t *buffer, bool on_device,
                        bool is_output) {
    if (!on_device) {
        // Halide copies dirty host data in, and run() copies the output back.
        if (!is_output)
            buffer->flags |= halide_buffer_flag_host_dirty;
        return Status();
    }
    void *handle = buffer->host;
    buffer->host = nullptr;
    const int result =
        device == Device::cuda
            ? halide_cuda_wrap_device_ptr(user_context, buffer, reinterpret_cast<uint64_t>(handle))
            : halide_opencl_wrap_cl_mem(user_context, buffer, reinterpret_cast<uint64_t>(handle));
    if (result != 0)
        return Status::error(std::string("attngen: cannot wrap a ") + device_name(device) +
                             " device pointer (Halide error " + std::to_string(result) + ")");
    return Status();
}

Status detach_from_device(Device device, void *user_context, halide_buffer_t *buffer,
                          bool on_device, bool is_output) {
    int result = 0;
    if (on_device) {
        result = device == Device::cuda ? halide_cuda_detach_device_ptr(user_context, buffer)
                                        : halide_opencl_detach_cl_mem(user_context, buffer);
    } else {
        if (is_output && buffer->device != 0)
            result = halide_copy_to_host(user_context, buffer);
        if (buffer->device != 0) {
            const int freed = halide_device_free(user_context, buffer);
            result = result != 0 ? result : freed;
        }
    }
    if (result != 0)
        return Status::error(std::string("attngen: ") + device_name(device) +
                             " transfer failed (Halide error " + std::to_string(result) + ")");
    return Status();
}
#else
Status attach_to_device(Device device, void *, halide_buffer_t *, bool, bool) {
    return Status::error(std::string("attngen: this runtime was built without ") +
                         device_name(device) + " support");
}
Status detach_from_device(Device, void *, halide_buffer_t *, bool, bool) {
    return Status();
}
#endif

} // namespace internal

} // namespace attngen
