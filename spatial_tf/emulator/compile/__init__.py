"""Compile and run: trace a step, partition and compile it with XLA (XLA:CPU here, or
XLA:TPU as a compile-only target), cache compiles, run them for every replica.
"""
