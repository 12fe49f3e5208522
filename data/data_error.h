// DataError: a user error in the training data (a missing, empty or malformed token
// file, token ids beyond the vocabulary, a file shorter than one sample). Thrown by
// data/ with a message that names the file; ps_train's main maps it to exit status 2
// like a config error. Faults of the program or the machine stay c10::Error.
#pragma once

#include <c10/util/StringUtil.h>

#include <stdexcept>

namespace ps::data {

class DataError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

}  // namespace ps::data

// Throws DataError with the arguments streamed into one message (as TORCH_CHECK
// does) when `cond` is false.
#define PS_DATA_CHECK(cond, ...)                                     \
  do {                                                               \
    if (!(cond)) throw ::ps::data::DataError(::c10::str(__VA_ARGS__)); \
  } while (0)
