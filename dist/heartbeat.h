// Each rank's sign of life, so that a collective that times out can name the ranks that did not
// answer instead of only its own wait. A thread of each rank writes "<beat>,<started>" under
// "<prefix><rank>" in the job's store every period: a count that moves while the process runs,
// and how many of the group's collectives this rank has started. When a collective fails,
// diagnose() reads every other rank's value twice, two periods apart:
//   - a rank whose beat did not move is not answering: stopped (SIGSTOP, a debugger), hung in the
//     kernel, or on a machine that is unreachable;
//   - a rank whose beat moves but that has started fewer collectives is alive and has not reached
//     this one (a rank that skipped a collective, or is busy elsewhere).
// The writes cost one store call per rank and period (at most one a second); the reads happen
// only after a failure. A store that does not answer (a TCP store is served by rank 0, so rank 0
// stopped) is named as such after a few periods, instead of waiting for the store's own timeout.
#pragma once

#include <chrono>
#include <cstdint>
#include <memory>
#include <string>

#include "kiln/dist/store.h"

namespace kiln::dist {

class Heartbeat {
 public:
  // Writes the first beat before returning, so that once every rank of a group has connected
  // each one's key is in the store. `period` is clamped to [50 ms, 1 s].
  Heartbeat(std::shared_ptr<Store> store, std::string prefix, int rank, int size,
            std::chrono::milliseconds period);
  // Stops the writer; a writer blocked on a store that does not answer is left to finish alone.
  ~Heartbeat();
  Heartbeat(const Heartbeat&) = delete;
  Heartbeat& operator=(const Heartbeat&) = delete;

  // This rank starts its next collective; returns its number, from 1.
  int64_t start_collective();
  // The number of the collective this rank started last (0 before the first).
  int64_t started() const;
  // What the other ranks were doing while collective number `collective` of this rank failed:
  // a sentence starting with "; " naming the ranks not answering and those alive but behind,
  // or "" when every rank was alive and had started it. Takes about two periods.
  std::string diagnose(int64_t collective) const;

  // The period for a group whose collectives time out after `timeout`: an eighth of it, within
  // [50 ms, 1 s], so the diagnosis is quick beside the timeout.
  static std::chrono::milliseconds period_for(std::chrono::milliseconds timeout);

 private:
  struct Shared;
  std::shared_ptr<Shared> shared_;
};

}  // namespace kiln::dist
