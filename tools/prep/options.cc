#include "tools/prep/options.h"

#include <c10/util/Exception.h>

namespace ps::prep {

std::string ErrorText(const std::exception& e) {
  if (const auto* c10 = dynamic_cast<const c10::Error*>(&e)) return c10->what_without_backtrace();
  return e.what();
}

}  // namespace ps::prep
