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

# LibTorch: the CPU libraries, plus the CUDA ones in --config=cuda.
PS_TORCH_DEPS = ["@local_torch//:torch"] + select({
    "//third_party:cuda_enabled": ["@local_torch//:torch_cuda"],
    "//conditions:default": [],
})
