// The process-group backends behind new_process_group (dist/process_group.h): one factory each.
// make_nccl_group is defined in nccl_process_group.cpp when kiln is built with NCCL, and in
// nccl_absent.cpp (which says so) otherwise.
#pragma once

#include <memory>
#include <string>

#include "kiln/dist/process_group.h"
#include "kiln/dist/store.h"

namespace kiln::dist {

std::shared_ptr<ProcessGroup> make_gloo_group(std::shared_ptr<Store> store, int rank, int size,
                                              const std::string& name,
                                              const ProcessGroupOptions& options);

std::shared_ptr<ProcessGroup> make_nccl_group(std::shared_ptr<Store> store, int rank, int size,
                                              const std::string& name,
                                              const ProcessGroupOptions& options);

}  // namespace kiln::dist
