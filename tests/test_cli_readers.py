"""The reader commands: `--help`, `list`, `show` and `plan` import no torch; `show` prints a result.json's
answer, sub-claims, caveats and provenance; `plan` counts a grid's cached runs and estimates the others from
the records."""

import json
import re
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
import torch

from tfclaims.cli import main
from tfclaims.harness.experiment import PROFILES
from tfclaims.harness.launch import LAUNCHERS
from tfclaims.harness.plan import MAX_SEEDS, resolve_profile, run_keys
from tfclaims.harness.registry import REPO_ROOT, load, load_all
from tfclaims.report.answers import answer_row

CPU = torch.device("cpu")


def imports_torch(*argv: str, before: str = "") -> tuple[int, bool, str, str]:
    """Run `tfclaims.cli.main(argv)` in a fresh interpreter, after the statement `before`: (exit code, whether
    torch was imported, out, err)."""
    code = textwrap.dedent(
        f"""
        import sys
        {before}
        from tfclaims.cli import main
        try:
            rc = main(sys.argv[1:])
        except SystemExit as e:
            rc = e.code
        print(f"\\nrc={{rc}} torch={{'torch' in sys.modules}}")
        """
    )
    out = subprocess.run(
        [sys.executable, "-c", code, *argv], capture_output=True, text=True, timeout=120, cwd=REPO_ROOT
    )
    *body, last = out.stdout.rstrip("\n").split("\n")
    m = re.fullmatch(r"rc=(\d+) torch=(True|False)", last)
    assert m, out.stdout + out.stderr
    return int(m[1]), m[2] == "True", "\n".join(body), out.stderr


@pytest.mark.parametrize(
    "argv",
    [
        ["--help"],
        ["list"],
        ["show", "ffn_share", "--results-dir", str(REPO_ROOT / "results")],
        ["show", "--help"],
        ["plan", "--help"],
        ["run", "--help"],
        ["show", "nonexistent"],
    ],
    ids=lambda a: "-".join(a),
)
def test_readers_import_no_torch(argv):
    rc, torch_imported, out, err = imports_torch(*argv)
    assert rc == (2 if "nonexistent" in argv else 0), err
    assert not torch_imported
    assert out or err


def test_the_check_sees_torch_imported():
    rc, torch_imported, out, _ = imports_torch("list", before="import tfclaims.nn.models")
    assert rc == 0 and torch_imported and "ffn_share" in out


@pytest.mark.slow
@pytest.mark.parametrize("cid", sorted(p.stem for p in (REPO_ROOT / "experiments").glob("[!_]*.py")))
def test_plan_imports_no_torch(cid):
    """Every claim's experiment file, grid and declarations load without torch; its recipes load on a run."""
    rc, torch_imported, out, err = imports_torch("plan", cid, "--profile", "default", "--device", "cpu")
    assert rc == 0, err
    assert not torch_imported
    assert out.startswith(f"{cid}, profile default, device cpu:")


def test_plan_asks_torch_about_cuda_only_where_a_gpu_driver_is():
    from tfclaims.device import GPU_DRIVER_PATHS

    rc, torch_imported, out, err = imports_torch("plan", "kv_cache", "--profile", "quick")
    assert rc == 0, err
    assert torch_imported == any(Path(p).exists() for p in GPU_DRIVER_PATHS)


def test_list_gives_the_registry_order_and_titles(capsys):
    assert main(["list"]) == 0
    got = capsys.readouterr().out.splitlines()
    assert got == [f"{cid:22s} {e.title}" for cid, e in load_all().items()]
    assert len(got) == len(list((REPO_ROOT / "experiments").glob("[!_]*/claim.py")))


def test_list_reports_an_unparsable_file_as_loading_it_would(tmp_path, monkeypatch, capsys):
    exps = tmp_path / "experiments"
    exps.mkdir()
    (exps / "broken.py").write_text("def oops(:\n")
    (exps / "outside.py").write_text("return 1\n")  # compiles to an error, parses as a module
    monkeypatch.setenv("TFCLAIMS_EXPERIMENTS", str(exps))
    broken = []
    assert load_all(broken) == {}
    assert main(["list"]) == 1
    err = capsys.readouterr().err.splitlines()
    assert err == [f"error: experiments/{cid}.py cannot be loaded ({why}); skipped" for cid, why in broken]
    assert len(err) == 2 and "SyntaxError" in err[0] and "'return' outside function" in err[1]


def test_help_constants_read_from_source_match_the_modules():
    from tfclaims.cli import _constant, _source_literals

    assert _constant("harness.experiment", "PROFILES") == PROFILES
    assert _constant("harness.launch", "LAUNCHERS") == LAUNCHERS
    assert _constant("harness.plan", "MAX_SEEDS") == MAX_SEEDS
    assert _source_literals("harness.experiment", "Experiment")["order"] == 100


# -- show ----------------------------------------------------------------------------------------------------

CAVEAT = "A long caveat about " + " ".join(f"word{i}" for i in range(40)) + "."


def synthetic_result() -> dict:
    return {
        "claim_id": "ffn_share",
        "title": "A synthetic title",
        "statement": "s",
        "notes_say": "the notes say seventeen things",
        "verdict": "mixed",
        "summary": "x",
        "key_number": "share 0.42 [0.40, 0.44]",
        "anchor_number": "anchor 0.66 (Vaswani et al.)",
        "sub_verdicts": [
            {
                "name": "Effect one holds",
                "verdict": "supported",
                "detail": "d",
                "id": "one",
                "kind": "effect",
            },
            {"name": "Effect two fails", "verdict": "refuted", "detail": "d", "id": "two", "counts": False},
            {
                "name": "Closed form equals count",
                "verdict": "supported",
                "detail": "d",
                "id": "c",
                "kind": "check",
            },
        ],
        "comparisons": [],
        "caveats": [CAVEAT, "Short caveat."],
        "profile": "quick",
        "params": {},
        "device": "cpu",
        "n_runs": 14,
        "git_commit": "0123456789abcdef0123456789abcdef01234567-dirty",
        "finished_at": "2026-01-02T03:04:05+00:00",
        "figures": {"fig-ffn_share-a": {"png": "figures/a.png", "svg": "figures/a.svg", "caption": "c"}},
        "tables": [],
    }


def test_show_prints_a_result(tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("COLUMNS", "60")
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("TFCLAIMS_REPORT", raising=False)
    res = synthetic_result()
    (tmp_path / "r" / "ffn_share").mkdir(parents=True)
    (tmp_path / "r" / "ffn_share" / "result.json").write_text(json.dumps(res))
    assert main(["show", "ffn_share", "--results-dir", "r"]) == 0
    out = capsys.readouterr().out
    lines = out.splitlines()
    flat = " ".join(out.split())
    row = answer_row(res)
    assert lines[0] == "ffn_share: A synthetic title"
    assert re.search(r"^Verdict +mixed$", out, re.M)
    for text in (row["answer"], row["note"], row["number"], row["anchor"], "Short caveat."):
        assert " ".join(str(text).split()) in flat, text
    assert re.search(r"^  supported +counted +Effect one holds$", out, re.M)
    assert re.search(r"^  refuted +reported +Effect two fails$", out, re.M)
    assert "Closed form equals count" not in out.split("Checks (1):")[0]  # a check is not an effect
    assert re.search(r"^Checks \(1\):\n  supported +Closed form equals count$", out, re.M)
    assert "Effect sub-claims (2):" in out
    caveat = lines.index("Caveats:")
    assert lines[caveat + 1].startswith("  - A long caveat about") and lines[caveat + 2].startswith(
        "    word"
    )
    second = next(i for i in range(caveat + 2, len(lines)) if lines[i].startswith("  - "))
    assert " ".join(" ".join(lines[caveat + 1 : second]).split()) == f"- {CAVEAT}"
    assert all(len(line) <= 60 for line in lines if "/" not in line)  # wrapped to the terminal
    assert res["git_commit"] in out  # as recorded, never shortened
    assert re.search(r"^Profile +quick \(device cpu, 14 runs", out, re.M)
    assert re.search(r"^Figures +r/ffn_share/figures/a\.png$", out, re.M)
    assert "not in r-report/report.md yet" in flat  # the report beside this results folder


def test_show_the_committed_result_names_its_report_section(capsys, monkeypatch):
    monkeypatch.delenv("TFCLAIMS_REPORT")
    assert main(["show", "ffn_share", "--results-dir", str(REPO_ROOT / "results")]) == 0
    out = capsys.readouterr().out
    res = json.loads((REPO_ROOT / "results" / "ffn_share" / "result.json").read_text())
    assert "report.md#ffn_share" in out and res["git_commit"] in out
    assert out.count("figures/") == len(res["figures"])


@pytest.mark.parametrize("name", ["nonexistent", "../results", ""])
def test_show_unknown_claim_is_one_line_exit_2(name, capsys):
    assert main(["show", name]) == 2
    captured = capsys.readouterr()
    err = captured.err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith(f"error: unknown claim {name!r}") and not captured.out


def test_show_missing_or_corrupt_result_is_one_line_exit_2(tmp_path, capsys):
    assert main(["show", "ffn_share", "--results-dir", str(tmp_path)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("error: no result for ffn_share under")
    (tmp_path / "ffn_share").mkdir()
    (tmp_path / "ffn_share" / "result.json").write_text("{not json")
    assert main(["show", "ffn_share", "--results-dir", str(tmp_path)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "corrupt result file" in err[0]


# -- plan ----------------------------------------------------------------------------------------------------


def plan_rows(out: str) -> dict[str, list[str]]:
    """The table's rows by part: [runs, cached, to run, time to run]."""
    rows = {}
    for line in out.splitlines():
        m = re.fullmatch(r"  (\S+) +(\d+) +(\d+) +(\d+)  (.+)", line)
        if m:
            rows[m[1]] = [m[2], m[3], m[4], m[5]]
    return rows


def write_record(runs, name, cfg, key, status="ok", wall_s=1.0):
    runs.mkdir(parents=True, exist_ok=True)
    rec = {"run_id": name, "claim_id": "ffn_share", "config": cfg, "config_hash": key.config_hash}
    rec.update(code_hash=key.code_hash, device="cpu", status=status, metrics={}, wall_s=wall_s)
    (runs / f"{name}.json").write_text(json.dumps(rec))


def test_plan_counts_cached_runs_and_estimates_the_others(tmp_path, capsys):
    exp = load("ffn_share")
    p = resolve_profile(exp, "quick")
    configs = exp.grid(p)
    keys = run_keys(exp, configs, CPU)
    runs = tmp_path / "ffn_share" / "runs"
    counts = [(c, k) for c, k in zip(configs, keys) if c["part"] == "counts"]
    flops = [(c, k) for c, k in zip(configs, keys) if c["part"] == "flops"]
    assert len(counts) == len(flops) == len(p["presets"]) == 7
    for (cfg, key), s in zip(counts[:3], (1.0, 2.0, 6.0)):  # cached: the median by part is 2 s
        write_record(runs, key.run_id, cfg, key, wall_s=s)
    write_record(runs, counts[3][1].run_id, *counts[3], status="failed")  # failed: to run again
    write_record(runs, "earlier-code", *flops[0], wall_s=30.0)  # the same config under other code: not cached
    assert (
        main(["plan", "ffn_share", "--profile", "quick", "--device", "cpu", "--results-dir", str(tmp_path)])
        == 0
    )
    out = capsys.readouterr().out
    rows = plan_rows(out)
    assert rows["counts"] == ["7", "3", "4", "about 8.0 s"]  # 4 runs × the part's median
    assert rows["flops"] == ["7", "0", "7", "about 3.5 min"]  # its own 30 s, and 30 s (median) for 6 others
    assert rows["total"] == ["14", "3", "11", "about 3.6 min"]
    assert out.startswith("ffn_share, profile quick, device cpu: 14 runs, 3 cached, 11 to run")
    assert re.findall(r"^  (\w+) = ", out, re.M) == list(p)  # every --set key
    assert all(f"{k} = {v!r}" in " ".join(out.split()) for k, v in p.items())  # with its value
    assert "--seeds: none" in out
    assert (
        sorted(f.name for f in runs.iterdir())
        == sorted(  # plan writes nothing
            [f"{k.run_id}.json" for _, k in counts[:4]] + ["earlier-code.json"]
        )
    )


def test_plan_applies_set_and_validates_it(tmp_path, capsys):
    argv = ["plan", "ffn_share", "--profile", "quick", "--device", "cpu", "--results-dir", str(tmp_path)]
    assert main([*argv, "--set", "presets=['gpt2-small', 'bert-base']"]) == 0
    out = capsys.readouterr().out
    assert plan_rows(out)["total"] == ["4", "0", "4", "unknown (none on record)"]
    assert re.search(r"^  presets = \['gpt2-small', 'bert-base'\]   \(--set\)$", out, re.M)
    assert main([*argv, "--set", "presets=3"]) == 2
    assert main([*argv, "--set", "steps=3"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 2 and "has no parameter 'steps' (it has: contexts, presets)" in err[1]
    assert main(["plan", "nonexistent"]) == 2


def test_plan_of_a_staged_claim_counts_its_first_stage(tmp_path, capsys):
    exp = load("dk_scaling")
    assert exp.staged
    argv = ["plan", "dk_scaling", "--profile", "quick", "--device", "cpu", "--results-dir", str(tmp_path)]
    assert main(argv) == 0
    out = capsys.readouterr().out
    n = len(exp.grid(resolve_profile(exp, "quick")))
    assert plan_rows(out)["total"][:3] == [str(n), "0", str(n)]
    assert "Staged (sweep)" in out and "more runs may follow" in " ".join(out.split())


@pytest.mark.parametrize("claim", ["ffn_share", "rmsnorm"])  # rmsnorm: a staged grid grown to its end
def test_plan_of_the_committed_results_has_every_run_cached(claim, capsys):
    res = json.loads((REPO_ROOT / "results" / claim / "result.json").read_text())
    assert main(["plan", claim, "--device", res["device"], "--results-dir", str(REPO_ROOT / "results")]) == 0
    out = capsys.readouterr().out
    n = res["n_runs"]
    assert n == len(res["run_ids"]) > 10
    rows = plan_rows(out)
    total = rows["total"] if "total" in rows else next(iter(rows.values()))
    assert total == [str(n), str(n), "0", "-"]
    assert f"Every run is cached: `run {claim}`" in out and "may follow" not in out
