# jax-runner's interpreter probe: versions, whether jax imports, and the installed
# jax-related distributions and plugins (read from package metadata). It never
# initialises a backend (importing jax does not), so it is safe and quick everywhere.
import json
import platform
import re
import sys

info = {
    "executable": sys.executable,
    "prefix": sys.prefix,
    "base_prefix": getattr(sys, "base_prefix", sys.prefix),
    "python_version": platform.python_version(),
    "jax_version": None,
    "jaxlib_version": None,
    "jax_importable": False,
    "import_error": None,
    "distributions": {},
    "jax_plugins": [],
}
try:
    from importlib import metadata

    # sys.path order: the first distribution of a name is the one that imports.
    for dist in metadata.distributions():
        name = re.sub(r"[-_.]+", "-", (dist.metadata["Name"] or "")).lower()
        if name.startswith(("jax", "libtpu", "nvidia-")) and name not in info["distributions"]:
            info["distributions"][name] = dist.version
    info["jax_version"] = info["distributions"].get("jax")
    info["jaxlib_version"] = info["distributions"].get("jaxlib")
    try:
        eps = metadata.entry_points(group="jax_plugins")
    except TypeError:  # Python < 3.10
        eps = metadata.entry_points().get("jax_plugins", [])
    info["jax_plugins"] = sorted({ep.name for ep in eps})
    import importlib.util

    spec = importlib.util.find_spec("jax_plugins")
    if spec is not None and spec.submodule_search_locations:
        import pkgutil

        found = pkgutil.iter_modules(list(spec.submodule_search_locations))
        info["jax_plugins"] = sorted(set(info["jax_plugins"]) | {m.name for m in found})
except Exception as exc:
    info["import_error"] = "metadata: %s: %s" % (type(exc).__name__, exc)
try:
    import jax  # noqa: F401

    info["jax_importable"] = True
except BaseException as exc:  # a broken install can raise anything, even SystemExit
    info["import_error"] = "%s: %s" % (type(exc).__name__, exc)
# What the answer depends on, for the runner's probe cache (see python/cache.rs).
info["sys_path"] = [p for p in sys.path if p]
try:
    import site

    info["user_site"] = site.getusersitepackages()
except Exception:
    info["user_site"] = None
sys.stdout.write(json.dumps(info) + "\n")
