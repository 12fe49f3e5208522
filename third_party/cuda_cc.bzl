"""cc_library for targets whose sources include CUDA's headers.

It adds what such a target needs on top of its own attributes: CUDA's include path
(PS_CUDA_COPTS, only in --config=cuda), the PS_WITH_CUDA define (PS_CUDA_DEFINES) and
//third_party:cuda (the headers in every build, the libraries in --config=cuda). Other
targets take plain cc_library, so a --config=cuda build recompiles only these.
"""

load("//third_party:copts.bzl", "PS_COPTS", "PS_CUDA_COPTS", "PS_CUDA_DEFINES")

def _cuda_attrs(kwargs):
    kwargs["copts"] = kwargs.get("copts", PS_COPTS) + PS_CUDA_COPTS
    kwargs["local_defines"] = kwargs.get("local_defines", []) + PS_CUDA_DEFINES
    kwargs["deps"] = kwargs.get("deps", []) + ["//third_party:cuda"]
    return kwargs

def ps_cuda_cc_library(name, **kwargs):
    native.cc_library(name = name, **_cuda_attrs(kwargs))
