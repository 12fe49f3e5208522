"""nvcc_object: one CUDA source compiled by the toolkit's nvcc into an object file.

Built in --config=cuda only: elsewhere the target is incompatible, so `bazel build //...`
skips it and needs no nvcc. Machine code for every architecture this nvcc (CUDA 13.0)
knows but the embedded ones (sm_87, 88, 121), and PTX of the oldest, which the driver
compiles for any GPU without its own machine code here. `hdrs`: every project header the
source includes (the sandbox holds only what is listed).
"""

_ARCHS = ["75", "80", "86", "89", "90", "100", "103", "110", "120"]

def nvcc_object(name, src, hdrs):
    native.genrule(
        name = name,
        srcs = [src] + hdrs,
        outs = [(name[:-2] if name.endswith("_o") else name) + ".o"],
        cmd = "$(location @local_cuda//:nvcc) -c -O3 -std=c++17 -Xcompiler -fPIC -I. " +
              " ".join(["-gencode arch=compute_%s,code=sm_%s" % (a, a) for a in _ARCHS]) +
              " -gencode arch=compute_75,code=compute_75 -o $@ $(location %s)" % src,
        target_compatible_with = select({
            "//third_party:cuda_enabled": [],
            "//conditions:default": ["@platforms//:incompatible"],
        }),
        tools = ["@local_cuda//:nvcc"],
    )
