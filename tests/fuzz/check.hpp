// A fuzzer's invariant: when it does not hold, say which and abort (libFuzzer saves the input).
// Printed on stdout: the engine fuzzer runs with stderr closed (-close_fd_mask=2).
#pragma once

#include <cstdio>
#include <cstdlib>

#define FUZZ_CHECK(cond, ...)                                                        \
  do {                                                                               \
    if (!(cond)) {                                                                   \
      std::printf("fuzz invariant broken: %s (%s:%d): ", #cond, __FILE__, __LINE__); \
      std::printf(__VA_ARGS__);                                                      \
      std::printf("\n");                                                             \
      std::fflush(stdout);                                                           \
      std::abort();                                                                  \
    }                                                                                \
  } while (0)
