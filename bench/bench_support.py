"""What the bench scripts that start xferd on its simulated device share: their config and
how they read the daemon's resident memory.

    from bench_support import SMALL_PLAN, rss_kib, sim_config

(bench/ is the folder of the script run, so it is on the import path.)
"""


# One 1 MiB probe of 8 timed transfers after 1 warm-up: cycles that cost next to nothing.
SMALL_PLAN = 'sizes = ["1MiB"]\niterations = 8\nwarmup = 1\n'


def sim_config(interval, devices=None, plan=""):
    """A config that runs xferd on the simulated device every `interval` ("1s") with no
    jitter and no duty-cycle cap, its probes taking no simulated time; `devices` GPUs
    (None: the simulator's default), `plan` more [probe] lines (SMALL_PLAN; "" for the
    default plan: every mode and direction at 64 MiB)."""
    return (f'[probe]\ninterval = "{interval}"\njitter = 0\n{plan}max_duty_cycle = 1.0\n\n'
            "[simulate]\nenabled = true\ntime_scale = 0.0\n" +
            (f"devices = {devices}\n" if devices is not None else ""))


def rss_kib(pid):
    """The resident memory (VmRSS) of process `pid` in KiB; 0 where it has none."""
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    return 0
