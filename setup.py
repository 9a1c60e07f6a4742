"""The C accelerator of the chain check; everything else about the package is in
pyproject.toml.

Optional: where it cannot be compiled (no C compiler, no Python headers) the install goes
on without it and `eventstore.hashing` runs its Python definitions instead.
"""

from setuptools import Extension, setup

CHAIN = Extension("eventstore._chain", ["eventstore/_chain.c"], optional=True)

setup(ext_modules=[CHAIN])
