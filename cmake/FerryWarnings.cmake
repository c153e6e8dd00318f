# Warnings for ferry's own targets (never forced on consumers).
add_library(ferry_warnings INTERFACE)
target_compile_options(ferry_warnings INTERFACE
  $<$<COMPILE_LANGUAGE:CXX>:-Wall -Wextra -Wpedantic -Werror=return-type -Wno-missing-field-initializers>
  $<$<COMPILE_LANGUAGE:CUDA>:-Xcompiler=-Wall,-Wextra>)
