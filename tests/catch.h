// The one include of Catch2 (v2 single header) for all tests, so a move to v3
// touches this file only. The main() lives in catch_main.cc.
#pragma once

#include <catch2/catch.hpp>
