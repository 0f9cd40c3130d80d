// AVX-512 VBMI (byte permutes across a whole vector) is not part of Highway's AVX3 target, so
// the kernels that use it decide at run time: the byte-table forms run where the CPU has VBMI
// (Ice Lake and later, Zen 4) and are allowed; tests switch them off to check the other form on
// such a CPU as well. Both forms write the same bytes.
#pragma once

namespace kvscatter::detail {

// Whether the byte-table forms may run where the CPU has VBMI (the default: allowed).
void set_vbmi_allowed(bool allowed);

// The CPU has VBMI and the byte-table forms are allowed.
bool vbmi_usable();

}  // namespace kvscatter::detail

// The attribute of a function that uses VBMI on top of the AVX-512 target it is compiled for;
// everything it inlines must carry it too (an always-inline callee may not add target features
// to its caller).
#define KVS_VBMI_ATTR __attribute__((target(HWY_TARGET_STR ",avx512vbmi")))
