// A program built with -ffast-math would encode other codes than everyone
// else (docs/protocol.md, "Arithmetic"): the codecs refuse to compile.
// compile-options: -ffast-math
// expect-error: the codecs need IEEE arithmetic
#include <diloco/codec/element.hpp>

float unit_of_one_int8_step() { return diloco::codec::from_int8(1); }
