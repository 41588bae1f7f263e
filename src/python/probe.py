# jax-runner's interpreter probe: versions and whether jax imports. It never
# initialises a backend (importing jax does not), so it is safe and quick everywhere.
import json
import platform
import sys

info = {
    "executable": sys.executable,
    "prefix": sys.prefix,
    "python_version": platform.python_version(),
    "jax_version": None,
    "jaxlib_version": None,
    "jax_importable": False,
    "import_error": None,
}
try:
    from importlib import metadata

    for name in ("jax", "jaxlib"):
        try:
            info[name + "_version"] = metadata.version(name)
        except Exception:
            pass
    import jax  # noqa: F401

    info["jax_importable"] = True
except BaseException as exc:  # a broken install can raise anything, even SystemExit
    info["import_error"] = "%s: %s" % (type(exc).__name__, exc)
sys.stdout.write(json.dumps(info) + "\n")
