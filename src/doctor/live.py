# jax-runner doctor's live check: initialise the backend JAX_PLATFORMS names, run a
# tiny jitted computation, and report where it ran. Failures end in a traceback that
# the runner's failure classifier reads.
import json
import time

t0 = time.perf_counter()
import jax  # noqa: E402
import jax.numpy as jnp  # noqa: E402

devices = jax.devices()
t1 = time.perf_counter()
out = jax.jit(lambda x: x * 2.0 + 1.0)(jnp.ones(8))
out.block_until_ready()
device = list(out.devices())[0]
print(json.dumps({
    "ok": float(out.sum()) == 24.0,
    "platform": device.platform,
    "device": "%s:%d" % (device.platform, device.id),
    "device_kind": device.device_kind,
    "init_s": t1 - t0,
}))
