"""The record format of SPEC.md in code: canonical bytes, events, verification, interchange.

Pure: no threads, no globals beyond caches, no I/O except reading and writing the bytes a caller
hands over.
"""
