"""Operands in and results out, compiling and loading native code, the caches."""
