// Catch2 v2 main(), compiled once and shared by every test binary.
#define CATCH_CONFIG_MAIN
#include "tests/catch.h"
