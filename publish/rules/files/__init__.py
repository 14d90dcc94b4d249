"""Bounded, descriptor-based file primitives, shared by the POSIX store and the snapshot library."""
