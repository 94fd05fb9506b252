// The part of diloco a program may compile once: include this header in
// exactly one source file of a program whose every source file is compiled
// with DILOCO_SEPARATE_COMPILATION defined (docs/building.md, "Separate
// compilation"; Asio's ASIO_SEPARATE_COMPILATION is the model). It defines
// the fused codec passes (runtime/fused_passes.hpp) and the syncers of the
// presets for `float` models (runtime/presets.hpp), which the other files
// then only declare: most of the code a file that makes a learner and a
// syncer would otherwise compile.
#pragma once

#if !defined(DILOCO_SEPARATE_COMPILATION)
#error \
    "diloco/separate_compilation.hpp: define DILOCO_SEPARATE_COMPILATION for every source file of the program, or leave this header out (the library is header-only by default)"
#endif

#include "diloco/runtime/fused_passes_impl.hpp"
#include "diloco/runtime/presets.hpp"

DILOCO_PRESET_SYNCERS(DILOCO_COMPILE_SYNCER)
