"""Two processes on localhost joined by jax.distributed: shard_map over a global mesh."""

import os
import pathlib
import socket
import subprocess
import sys

from needs import need

need("jax")
need("kvscatter.jax")

WORKER = pathlib.Path(__file__).with_name("jax_multiprocess_worker.py")


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def test_two_processes_shard_map():
    num = 2
    env = {k: v for k, v in os.environ.items() if k != "XLA_FLAGS"}
    for attempt in range(3):  # the port may be taken between probing and binding it
        port = free_port()
        procs = [subprocess.Popen([sys.executable, str(WORKER), str(port), str(num), str(i)],
                                  stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=env)
                 for i in range(num)]
        outputs = []
        for p in procs:
            try:
                outputs.append(p.communicate(timeout=120)[0])
            except subprocess.TimeoutExpired:
                for q in procs:
                    q.kill()
                outputs.append(p.communicate()[0])
        if all(p.returncode == 0 for p in procs):
            break
        if not any("address already in use" in o.lower() for o in outputs):
            break
    for i, (p, out) in enumerate(zip(procs, outputs)):
        assert p.returncode == 0, f"process {i} failed:\n{out[-4000:]}"
        assert f"process {i}: OK" in out
