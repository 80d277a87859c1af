"""tools/rekey.py: a changed part is re-keyed only when reruns reproduce its records, wall-clock fields
aside."""

import copy
import importlib.util
import json
import textwrap

import torch

from tfclaims.harness import provenance
from tfclaims.harness.registry import REPO_ROOT, load_file
from tfclaims.harness.runner import run_experiment

spec = importlib.util.spec_from_file_location("rekey", REPO_ROOT / "tools" / "rekey.py")
rekey = importlib.util.module_from_spec(spec)
spec.loader.exec_module(rekey)

SEEDED = """
import time
import torch
from tfclaims.harness.experiment import Experiment, Verdict


class Seeded(Experiment):
    claim_id = "seeded"
    title = statement = rule = "seeded"
    profiles = {name: {"seeds": [0, 1]} for name in ("quick", "default", "full")}

    def grid(self, p):
        return self.with_seeds([{"i": 0}], p["seeds"])

    def run_one(self, cfg, ctx):
        return {"value": float(torch.rand(())), "curve": torch.rand(3).tolist(), "seconds": time.time()}

    def analyse(self, runs, p, out):
        return Verdict("supported", "seeded", "-")
"""


def seeded(tmp_path, monkeypatch, profile: str):
    """The seeded experiment, run at `profile` into tmp_path (its records under seeded/runs)."""
    d = tmp_path / "experiments"
    d.mkdir()
    (d / "seeded.py").write_text(textwrap.dedent(SEEDED))
    monkeypatch.setenv("TFCLAIMS_EXPERIMENTS", str(d))
    exp = load_file(d / "seeded.py")
    rc, _ = run_experiment(
        exp,
        profile=profile,
        device=torch.device("cpu"),
        results_root=tmp_path,
        progress=False,
        log=lambda m: None,
    )
    assert rc == 0
    return exp


def test_wall_clock_fields_are_left_out_at_every_depth_and_nothing_else():
    m = {"seconds": 1.0, "loss": 2.0, "probes": [{"steps_per_s": 3.0, "x": 4}], "swap": {"wall_s": 5, "y": 6}}
    assert rekey.computed(m) == {"loss": 2.0, "probes": [{"x": 4}], "swap": {"y": 6}}


def test_a_rerun_reproduces_a_seeded_record_and_catches_a_changed_number(tmp_path, monkeypatch):
    exp = seeded(tmp_path, monkeypatch, "quick")
    rec = json.loads(next((tmp_path / "seeded" / "runs").glob("*.json")).read_text())
    scratch = tmp_path / "scratch"
    scratch.mkdir()
    same, rid = rekey.rerun_equal(exp, rec, scratch)
    assert same and rid == rec["run_id"]  # the seconds differ; the seeded numbers do not
    for path in (("value",), ("curve", 2)):
        changed = copy.deepcopy(rec)
        *head, last = path
        target = changed["metrics"]
        for k in head:
            target = target[k]
        target[last] += 1e-12
        assert not rekey.rerun_equal(exp, changed, scratch)[0]


def test_records_named_by_leave_are_left_to_rerun_and_the_rest_are_re_keyed(tmp_path, monkeypatch):
    exp = seeded(tmp_path, monkeypatch, "default")
    runs = tmp_path / "seeded" / "runs"
    before = {json.loads(f.read_text())["config"]["seed"]: f.stem for f in runs.glob("*.json")}
    # the committed result is today's, the code every run reaches changed, a rerun reproduces the records
    monkeypatch.setattr(rekey, "committed_at", lambda since, path: path.read_text())
    for mod in (rekey, provenance):
        monkeypatch.setattr(mod, "run_code_hash", lambda exp, cfg: "0123456789abcdef")
    monkeypatch.setattr(rekey, "rerun_equal", lambda exp, rec, scratch: (True, rec["run_id"]))
    both = rekey.rekey(
        "seeded", exp, "abc123", tmp_path, n_verify=1, dry=True, leave=[("seed", "0"), ("seed", "1")]
    )
    assert "2 records left to rerun (--leave)" in both  # one key, two values: both left
    out = rekey.rekey("seeded", exp, "abc123", tmp_path, n_verify=1, dry=False, leave=[("seed", "1")])
    assert "1 records re-keyed" in out and "1 records left to rerun (--leave)" in out
    after = {
        json.loads(f.read_text())["config"]["seed"]: json.loads(f.read_text()) for f in runs.glob("*.json")
    }
    assert after[1]["run_id"] == before[1] and "rekeyed" not in after[1]  # left as filed, to be rerun
    assert after[0]["run_id"] != before[0] and after[0]["rekeyed"][0]["run_id"] == before[0]
    assert not (runs / f"{before[0]}.json").exists()
