// The one source file of a program that compiles the library's heavy parts,
// when every source file is compiled with DILOCO_SEPARATE_COMPILATION.
#include <diloco/diloco.hpp>
#include <diloco/separate_compilation.hpp>

// The syncer of keep_your_loop.cpp, whose policies are not a preset's.
DILOCO_COMPILE_SYNCER(diloco::outer::sgd<float>, diloco::merge::average)
