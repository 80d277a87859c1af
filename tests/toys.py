"""A toy claim that launcher tests write to a file of its own (workers and SLURM jobs load it by path).

Environment hooks, read inside each run:
- $TOY_CALLS: a file each execution appends "i,seed" to;
- $TOY_SLEEP: seconds every run sleeps; $TOY_SLEEP_<i>: seconds run i (seed 0) sleeps;
- $TOY_STARTED_<i>: a file run i (seed 0) writes its SLURM job id to when it starts (to cancel that job);
- $TOY_DIE_ONCE: the run i=1, seed 0 kills its own process once, when this names a file that does not exist
  yet (a pre-empted or OOM-killed job); $TOY_DIE_ALWAYS: every time;
- $TOY_CATCH: the run i=1, seed 0 sleeps this long inside `except Exception`, and files -100.0 if anything
  interrupts it (a recipe that catches what it should not);
- $TOY_HOLD_MB: the run i=1, seed 0 holds this much memory while it sleeps;
- $TOY_GATE_<i>: run i (seed 0) waits until this file exists (a run that ends when a test lets it).
"""

TOY = """
import os, signal, time
import torch
from tfclaims.harness.experiment import Experiment, Verdict


class Toy(Experiment):
    claim_id = "toy"
    title = "toy"
    statement = "toy claim"
    rule = "supported if the mean is positive"
    profiles = {"quick": {"n": 3, "seeds": [0, 1]}, "default": {"n": 12, "seeds": [0, 1, 2]},
                "full": {"n": 12, "seeds": [0, 1, 2]}}

    def grid(self, p):
        return self.with_seeds([{"i": i} for i in range(p["n"])], p["seeds"])

    def run_one(self, cfg, ctx):
        i, seed, env = cfg["i"], cfg["seed"], os.environ
        if env.get("TOY_CALLS"):
            with open(env["TOY_CALLS"], "a") as f:
                f.write(f"{i},{seed}\\n")
        if seed == 0 and env.get(f"TOY_STARTED_{i}"):
            array = "SLURM_ARRAY_JOB_ID" in env
            task = f"{env['SLURM_ARRAY_JOB_ID']}_{env['SLURM_ARRAY_TASK_ID']}" if array else None
            job = task or env["SLURM_JOB_ID"]
            open(env[f"TOY_STARTED_{i}"], "w").write(job)
        die = env.get("TOY_DIE_ONCE")
        if die and (i, seed) == (1, 0) and not os.path.exists(die):
            open(die, "w").close()
            os.kill(os.getpid(), signal.SIGKILL)
        if env.get("TOY_DIE_ALWAYS") and (i, seed) == (1, 0):
            os.kill(os.getpid(), signal.SIGKILL)
        if (i, seed) == (1, 0) and env.get("TOY_HOLD_MB"):
            held = bytearray(int(env["TOY_HOLD_MB"]) * 2**20)
            held[::4096] = b"x" * len(held[::4096])  # touched: resident, not merely reserved
        if (i, seed) == (1, 0) and env.get("TOY_CATCH"):
            try:
                time.sleep(float(env["TOY_CATCH"]))
            except Exception:
                return {"value": -100.0, "pid": os.getpid()}
        while seed == 0 and env.get(f"TOY_GATE_{i}") and not os.path.exists(env[f"TOY_GATE_{i}"]):
            time.sleep(0.2)
        own = float(env.get(f"TOY_SLEEP_{i}", "0")) if seed == 0 else 0
        time.sleep(float(env.get("TOY_SLEEP", "0")) + own)
        return {"value": i + float(torch.rand(())), "pid": os.getpid()}

    def analyse(self, runs, p, out):
        mean = sum(r["metrics"]["value"] for r in runs) / len(runs)
        return Verdict("supported" if mean > 0 else "refuted", "toy", f"mean {mean:.3f}", {"mean": mean})
"""


def register(folder, monkeypatch, source: str, name: str = "toy"):
    """`folder`/experiments holding one claim file `name`.py with `source`, registered as the claims folder
    ($TFCLAIMS_EXPERIMENTS); returns `folder`."""
    exps = folder / "experiments"
    exps.mkdir(exist_ok=True)
    (exps / f"{name}.py").write_text(source)
    monkeypatch.setenv("TFCLAIMS_EXPERIMENTS", str(exps))
    return folder
