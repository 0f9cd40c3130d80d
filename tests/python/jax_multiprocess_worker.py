"""One process of test_jax_multiprocess.py: joins the others with jax.distributed, builds a mesh
over every process's CPU devices, runs kv_cache_update and the paged scatter inside shard_map
and checks the shards it holds against pure JAX.

Usage: python jax_multiprocess_worker.py COORDINATOR_PORT NUM_PROCESSES PROCESS_ID
"""

import os
import sys

os.environ["XLA_FLAGS"] = "--xla_force_host_platform_device_count=2"

import jax  # noqa: E402

port, num_processes, process_id = (int(a) for a in sys.argv[1:4])
jax.config.update("jax_platforms", "cpu")
jax.distributed.initialize(coordinator_address=f"127.0.0.1:{port}", num_processes=num_processes,
                           process_id=process_id, initialization_timeout=60)

import jax.numpy as jnp  # noqa: E402
import numpy as np  # noqa: E402
from jax.sharding import NamedSharding  # noqa: E402
from jax.sharding import PartitionSpec as P  # noqa: E402

import kvscatter.jax as kj  # noqa: E402

assert jax.process_count() == num_processes and jax.device_count() == 2 * num_processes
mesh = jax.make_mesh((jax.device_count(),), ("heads",))
rng = np.random.default_rng(1234)  # every process draws the same global data


def global_array(host, spec):
    sharding = NamedSharding(mesh, spec)
    return jax.make_array_from_callback(host.shape, sharding, lambda idx: host[idx])


def check_shards(out, want, name):
    assert len(out.addressable_shards) == 2, name
    for shard in out.addressable_shards:
        got = np.asarray(shard.data)
        np.testing.assert_array_equal(got.view(np.uint8), np.asarray(want[shard.index]).view(np.uint8),
                                      err_msg=f"{name} shard {shard.index}")


# kv_cache_update: (B, S, H, D) caches sharded along the heads.
b, s, h, d, L = 2, 16, 8, 4, 3
kc_h = rng.standard_normal((b, s, h, d)).astype(jnp.bfloat16)
vc_h = rng.standard_normal((b, s, h, d)).astype(jnp.bfloat16)
nk_h = rng.standard_normal((b, L, h, d)).astype(np.float32)
nv_h = rng.standard_normal((b, L, h, d)).astype(np.float32)
spec = P(None, None, "heads", None)
step = jax.jit(jax.shard_map(kj.kv_cache_update, mesh=mesh, in_specs=(spec, spec, spec, spec, P()),
                             out_specs={"key_cache": spec, "value_cache": spec, "length": P()}),
               donate_argnums=(0, 1))
kc, vc = global_array(kc_h, spec), global_array(vc_h, spec)
nk, nv = global_array(nk_h, spec), global_array(nv_h, spec)
for pos in (5, -2, 40):
    want_k = jax.lax.dynamic_update_slice(jnp.asarray(kc_h), jnp.asarray(nk_h).astype(jnp.bfloat16), (0, pos, 0, 0))
    want_v = jax.lax.dynamic_update_slice(jnp.asarray(vc_h), jnp.asarray(nv_h).astype(jnp.bfloat16), (0, pos, 0, 0))
    out = step(kc, vc, nk, nv, jnp.int32(pos))
    check_shards(out["key_cache"], want_k, "key_cache")
    check_shards(out["value_cache"], want_v, "value_cache")
    kc, vc = out["key_cache"], out["value_cache"]
    kc_h, vc_h = np.asarray(want_k), np.asarray(want_v)

# The paged scatter (Norm): tokens and caches sharded along the heads, slots replicated.
t, nb, bs, dk = 10, 4, 4, 8
key_h = rng.standard_normal((t, h, dk)).astype(np.float32)
cache_h = rng.standard_normal((nb, bs, h, dk)).astype(np.float32)
slots_h = rng.permutation(nb * bs)[:t].astype(np.int32)
slots_h[::4] = -1
want = np.array(cache_h)
flat = want.reshape(nb * bs, h, dk)
for i, slot in enumerate(slots_h):
    if slot >= 0:
        flat[slot] = key_h[i]
tok, cache_spec = P(None, "heads", None), P(None, None, "heads", None)
scatter = jax.jit(jax.shard_map(lambda k, c, sl: kj.scatter_pa_kv_cache(k, None, c, None, sl)[0],
                                mesh=mesh, in_specs=(tok, cache_spec, P()), out_specs=cache_spec),
                  donate_argnums=(1,))
out = scatter(global_array(key_h, tok), global_array(cache_h, cache_spec), global_array(slots_h, P()))
check_shards(out, want, "paged key_cache")
jax.distributed.shutdown()
print(f"process {process_id}: OK")
