// diloco: low-communication, fault-tolerant distributed training
// (DiLoCo, Streaming DiLoCo, Decoupled DiLoCo) as a header-only C++20 library.
//
// This umbrella header pulls in the core, the in-process and simulated
// transports and learner units whose ranks are threads; it needs only the
// standard library. The network transports (transport/zeromq.hpp,
// transport/tcp.hpp), units on MPI (collective/mpi.hpp) and the Eigen
// adapter (adapters/eigen.hpp) are opt-in headers with CMake components of
// their own.
#pragma once

#include "diloco/error.hpp"
#include "diloco/version.hpp"

#include "diloco/concepts/checkpointable.hpp"
#include "diloco/concepts/collective.hpp"
#include "diloco/concepts/inner_step.hpp"
#include "diloco/concepts/merge_policy.hpp"
#include "diloco/concepts/model.hpp"
#include "diloco/concepts/outer_optimizer.hpp"
#include "diloco/concepts/transport.hpp"

#include "diloco/params/fragments.hpp"
#include "diloco/params/layout.hpp"

#include "diloco/inner/adamw.hpp"
#include "diloco/inner/sgd.hpp"

#include "diloco/outer/delayed_nesterov.hpp"
#include "diloco/outer/from_inner.hpp"
#include "diloco/outer/nesterov.hpp"
#include "diloco/outer/sgd.hpp"

#include "diloco/collective/threads.hpp"
#include "diloco/collective/unit_model.hpp"
#include "diloco/merge/radial_directional.hpp"
#include "diloco/merge/robust.hpp"
#include "diloco/merge/weighted_mean.hpp"

#include "diloco/sim/network.hpp"
#include "diloco/transport/inproc.hpp"

#include "diloco/metrics/counters.hpp"
#include "diloco/runtime/bootstrap.hpp"
#include "diloco/runtime/learner.hpp"
#include "diloco/runtime/presets.hpp"
#include "diloco/runtime/syncer.hpp"
#include "diloco/sim/run.hpp"
