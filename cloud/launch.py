"""`python -m tpuedge.cloud.launch --processes P [options] script.py [args...]`: a local job of P
processes for development and tests, each with its own host CPU devices.

Every process runs `script.py` after joining the job (tpuedge.cloud.distributed), so the script
is the one a TPU slice runs, unchanged. Process 0's output is shown; the others' goes to
`--log-dir` (shown when they fail) unless `--all-output`. SIGTERM or SIGINT to the launcher is
passed to every process (a preemption: each writes its checkpoint and exits). When one process
fails, the others are stopped. Exit code: the first failing process's, 124 on `--timeout`.
"""

from __future__ import annotations

import argparse
import os
import signal
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

__all__ = ["main", "child_environment", "free_port"]

# Runs in each process: join the job before the script's first line, and turn a UserError into
# its one paragraph and exit code 2, as the CLI does. A process that fails leaves at once: a
# normal exit would wait at JAX's shutdown barrier for peers that are still training.
_BOOTSTRAP = """
import os, runpy, sys, traceback
from tpuedge.shared_ir.errors import TpuedgeError
def leave(code):
    sys.stdout.flush(); sys.stderr.flush()
    os._exit(code)
try:
    from tpuedge.cloud.distributed import initialize
    initialize()
    sys.argv = sys.argv[1:]
    sys.path.insert(0, os.path.dirname(os.path.abspath(sys.argv[0])))
    runpy.run_path(sys.argv[0], run_name="__main__")
except TpuedgeError as error:
    print(f"error: {error}", file=sys.stderr)
    leave(getattr(error, "exit_code", 1))
except SystemExit as stop:
    if isinstance(stop.code, str):
        print(stop.code, file=sys.stderr)
    if stop.code not in (None, 0):
        leave(stop.code if isinstance(stop.code, int) else 1)
    raise
except BaseException:
    traceback.print_exc()
    leave(1)
"""

STOP_GRACE_S = 10.0


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def child_environment(
    base: dict[str, str], *, port: int, processes: int, process_id: int, devices: int
) -> dict[str, str]:
    """The environment of process `process_id`: the job's coordinator, count and id, `devices`
    host CPU devices, and gloo for CPU collectives."""
    from tpuedge.cloud.distributed import ENV_COORDINATOR, ENV_NUM_PROCESSES, ENV_PROCESS_ID

    env = dict(base)
    flags = [f for f in env.get("XLA_FLAGS", "").split() if not f.startswith("--xla_force_host_platform_device_count")]
    env["XLA_FLAGS"] = " ".join(flags + [f"--xla_force_host_platform_device_count={devices}"])
    env.setdefault("JAX_PLATFORMS", "cpu")
    env["JAX_CPU_COLLECTIVES_IMPLEMENTATION"] = "gloo"
    env[ENV_COORDINATOR] = f"127.0.0.1:{port}"
    env[ENV_NUM_PROCESSES] = str(processes)
    env[ENV_PROCESS_ID] = str(process_id)
    return env


def _stop(procs: list[subprocess.Popen]) -> None:
    """SIGTERM each process group still running, SIGKILL what is left after a grace period."""
    for p in procs:
        if p.poll() is None:
            os.killpg(p.pid, signal.SIGTERM)
    deadline = time.monotonic() + STOP_GRACE_S
    for p in procs:
        try:
            p.wait(timeout=max(0.0, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            os.killpg(p.pid, signal.SIGKILL)
            p.wait()


def _failure(procs: list[subprocess.Popen]) -> int:
    """The exit code of a process that failed on its own (not one its peers took down with
    them: killed by a signal or aborted), else of any failed one, else 0."""
    failed = [p for p in procs if p.returncode not in (None, 0)]
    if not failed:
        return 0
    return min(failed, key=lambda p: (p.returncode < 0 or p.returncode >= 128, procs.index(p))).returncode


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tpuedge.cloud.launch", description=__doc__.split("\n\n")[0])
    parser.add_argument("--processes", type=int, required=True, help="processes in the job")
    parser.add_argument("--devices-per-process", type=int, default=1, help="host CPU devices of each process")
    parser.add_argument("--timeout", type=float, default=None, help="stop the job after this many seconds (exit 124)")
    parser.add_argument("--all-output", action="store_true", help="show every process's output, not only process 0's")
    parser.add_argument(
        "--log-dir", default=None, help="where the other processes' output goes (default: a temp folder)"
    )
    parser.add_argument("script")
    parser.add_argument("args", nargs=argparse.REMAINDER)
    opts = parser.parse_args(argv)
    if opts.processes < 1 or opts.devices_per_process < 1:
        print("error: --processes and --devices-per-process must be at least 1.", file=sys.stderr)
        return 2
    if not Path(opts.script).is_file():
        print(
            f"error: the script {opts.script!r} does not exist; give the path of the training script.", file=sys.stderr
        )
        return 2
    log_dir = Path(opts.log_dir or tempfile.mkdtemp(prefix="tpuedge-launch-"))
    log_dir.mkdir(parents=True, exist_ok=True)
    port = free_port()
    procs, logs = [], []
    for i in range(opts.processes):
        env = child_environment(
            dict(os.environ), port=port, processes=opts.processes, process_id=i, devices=opts.devices_per_process
        )
        log = None if i == 0 or opts.all_output else open(log_dir / f"process{i}.log", "wb")
        logs.append(log)
        procs.append(
            subprocess.Popen(
                [sys.executable, "-c", _BOOTSTRAP, opts.script, *opts.args],
                env=env,
                stdout=log,
                stderr=subprocess.STDOUT if log else None,
                start_new_session=True,
            )
        )

    def forward(signum, _frame):
        for p in procs:
            if p.poll() is None:
                os.killpg(p.pid, signum)

    previous = {s: signal.signal(s, forward) for s in (signal.SIGTERM, signal.SIGINT)}
    deadline = time.monotonic() + opts.timeout if opts.timeout else None
    code = 0
    try:
        while True:
            running = [p for p in procs if p.poll() is None]
            code = _failure(procs)
            if code or not running:
                break
            if deadline is not None and time.monotonic() > deadline:
                print(f"error: the job ran past --timeout {opts.timeout:g} s and was stopped.", file=sys.stderr)
                code = 124
                break
            time.sleep(0.05)
    finally:
        _stop(procs)
        for s, handler in previous.items():
            signal.signal(s, handler)
        for i, log in enumerate(logs):
            if log is not None:
                log.close()
                if procs[i].returncode not in (0, None) and code not in (0,):
                    tail = (log_dir / f"process{i}.log").read_text(errors="replace").strip().splitlines()[-20:]
                    if tail:
                        print(
                            f"--- process {i} (exit {procs[i].returncode}), last lines:",
                            *tail,
                            sep="\n",
                            file=sys.stderr,
                        )
    return code if code >= 0 else 128 - code


if __name__ == "__main__":
    sys.exit(main())
