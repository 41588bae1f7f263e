# jax-runner telemetry shim, loaded by Python at start-up through PYTHONPATH.
#
# It records what jax really did: the backend and devices it initialised, how many XLA
# compilations ran and how long they took, persistent-cache hits, and the type of an
# uncaught exception. It never imports jax itself (a script that never imports jax
# pays nothing), never prints, and never changes the exit code. Any sitecustomize that
# was already on the path is loaded after it, exactly as Python would have.
import os as _jr_os
import sys as _jr_sys
import time as _jr_time


def _jr_process_age():
    """Seconds since the kernel started this process (the interpreter's start-up, when
    read here), from /proc; None where that is not readable."""
    try:
        with open("/proc/self/stat", "rb") as fh:
            fields = fh.read().rsplit(b")", 1)[1].split()
        started = int(fields[19]) / _jr_os.sysconf("SC_CLK_TCK")
        return max(0.0, _jr_time.clock_gettime(_jr_time.CLOCK_BOOTTIME) - started)
    except Exception:
        return None


_jr_startup_s = _jr_process_age()

# The runner's sampling tick, seconds (`SAMPLE_EVERY` in src/runner/child.rs).
_JR_TICK_S = 0.1


def _jr_exit_pss_kb():
    """This process's proportional set size in kB (`Pss` of smaps_rollup), read as it
    exits: the runner reads a script's memory at a pace (src/runner/pace.rs) and takes
    this for the end it may have left unread. Only for a process that lived a tick or
    more: a shorter one has its peak from the kernel, and the walk of its page tables
    (1 to 8 ms) would be much of its run."""
    age = _jr_process_age()
    if age is None or age < _JR_TICK_S:
        return None
    try:
        with open("/proc/self/smaps_rollup", "rb") as fh:
            for line in fh:
                if line.startswith(b"Pss:"):
                    return int(line.split()[1])
    except (OSError, ValueError, IndexError):
        pass
    return None


# Start-up time matters (it is paid by every script): only modules Python has already
# loaded are used here, so json, importlib.util and their imports are never pulled in.
from _frozen_importlib import module_from_spec as _jr_module_from_spec
from _frozen_importlib_external import PathFinder as _jr_PathFinder


def _jr_chain_next_sitecustomize(search=None):
    """Runs the next sitecustomize on `search` (default: sys.path, which at start-up
    does not hold the script's folder yet), this one's folder left out."""
    here = _jr_os.path.dirname(_jr_os.path.abspath(__file__))
    me = _jr_sys.modules.get("sitecustomize")
    search = _jr_sys.path if search is None else search
    path = [p for p in search if _jr_os.path.abspath(p or ".") != here]
    try:
        spec = _jr_PathFinder.find_spec("sitecustomize", path)
        if spec is not None and spec.loader is not None:
            module = _jr_module_from_spec(spec)
            _jr_sys.modules["sitecustomize"] = module
            spec.loader.exec_module(module)
    except Exception as exc:  # Python reports a broken sitecustomize the same way
        _jr_sys.stderr.write("Error in sitecustomize; set PYTHONVERBOSE for traceback:\n")
        _jr_sys.stderr.write("%s: %s\n" % (type(exc).__name__, exc))
    finally:
        if me is not None:
            _jr_sys.modules["sitecustomize"] = me


def _jr_dumps(value):
    """JSON for the report's plain values, without importing json (3.5 ms)."""
    if value is None:
        return "null"
    if value is True or value is False:
        return "true" if value else "false"
    if isinstance(value, (int, float)):
        return repr(value) if value == value and value not in (float("inf"), float("-inf")) else "null"
    if isinstance(value, str):
        out = []
        for ch in value:
            code = ord(ch)
            if ch in '"\\':
                out.append("\\" + ch)
            elif code < 0x20:
                out.append("\\u%04x" % code)
            else:
                out.append(ch)
        return '"' + "".join(out) + '"'
    if isinstance(value, (list, tuple)):
        return "[" + ",".join(_jr_dumps(v) for v in value) + "]"
    if isinstance(value, dict):
        return "{" + ",".join(_jr_dumps(str(k)) + ":" + _jr_dumps(v) for k, v in value.items()) + "}"
    return _jr_dumps(str(value))


_jr_script_globals = []


def jax_runner_note_script_globals(namespace):
    """The warm-start zygote hands over the script's module namespace once it ran."""
    _jr_script_globals.append(namespace)


def _jr_refers_to_jax(namespace):
    for value in list(namespace.values()):
        owner = getattr(value, "__name__", None) if isinstance(value, type(_jr_sys)) else None
        owner = owner or getattr(value, "__module__", None) or type(value).__module__
        if isinstance(owner, str) and owner.split(".", 1)[0] in ("jax", "jaxlib"):
            return True
    return False


def _jr_script_imported_jax(preloaded):
    """Warm, jax was imported before the script: did the script (its module, or a
    module it imported) take it up? What a cold start's import hook would have seen."""
    for namespace in _jr_script_globals:
        if _jr_refers_to_jax(namespace):
            return True
    # Newest first, stopping at the preload's: modules are kept in the order they were
    # imported, so only the script's are looked at (a forked child that walked all of
    # sys.modules would copy every page their names are on, 1 ms).
    modules = _jr_sys.modules
    fresh = []
    for name in reversed(modules):  # nothing imports meanwhile: the dict stays as is
        if name in preloaded:
            break
        fresh.append(name)
    for name in fresh:
        if name.split(".", 1)[0] in ("jax", "jaxlib"):
            continue
        if _jr_refers_to_jax(getattr(modules.get(name), "__dict__", {})):
            return True
    return False


def jax_runner_install_telemetry(out_path, jax_already_imported=False, preloaded=None,
                                 forked=False):
    """Records what jax does in this process into `out_path` at exit. The warm-start
    zygote calls it in each forked script (`forked`: no start-up of its own to time),
    where jax is already imported but in a lean zygote, with the names of the modules
    it imported (made once, before its forks)."""
    state = {
        "jax_imported": False,
        "backend": None,
        "devices": [],
        "device_kinds": [],
        "compilations": 0,
        "compile_time_s": 0.0,
        "cache_hits": 0,
        "cache_misses": 0,
        "uncaught_exception": None,
        "trace_time_s": 0.0,
        "lowering_time_s": 0.0,
    }
    if _jr_startup_s is not None and not (jax_already_imported or forked):
        state["startup_s"] = _jr_startup_s
    import_started = []

    # Before the runner stops a script (its timeout, Ctrl-C), it sends signal 62 to
    # each of its processes that catches it: every thread's stack goes to stderr, so
    # the record can say where the time ran out, and the script runs on to the SIGTERM
    # that follows. A signal of its own, not SIGTERM: a script that handles, ignores or
    # blocks SIGTERM still writes its stacks, before any handler of its own has run.
    # A fatal signal (SIGSEGV, SIGABRT, SIGBUS, SIGFPE, SIGILL: a crash in XLA's or a
    # library's C code) dumps the stacks the same way, as `python -X faulthandler`
    # does, so the record can say where it died; the process then dies of the same
    # signal.
    try:
        import faulthandler

        faulthandler.enable(all_threads=True)
        # By number: `import signal` would pull in enum, functools and collections, 4 ms
        # of every cold start (measured with -X importtime). The runner's
        # `STACKS_SIGNAL` (src/runner/child/stop.rs).
        faulthandler.register(62, all_threads=True)
    except (ImportError, AttributeError, ValueError, RuntimeError, OSError):
        pass

    previous_hook = _jr_sys.excepthook

    def excepthook(kind, value, tb):
        state["uncaught_exception"] = getattr(kind, "__name__", str(kind))
        previous_hook(kind, value, tb)

    _jr_sys.excepthook = excepthook

    def on_duration(event, duration, **_kwargs):
        # A persistent-cache hit still emits a compile-duration event.
        if event == "/jax/core/compile/backend_compile_duration":
            state["compilations"] += 1
            state["compile_time_s"] += float(duration)
        elif event == "/jax/core/compile/jaxpr_trace_duration":
            state["trace_time_s"] += float(duration)
        elif event == "/jax/core/compile/jaxpr_to_mlir_module_duration":
            state["lowering_time_s"] += float(duration)

    def on_event(event, **_kwargs):
        if event == "/jax/compilation_cache/cache_hits":
            state["cache_hits"] += 1
        elif event == "/jax/compilation_cache/cache_misses":
            state["cache_misses"] += 1

    profile_dir = _jr_os.environ.get("JAX_RUNNER_PROFILE_DIR")

    def stop_profile():
        if not (profile_dir and state.get("profiling")):
            return
        try:
            import glob

            from jax import profiler

            profiler.stop_trace()
            traces = sorted(glob.glob(_jr_os.path.join(profile_dir, "**", "*.trace.json.gz"), recursive=True))
            state["profile_trace"] = traces[-1] if traces else None
        except Exception as exc:
            state["profile_error"] = "%s: %s" % (type(exc).__name__, exc)

    def write():
        stop_profile()
        try:
            state["exit_pss_kb"] = _jr_exit_pss_kb()
        except Exception:
            pass
        try:
            # The kernel's figures for this process and the children it waited for:
            # inside a sandbox the runner's own wait4 only sees bwrap.
            t = _jr_os.times()
            state["cpu_user_s"] = t.user + t.children_user
            state["cpu_system_s"] = t.system + t.children_system
        except Exception:
            pass
        try:
            bridge = _jr_sys.modules.get("jax._src.xla_bridge")
            default = getattr(bridge, "_default_backend", None) if bridge else None
            if default is not None:  # only read a backend that is already initialised
                state["backend"] = default.platform
                devices = default.devices()
                state["devices"] = [str(d) for d in devices]
                state["device_kinds"] = sorted({getattr(d, "device_kind", "") for d in devices})
        except Exception:
            pass
        if jax_already_imported:
            try:
                state["jax_imported"] = bool(
                    state["backend"] or state["compilations"] or _jr_script_imported_jax(preloaded)
                )
            except Exception:
                pass
        try:
            tmp = "%s.%d.tmp" % (out_path, _jr_os.getpid())
            with open(tmp, "w", encoding="utf-8") as fh:
                fh.write(_jr_dumps(state))
            _jr_os.replace(tmp, out_path)
        except Exception:
            pass

    def time_backend_init():
        """Times the first initialisation of jax's backends (plugin discovery, the
        client, the devices): a function of jax's, wrapped once, left alone after."""
        bridge = _jr_sys.modules.get("jax._src.xla_bridge")
        inner = getattr(bridge, "backends", None)
        if inner is None:
            return

        def backends(*args, **kwargs):
            if "backend_init_s" in state:
                return inner(*args, **kwargs)
            t0 = _jr_time.monotonic()
            try:
                return inner(*args, **kwargs)
            finally:
                state["backend_init_s"] = _jr_time.monotonic() - t0
                bridge.backends = inner

        bridge.backends = backends

    def on_jax_imported():
        state["jax_imported"] = True
        if import_started:
            state["jax_import_s"] = _jr_time.monotonic() - import_started[0]
        try:
            time_backend_init()
        except Exception:
            pass
        try:
            import atexit

            from jax import monitoring

            monitoring.register_event_duration_secs_listener(on_duration)
            monitoring.register_event_listener(on_event)
            if profile_dir:
                from jax import profiler

                profiler.start_trace(profile_dir)
                state["profiling"] = True
            # Registered after jax's own atexit handlers, so it runs before they
            # clear the backends.
            atexit.register(write)
        except Exception:
            pass

    class Loader:
        def __init__(self, inner):
            self._inner = inner

        def create_module(self, spec):
            return self._inner.create_module(spec)

        def exec_module(self, module):
            self._inner.exec_module(module)
            on_jax_imported()

        def __getattr__(self, name):
            return getattr(self._inner, name)

    class Finder:
        """Wraps the loader of the top-level `jax` package, then steps aside."""

        def find_spec(self, name, path=None, target=None):
            if name != "jax":
                return None
            import_started.append(_jr_time.monotonic())
            _jr_sys.meta_path.remove(self)
            spec = None
            for finder in _jr_sys.meta_path:
                find = getattr(finder, "find_spec", None)
                spec = find("jax", path, target) if find else None
                if spec is not None:
                    break
            if spec is not None and spec.loader is not None:
                spec.loader = Loader(spec.loader)
            return spec

    if jax_already_imported:
        if preloaded is None:
            preloaded = frozenset(_jr_sys.modules)
        on_jax_imported()
        return
    _jr_sys.meta_path.insert(0, Finder())

    import atexit

    # Covers scripts that never import jax: the file still says so.
    atexit.register(lambda: state["jax_imported"] or write())


try:
    if _jr_os.environ.get("JAX_RUNNER_TELEMETRY"):
        jax_runner_install_telemetry(_jr_os.environ["JAX_RUNNER_TELEMETRY"])
except Exception:
    pass
# The warm-start zygote runs any other sitecustomize in each forked script instead, as
# a cold start runs it: in the script's own process, with the script's environment.
jax_runner_chain_sitecustomize = _jr_chain_next_sitecustomize
del _jr_chain_next_sitecustomize
if not _jr_os.environ.get("JAX_RUNNER_ZYGOTE"):
    jax_runner_chain_sitecustomize()
