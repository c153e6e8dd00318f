// A host-only build's kernel half: ferry's kernels are host loops, built by the host compiler.
#include "apply.inc"
