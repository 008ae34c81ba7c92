// Where tests/reference/ lies. Its absolute path is a definition on this one source only: on every
// test source it would make each clone's objects differ, so a compiler cache shared by two clones
// of the same commit would miss on all of them (docs/results-history.md, "The test job").
#include <string>

#include "torch_reference.h"

namespace kiln::testing {

std::string reference_dir() {
  return KILN_TEST_REFERENCE_DIR;
}

}  // namespace kiln::testing
