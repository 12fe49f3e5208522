// Opening a data file without hanging: every path ps_train or ps_prep reads as data
// (token files, tokenizer files, labelled examples) must be a regular file once symlinks
// are followed. A FIFO would block open() until a writer appears (and read forever), a
// device or socket is no data set: both are DataErrors naming the path and its key.
// Stateless; any thread.
#pragma once

#include <string>

namespace ps::data {

// Throws DataError when `path` is missing, a directory or not a regular file (a FIFO,
// a device, a socket), after following symlinks. `key` (e.g. "data.train_path") is
// named in the message as " (key)"; "" names none. Never opens the path.
void CheckRegularFile(const std::string& path, const std::string& key);

// Opens `path` read-only without blocking on a FIFO (O_NONBLOCK), checks with fstat
// that what was opened is a non-directory regular file (no race with a rename between
// check and open) and returns the descriptor, which the caller closes. Errors as
// CheckRegularFile.
int OpenRegularFile(const std::string& path, const std::string& key);

}  // namespace ps::data
