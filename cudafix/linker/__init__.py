"""The ld.so model: ELF headers, the ELF index, ``ld.so.cache``, and resolution as glibc does it.

Reads ELF files and the loader's cache; changes nothing.
"""
