"""`python -m pytest_modelbench init`: the shipped suites, a pytest.ini, baselines/ and the CI workflow written into a
project of one's own, and nothing that exists overwritten (issue 51)."""

from __future__ import annotations

from importlib import metadata
from pathlib import Path

import pytest
import yaml

from pytest_modelbench.__main__ import EXIT_REFUSED, main
from pytest_modelbench.project_init import WORKFLOW

REPO = Path(__file__).resolve().parents[2]


def tree(folder: Path) -> dict[str, bytes]:
    return {str(path.relative_to(folder)): path.read_bytes() for path in sorted(folder.rglob("*"))
            if path.is_file() and "__pycache__" not in path.parts}


def test_init_copies_the_suites_as_they_are_in_this_repository_with_a_pytest_ini_baselines_and_the_workflow(
        tmp_path, capsys):
    assert main(["init", "bias", "bbq", "--dir", str(tmp_path)]) == 0
    for suite in ("bias", "bbq"):
        assert tree(tmp_path / "suites" / suite) == tree(REPO / "suites" / suite)
    assert sorted(path.name for path in (tmp_path / "suites").iterdir()) == ["bbq", "bias"]
    assert "modelbench_suites = suites" in (tmp_path / "pytest.ini").read_text()
    assert (tmp_path / "baselines").is_dir() and not list((tmp_path / "baselines").glob("*.json"))
    workflow = (tmp_path / WORKFLOW).read_text()
    assert f'pytest-modelbench=={metadata.version("pytest-modelbench")}"' in workflow and "@" + "MODELBENCH" not in workflow
    assert set(yaml.safe_load(workflow)["jobs"]) == {"gate", "rebaseline"}
    output = capsys.readouterr().out
    assert "suite(s) bbq run Python task code: add --allow-task-code" in output  # bias has none outside comments


def test_a_second_init_of_a_suite_refuses_and_writes_nothing(tmp_path, capsys):
    assert main(["init", "bias", "--dir", str(tmp_path)]) == 0
    (tmp_path / "suites" / "bias" / "crows_pairs_english.yaml").write_text("# the team's own margins\n")
    before = tree(tmp_path)
    assert main(["init", "bias", "winobias", "--dir", str(tmp_path)]) == EXIT_REFUSED
    assert tree(tmp_path) == before  # not even winobias, whose files were free
    error = capsys.readouterr().err
    assert "nothing was written, because " in error and "suites/bias/crows_pairs_english.yaml exists" in error
    assert "suites/winobias" not in error
    assert "\n" not in error.strip()  # one line


def test_adding_a_suite_later_keeps_the_projects_own_files(tmp_path, capsys):
    assert main(["init", "bias", "--dir", str(tmp_path)]) == 0
    (tmp_path / "pytest.ini").write_text("[pytest]\nmodelbench_suites = suites\naddopts = -p no:cacheprovider\n")
    assert main(["init", "winobias", "--dir", str(tmp_path)]) == 0
    assert "addopts" in (tmp_path / "pytest.ini").read_text()
    assert tree(tmp_path / "suites" / "winobias") == tree(REPO / "suites" / "winobias")
    assert "kept " + str(tmp_path / "pytest.ini") + " (exists)" in capsys.readouterr().out


def test_an_existing_pytest_ini_without_the_suites_setting_is_kept_and_named(tmp_path, capsys):
    (tmp_path / "pytest.ini").write_text("[pytest]\naddopts = -q\n")
    assert main(["init", "--dir", str(tmp_path)]) == 0
    assert (tmp_path / "pytest.ini").read_text() == "[pytest]\naddopts = -q\n"
    assert "pytest.ini exists and does not set modelbench_suites" in capsys.readouterr().out


@pytest.mark.parametrize("name, text", [
    ("pyproject.toml", "[project]\nname = 'x'\n\n[tool.pytest.ini_options]\naddopts = '-q'\n"),
    ("tox.ini", "[tox]\nenvlist = py311\n\n[pytest]\naddopts = -q\n"),
    ("setup.cfg", "[metadata]\nname = x\n\n[tool:pytest]\naddopts = -q\n"),
])
def test_a_pytest_configuration_elsewhere_is_not_shadowed_by_a_new_pytest_ini(tmp_path, capsys, name, text):
    (tmp_path / name).write_text(text)
    assert main(["init", "--dir", str(tmp_path)]) == EXIT_REFUSED
    assert sorted(path.name for path in tmp_path.iterdir()) == [name]
    assert f"{name} configures pytest, and a new pytest.ini would take its place" in capsys.readouterr().err
    assert main(["init", "--no-pytest-ini", "--dir", str(tmp_path)]) == 0
    assert not (tmp_path / "pytest.ini").exists() and (tmp_path / "suites" / "bias").is_dir()


def test_a_pyproject_without_pytest_settings_takes_a_pytest_ini(tmp_path):
    (tmp_path / "pyproject.toml").write_text("[project]\nname = 'x'\n\n[tool.ruff]\nline-length = 120\n")
    assert main(["init", "--dir", str(tmp_path)]) == 0
    assert (tmp_path / "pytest.ini").is_file()


def test_an_unknown_suite_is_refused_with_the_shipped_names(tmp_path, capsys):
    assert main(["init", "bias", "nope", "--dir", str(tmp_path)]) == EXIT_REFUSED
    assert list(tmp_path.iterdir()) == []
    assert "no shipped suite named 'nope'; the shipped suites are: arc_gen, arc_mt, arc_sampled, bangla, bbq, bias" in \
        capsys.readouterr().err


def test_list_names_every_shipped_suite_and_its_tasks(tmp_path, capsys):
    assert main(["init", "--list", "--dir", str(tmp_path)]) == 0
    listed = dict(line.split(": ", 1) for line in capsys.readouterr().out.splitlines())
    shipped = {path.name for path in (REPO / "suites").iterdir() if path.is_dir() and path.name != "__pycache__"}
    assert set(listed) == shipped
    assert listed["bias"] == "crows_pairs_english, crows_pairs_french, stereoset_intersentence, stereoset_intrasentence"
    assert list(tmp_path.iterdir()) == []
