// The precompiled form of ATen, autograd and torch::nn::Module: //third_party/pch:nn
// (pch.bzl), for targets whose every file includes torch/nn/module.h
// (third_party/copts.bzl, PS_PCH_NN_COPTS). Exactly what those files include: a header
// more costs every file that does not use it the compile time of its inline code.
// No include guard: it is only ever the -include of a compile, and GCC warns of one in
// the precompile's main file.

#include <ATen/ATen.h>
#include <torch/autograd.h>
#include <torch/nn/module.h>
