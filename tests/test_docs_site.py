"""The manual builds, the README stays a front door whose map points at real code, and bench/ holds a
benchmark, not its raw runs. mkdocs runs --strict: a broken link, anchor or snippet fails the build."""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
README = ROOT / "README.md"


def build(tmp_path: Path, config: Path = ROOT / "mkdocs.yml") -> subprocess.CompletedProcess:
    # cwd is the repository root: the benchmarks page includes bench/RESULTS.md from there (pymdownx.snippets)
    return subprocess.run([sys.executable, "-m", "mkdocs", "build", "--strict", "-f", str(config),
                           "-d", str(tmp_path / "site")], cwd=ROOT, capture_output=True, text=True, timeout=300)


def test_the_manual_builds_strict_with_the_bench_results_in_it(tmp_path):
    proc = build(tmp_path)
    assert proc.returncode == 0, proc.stderr[-4000:]
    site = tmp_path / "site"
    assert (site / "index.html").exists() and (site / "report.png").exists()
    first_table = next(line for line in (ROOT / "bench" / "RESULTS.md").read_text().splitlines() if line.startswith("## "))
    assert first_table[3:].split(" (")[0].replace("&", "&amp;") in (site / "benchmarks" / "index.html").read_text()


def test_a_broken_link_fails_the_build(tmp_path):
    docs = tmp_path / "docs"
    shutil.copytree(ROOT / "docs", docs)
    config = tmp_path / "mkdocs.yml"
    shutil.copy(ROOT / "mkdocs.yml", config)
    (docs / "options.md").write_text((docs / "options.md").read_text() + "\nSee [the gone page](gone.md).\n")
    proc = build(tmp_path, config)
    assert proc.returncode != 0
    assert "gone.md" in proc.stderr


def _readme_links() -> list[str]:
    text = README.read_text()
    return [t for t in re.findall(r"\]\(([^)#\s]+)(?:#[^)]*)?\)", text) if not re.match(r"\w+://", t)]


def test_the_readme_is_a_short_front_door_with_the_two_commands_first():
    text = README.read_text()
    assert len(text.encode()) <= 20_000
    first_block = text.split("```")[1]
    assert "make serve" in first_block and "make test" in first_block
    assert text.index("```") < text.index("\n## ")  # before anything else
    for target in _readme_links():
        assert (ROOT / target).exists(), f"README links to {target}, which does not exist"
    assert any(t.endswith(".png") for t in _readme_links())


def test_the_readme_map_names_modules_and_functions_that_exist():
    text = README.read_text()
    paths = set(re.findall(r"`(service/[\w/]+(?:\.py)?/?)`", text))
    assert paths
    for p in paths:
        assert (ROOT / p).exists(), f"the README's map names {p}, which does not exist"
    # "`service/.../x.py`, `fn`" and "`comparisons.submit_comparison`" (a module of the folder named before it)
    for path, fn in re.findall(r"`(service/[\w/]+\.py)`, `(\w+)`", text):
        assert re.search(rf"^\s*(async )?def {fn}\b", (ROOT / path).read_text(), re.M), f"{path} has no {fn}"
    routes = ROOT / "service" / "api" / "routes"
    for mod, fn in re.findall(r"`(\w+)\.(\w+)`", text):
        if fn != "py" and (routes / f"{mod}.py").exists():
            assert re.search(rf"^\s*(async )?def {fn}\b", (routes / f"{mod}.py").read_text(), re.M), f"{mod}.py has no {fn}"


def test_bench_tracks_scripts_and_current_tables_only():
    if not (ROOT / ".git").exists():
        pytest.skip("not a git checkout")
    files = subprocess.run(["git", "ls-files", "bench"], cwd=ROOT, capture_output=True, text=True, check=True).stdout.split()
    assert 0 < len(files) <= 40
    raw = [f for f in files if not (f.endswith((".py", ".sh")) or f in ("bench/RESULTS.md", "bench/NOTES.md"))]
    assert not raw, f"raw bench output belongs under var/bench/, not in git: {raw}"


def test_every_docs_page_the_code_names_exists():
    """Hints, help texts and comments send readers to docs/<page>.md: each page must be there."""
    named = set()
    for folder in ("service", "clients", "tests", "bench", "docker"):
        for f in (ROOT / folder).rglob("*"):
            if f.is_file() and f.suffix in (".py", ".html", ".yaml", ".sh", ".md"):
                named |= {(m, f) for m in re.findall(r"docs/[\w/-]+\.md", f.read_text(errors="ignore"))}
    assert named
    missing = sorted({f"{m} (named in {f.relative_to(ROOT)})" for m, f in named if not (ROOT / m).exists()})
    assert not missing, missing
