// The precompiled form of ATen's tensor API: //third_party/pch:aten (pch.bzl), for
// targets whose every file includes ATen/ATen.h (third_party/copts.bzl,
// PS_PCH_ATEN_COPTS). Exactly what those files include: a header more costs every file
// that does not use it the compile time of its inline code.
// No include guard: it is only ever a compile's -include (GCC warns of #pragma once in
// the precompile's main file).

#include <ATen/ATen.h>
