// Force-included (-include) into src/io when the fuzz build compiles it with clang. Debian's ITK
// 5.2 ships the compiler-feature table of gcc only and stops any other compiler with "#error
// Unsupported compiler"; included first, with __clang__ hidden, the table is read as that of the
// gcc version clang emulates (-fgnuc-version=5.1: new enough for the table, old enough that glibc
// does not use gcc-11-only attributes). Its include guard keeps ITK's later includes out.
#pragma once
#pragma push_macro("__clang__")
#undef __clang__
#include <itk_compiler_detection.h>
#pragma pop_macro("__clang__")
