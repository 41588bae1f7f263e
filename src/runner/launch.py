# jax-runner's launcher for scripts whose path is not valid UTF-8. jax fails on such
# code objects (jit raises `RuntimeError: std::bad_cast` while encoding source
# locations), so the code is compiled under a readable name while __file__, argv and
# sys.path stay exactly what `python SCRIPT` would give the script.
import os
import sys

path = sys.argv[1]
sys.argv = sys.argv[1:]
sys.path[0] = os.path.dirname(os.path.abspath(path))
with open(path, "rb") as fh:
    source = fh.read()
readable = path.encode("utf-8", "surrogateescape").decode("utf-8", "replace")
code = compile(source, readable, "exec")
import __main__  # noqa: E402

__main__.__file__ = path
del os, sys, fh, source, readable, path
exec(code, __main__.__dict__)
