// A learner's checkpoints in a `checkpoint_store`: written atomically and
// checksummed, the newest intact one read back when the learner process
// starts again (docs/design.md, "Learner checkpoints").
#pragma once

#include <cstdint>
#include <optional>
#include <sstream>
#include <string>
#include <utility>
#include <vector>

#include "diloco/concepts/checkpointable.hpp"
#include "diloco/runtime/checkpoint.hpp"
#include "diloco/runtime/learner.hpp"

namespace diloco {

/// Writes `l.save` as the next checkpoint in `store` and returns its
/// sequence number; on return it survives a crash (`checkpoint_store::write`:
/// temporary file, fsync, rename). Call it between steps, e.g. every N inner
/// steps. Cost: θ, the fragment bases (one value per parameter, all
/// fragments together) and the inner step's state (AdamW: two moments per
/// parameter), so about 16 bytes per f32 parameter with AdamW, copied twice
/// in memory, written and fsynced once. Throws `std::system_error` on an
/// I/O error (the previous checkpoints stay).
template <class Model, class InnerStep, class Transport>
requires checkpointable<InnerStep> std::uint64_t save_learner_checkpoint(const learner<Model, InnerStep, Transport>& l,
                                                                         checkpoint_store& store) {
  std::ostringstream out;
  l.save(out);
  return store.write(std::move(out).str());
}

/// Loads the newest intact checkpoint of `store` into `l` (before it joins)
/// and returns its sequence number, or nothing when there is none.
/// `skipped` receives a line for every newer file that was torn or corrupt.
/// Throws what `learner::load` throws: `corrupt_state` for a checkpoint
/// whose checksum holds but whose content does not fit this learner (another
/// id or model), `std::invalid_argument` when the learner's incarnation is
/// not newer than the one that saved; the learner is unchanged then.
template <class Model, class InnerStep, class Transport>
requires checkpointable<InnerStep> std::optional<std::uint64_t> load_latest_learner_checkpoint(
    learner<Model, InnerStep, Transport>& l, const checkpoint_store& store,
    std::vector<std::string>* skipped = nullptr) {
  auto c = store.latest(skipped);
  if (!c) return std::nullopt;
  std::istringstream in(std::move(c->body));
  l.load(in);
  return c->sequence;
}

}  // namespace diloco
