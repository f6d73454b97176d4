// An app's own GPU buffer (a CUdeviceptr or cl_mem) holding a copy of host bytes, made through
// the Halide runtime that attngen carries, so in the context attngen runs in, as an app would
// with cudaMalloc or clCreateBuffer. For the GPU tests and the GPU benchmark.
#pragma once

#include "attngen/runtime.h"

#include "HalideRuntime.h"
#include "HalideRuntimeCuda.h"
#include "HalideRuntimeOpenCL.h"

#include <cstddef>
#include <cstdint>

namespace attngen_test {

class DeviceBuffer {
  public:
    /** Copies `bytes` bytes at `host` (which must outlive this) to a new buffer of `api`. */
    DeviceBuffer(attngen::Device api, void *host, size_t bytes) : api_(api) {
        // A Halide buffer of bytes has a 32-bit extent: larger ones are refused, not wrapped.
        if (bytes == 0 || bytes > static_cast<size_t>(INT32_MAX)) {
            status_ = -1;
            return;
        }
        dim_ = {0, static_cast<int32_t>(bytes), 1, 0};
        buffer_.host = static_cast<uint8_t *>(host);
        buffer_.type = halide_type_t(halide_type_uint, 8);
        buffer_.dimensions = 1;
        buffer_.dim = &dim_;
        buffer_.set_host_dirty(true);
        status_ = halide_copy_to_device(nullptr, &buffer_, interface());
    }
    DeviceBuffer(const DeviceBuffer &) = delete;
    DeviceBuffer &operator=(const DeviceBuffer &) = delete;
    ~DeviceBuffer() { halide_device_free(nullptr, &buffer_); }

    /** Whether the allocation and the copy succeeded. */
    bool ok() const { return status_ == 0; }
    /** The device handle, as a Tensor's data. */
    void *handle() {
        const uint64_t handle = api_ == attngen::Device::cuda
                                    ? halide_cuda_get_device_ptr(nullptr, &buffer_)
                                    : halide_opencl_get_cl_mem(nullptr, &buffer_);
        return reinterpret_cast<void *>(handle);
    }
    /** Copies the device bytes over the host bytes; 0 on success. */
    int read_back() {
        buffer_.set_device_dirty(true);
        return halide_copy_to_host(nullptr, &buffer_);
    }
    /** Waits for the work queued on the device; 0 on success. */
    int sync() { return halide_device_sync(nullptr, &buffer_); }

  private:
    const halide_device_interface_t *interface() const {
        return api_ == attngen::Device::cuda ? halide_cuda_device_interface()
                                             : halide_opencl_device_interface();
    }
    attngen::Device api_;
    halide_buffer_t buffer_{};
    halide_dimension_t dim_{};
    int status_ = 0;
};

} // namespace attngen_test
