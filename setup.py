"""The C accelerator of the chain check; everything else about the package is in
pyproject.toml.

Optional: where it cannot be compiled (no C compiler, no Python headers) the install goes
on without it and `eventstore.hashing` runs its Python definitions instead. It hashes with
OpenSSL's libcrypto where its headers are (Debian's libssl-dev), else through hashlib.
"""

from setuptools import Extension, setup
from setuptools.command.build_ext import build_ext
from setuptools.errors import CCompilerError

CHAIN = Extension("eventstore._chain", ["eventstore/_chain.c"], optional=True)


class BuildChain(build_ext):
    """Builds the chain check against libcrypto first, then, if that fails, without."""

    def build_extension(self, ext: Extension) -> None:
        if ext is CHAIN:
            ext.define_macros.append(("CHAIN_OPENSSL", "1"))
            ext.libraries.append("crypto")
            try:
                super().build_extension(ext)
                return
            except CCompilerError:
                ext.define_macros.remove(("CHAIN_OPENSSL", "1"))
                ext.libraries.remove("crypto")
        super().build_extension(ext)


setup(ext_modules=[CHAIN], cmdclass={"build_ext": BuildChain})
