// The precompiled form of ATen's tensor API: //third_party/pch:aten (pch.bzl), for
// targets whose every file includes ATen/ATen.h (third_party/copts.bzl,
// PS_PCH_ATEN_COPTS). Exactly what those files include: a header more costs every file
// that does not use it the compile time of its inline code.
#pragma once

#include <ATen/ATen.h>
