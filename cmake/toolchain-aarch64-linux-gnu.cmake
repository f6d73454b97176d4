# Cross-compiling attngen's runtime, tests and examples for 64-bit ARM Linux with Debian's
# g++-aarch64-linux-gnu; ctest runs the binaries under qemu-aarch64 (Debian's qemu-user).
# Pass -DATTNGEN_HOST_BUILD=<a host build> for the generator and tool that run on the host.
set(CMAKE_SYSTEM_NAME Linux)
set(CMAKE_SYSTEM_PROCESSOR aarch64)
set(CMAKE_C_COMPILER aarch64-linux-gnu-gcc)
set(CMAKE_CXX_COMPILER aarch64-linux-gnu-g++)
set(CMAKE_CROSSCOMPILING_EMULATOR qemu-aarch64 -L /usr/aarch64-linux-gnu)
