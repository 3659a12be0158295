"""Start and stop what Stepscope runs beside the web server, for `make run` / `make stop`.

    python -m stepscope.processes up       # embedded PostgreSQL and Redis (unless configured)
    python -m stepscope.processes worker   # a Celery worker on both queues, in the background,
                                           # with beat (the periodic tasks) inside it
    python -m stepscope.processes rewards  # the reward service's worker, in the background
    python -m stepscope.processes down     # stop the worker and the embedded servers

Each command is idempotent. Django-free, like ``stepscope.embedded``.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

from stepscope import embedded

BASE_DIR = Path(__file__).resolve().parent.parent
# The worker's niceness under `make run` (STEPSCOPE_WORKER_NICE).
WORKER_NICE = 10
# The worker's processes: each runs one task at a time.
WORKER_CONCURRENCY = 2


def data_dir() -> Path:
    return Path(os.environ.get("STEPSCOPE_DATA_DIR") or BASE_DIR / ".stepscope").resolve()


def _worker_pid_file() -> Path:
    return data_dir() / "celery-worker.pid"


def _reward_worker_pid_file() -> Path:
    return data_dir() / "reward-worker.pid"


def beat_schedule_file() -> Path:
    """Where the worker's beat keeps when each periodic task last ran."""
    return data_dir() / "celerybeat-schedule"


def up() -> None:
    if os.environ.get("DATABASE_URL"):
        print("postgres: using DATABASE_URL")
    else:
        address = embedded.postgres_ensure(data_dir())
        print(f"postgres: embedded, socket in {address.socket_dir}")
    if os.environ.get("CELERY_BROKER_URL"):
        print("redis: using CELERY_BROKER_URL")
    else:
        print(f"redis: embedded, {embedded.redis_ensure(data_dir())}")


def _pid_alive(pid_file: Path) -> int | None:
    try:
        pid = int(pid_file.read_text().strip())
        os.kill(pid, 0)
    except (FileNotFoundError, ValueError, ProcessLookupError):
        return None
    return pid


def worker() -> None:
    pid_file = _worker_pid_file()
    pid = _pid_alive(pid_file)
    if pid is not None:
        print(f"celery worker: already running (pid {pid})")
        return
    pid_file.unlink(missing_ok=True)
    log_file = data_dir() / "celery-worker.log"
    niceness = worker_niceness()
    subprocess.run(
        [
            sys.executable,
            "-m",
            "celery",
            "-A",
            "stepscope",
            "worker",
            "-Q",
            "default,gpu",
            "--concurrency",
            str(WORKER_CONCURRENCY),
            # The periodic tasks (CELERY_BEAT_SCHEDULE: the sweep that finishes live
            # traces whose assembly task was lost, the followed folders) run in this one
            # worker; a deployment with several workers runs one `celery beat` instead.
            "--beat",
            f"--schedule={beat_schedule_file()}",
            "--detach",
            f"--pidfile={pid_file}",
            f"--logfile={log_file}",
            "--loglevel=INFO",
        ],
        check=True,
        cwd=BASE_DIR,
        env=worker_environment(),
        # The worker shares the machine with the web server here: annotators' requests
        # come first, and a scoring run takes what CPU they leave (docs/operating.md).
        preexec_fn=lambda: _lower_priority(niceness),
    )
    print(f"celery worker: started at nice {niceness} with beat, log in {log_file}")


def rewards() -> None:
    """The reward service's worker (``manage.py reward_worker``): it keeps scorers loaded
    and answers ``POST /api/v1/rewards/`` in batches."""
    pid_file = _reward_worker_pid_file()
    pid = _pid_alive(pid_file)
    if pid is not None:
        print(f"reward worker: already running (pid {pid})")
        return
    log_file = data_dir() / "reward-worker.log"
    niceness = worker_niceness()
    with log_file.open("ab") as log:
        process = subprocess.Popen(
            [sys.executable, "manage.py", "reward_worker"],
            cwd=BASE_DIR,
            env=worker_environment(),
            stdin=subprocess.DEVNULL,
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
            preexec_fn=lambda: _lower_priority(niceness),
        )
    pid_file.write_text(str(process.pid))
    print(f"reward worker: started at nice {niceness}, log in {log_file}")


def worker_environment() -> dict[str, str]:
    """The worker's environment: this one, with torch's OpenMP threads sleeping while
    they wait (OMP_WAIT_POLICY=PASSIVE, unless set) instead of spinning. Two processes
    each running as many threads as there are cores, beside the web server and
    PostgreSQL, spin on each other's cores: on two busy cores a step of the demo
    policy's training took 4.8 s of CPU with two spinning threads, 0.73 s with two
    passive ones and 0.77 s with one."""
    return {**os.environ, "OMP_WAIT_POLICY": os.environ.get("OMP_WAIT_POLICY") or "PASSIVE"}


def _lower_priority(niceness: int) -> None:
    os.nice(niceness)


def worker_niceness() -> int:
    """How much lower the worker's CPU priority is than the web server's (0 to 19)."""
    raw = os.environ.get("STEPSCOPE_WORKER_NICE", "").strip() or str(WORKER_NICE)
    if not raw.isdigit() or not 0 <= int(raw) <= 19:
        raise SystemExit(f"STEPSCOPE_WORKER_NICE={raw!r} is not a niceness from 0 to 19")
    return int(raw)


def down() -> None:
    reward_pid = _pid_alive(_reward_worker_pid_file())
    if reward_pid is not None:
        os.kill(reward_pid, signal.SIGTERM)
        print("reward worker: stopped")
    _reward_worker_pid_file().unlink(missing_ok=True)
    pid = _pid_alive(_worker_pid_file())
    if pid is not None:
        os.kill(pid, signal.SIGTERM)
        deadline = time.monotonic() + 30
        while _pid_alive(_worker_pid_file()) == pid and time.monotonic() < deadline:
            time.sleep(0.2)
        print("celery worker: stopped")
    stopped = embedded.stop_all(data_dir())
    print("stopped: " + (", ".join(stopped) if stopped else "no embedded servers were running"))


def main(argv: list[str]) -> None:
    commands = {"up": up, "worker": worker, "rewards": rewards, "down": down}
    if len(argv) != 2 or argv[1] not in commands:
        sys.exit(f"usage: python -m stepscope.processes {{{'|'.join(commands)}}}")
    commands[argv[1]]()


if __name__ == "__main__":
    main(sys.argv)
