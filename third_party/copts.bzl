"""Compiler flags shared by every target of the project (abseil-style)."""

PS_COPTS = [
    "-Wall",
    "-Wextra",
    "-Werror=switch",
    "-Werror=return-type",
    "-Wno-unused-parameter",
    "-Wno-sign-compare",
]

# Defines seen by code that has a CUDA path.
PS_CUDA_DEFINES = select({
    "//third_party:cuda_enabled": ["PS_WITH_CUDA=1"],
    "//conditions:default": [],
})

# The include path of CUDA's headers, for the targets that include them; they depend on
# //third_party:cuda or :nccl, which declare the headers but no path (cc_without_paths.bzl).
PS_CUDA_COPTS = select({
    "//third_party:cuda_enabled": ["-isystem", "external/local_cuda/include"],
    "//conditions:default": [],
})

# LibTorch: the CPU libraries, plus the CUDA ones in --config=cuda.
PS_TORCH_DEPS = ["@local_torch//:torch"] + select({
    "//third_party:cuda_enabled": ["@local_torch//:torch_cuda"],
    "//conditions:default": [],
})

# The precompiled LibTorch headers (third_party/pch/BUILD). A target whose every file
# includes ATen/ATen.h takes PS_PCH_ATEN_*; one whose every file also includes
# torch/nn/module.h, PS_PCH_NN_*: its files compile 1.5-3.6 times as fast. Not for a
# target with lighter files: a file that includes less pays for the inline code of what it
# did not include (trainer/config/config_loader.cc, no LibTorch: 2.8 s -> 15.2 s with the
# nn header forced in; docs/benchmarks.md).
# -fpch-deps lists the headers inside the .gch in the .d file, so Bazel recompiles a user
# when one of them changes. To see whether GCC uses a .gch, build with
# --copt=-Winvalid-pch: it names each variant it found but could not use (in -c opt the
# `pic` one, for binaries' objects, which take `nopic`).
PS_PCH_FLAGS = ["-fpch-deps"]
PS_PCH_ATEN_COPTS = PS_COPTS + ["-include", "third_party/pch/aten.h"] + PS_PCH_FLAGS
PS_PCH_ATEN_DEPS = ["//third_party/pch:aten"]
PS_PCH_NN_COPTS = PS_COPTS + ["-include", "third_party/pch/nn.h"] + PS_PCH_FLAGS
PS_PCH_NN_DEPS = ["//third_party/pch:nn"]
