# Cross-compiles kvscatter for 64-bit Arm Linux with Debian's aarch64-linux-gnu toolchain,
# against Debian's arm64 multiarch packages (libhwy-dev:arm64, libgtest-dev:arm64, ... under
# /usr/lib/aarch64-linux-gnu; scripts/setup.sh installs them). Tests and gtest discovery run
# through qemu-aarch64; the QEMU_CPU environment variable picks the emulated CPU (for example
# QEMU_CPU=max,sve-default-vector-length=32), and with it the Highway targets that dispatch
# may choose. Used by the `aarch64` preset.
set(CMAKE_SYSTEM_NAME Linux)
set(CMAKE_SYSTEM_PROCESSOR aarch64)
set(CMAKE_C_COMPILER aarch64-linux-gnu-gcc)
set(CMAKE_CXX_COMPILER aarch64-linux-gnu-g++)
# Debian's multiarch layout: the arm64 packages live under /usr (lib/aarch64-linux-gnu), next to
# the host's, so no sysroot. CMake finds them through CMAKE_LIBRARY_ARCHITECTURE, which it takes
# from the compiler; the host's x86-64 packages sit in another multiarch directory and are never
# searched.
set(CMAKE_LIBRARY_ARCHITECTURE aarch64-linux-gnu)
# pkg-config (a fallback for Highway) must read the arm64 .pc files, not the host's.
set(ENV{PKG_CONFIG_LIBDIR} /usr/lib/aarch64-linux-gnu/pkgconfig:/usr/share/pkgconfig)

find_program(KVSCATTER_QEMU_AARCH64 NAMES qemu-aarch64 qemu-aarch64-static)
if(KVSCATTER_QEMU_AARCH64)
  # No -L /usr/aarch64-linux-gnu: the programs load the arm64 C library that the multiarch
  # packages install (/lib/ld-linux-aarch64.so.1, a dependency of libhwy1:arm64). With -L,
  # Debian 12's qemu-aarch64 hangs in the first pthread_create, so every threaded test would.
  set(CMAKE_CROSSCOMPILING_EMULATOR ${KVSCATTER_QEMU_AARCH64})
endif()
