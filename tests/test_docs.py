"""The documentation: no absolute machine paths, and the gradient-geometry tables come from the commands
printed beside them (scripts/gradient_geometry_tables.py runs exactly those commands)."""

from __future__ import annotations

import importlib.util
import itertools
import re
import shlex
from pathlib import Path

import pytest

pytestmark = pytest.mark.fast

REPO = Path(__file__).resolve().parents[1]
# An absolute path into a machine's own directories: /work, /tmp, /home, /root, /Users, not preceded by a
# character that would make it part of a relative path or a URL (runs/tmp, https://host/home/...).
MACHINE_PATH = re.compile(r"(?<![\w.~/-])/(?:work|tmp|home|root|Users)(?![\w-])")
GEOMETRY_DOC = REPO / "docs" / "gradient-geometry.md"


def _documentation() -> list[Path]:
    return [REPO / "README.md", *sorted(p for p in (REPO / "docs").rglob("*") if p.is_file())]


def _machine_paths(text: str) -> list[str]:
    return [line.strip() for line in text.splitlines() if MACHINE_PATH.search(line)]


@pytest.mark.parametrize("text", ["see /tmp/x.py", "a `/tmp` script", "cd /work/main && make", "/home/me/data",
                                  "(/root/.cache/x)", "path=/Users/me/repo"])
def test_the_pattern_finds_machine_paths(text: str) -> None:
    assert _machine_paths(text)


@pytest.mark.parametrize("text", ["runs/tmp/x", "https://example.org/home/page", "../shared/papers/a.txt",
                                  "tempfile.gettempdir()", "src/grpolab/assets/embedded", "~/work/x",
                                  "/temporary", "a / b"])
def test_the_pattern_leaves_relative_paths_and_urls(text: str) -> None:
    assert not _machine_paths(text)


def test_docs_and_readme_name_no_absolute_machine_path() -> None:
    found = {}
    for path in _documentation():
        try:
            text = path.read_text(encoding="utf-8")
        except UnicodeDecodeError:  # figures
            continue
        if hits := _machine_paths(text):
            found[str(path.relative_to(REPO))] = hits
    assert not found, f"absolute machine paths in the docs (use a command or a path in the repository): {found}"


def _tables_script():
    spec = importlib.util.spec_from_file_location("gradient_geometry_tables",
                                                  REPO / "scripts" / "gradient_geometry_tables.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _expand(command: str) -> list[str]:
    """Shell brace expansion of ``{a,b}`` groups of plain words (not JSON), as the doc writes a grid of commands."""
    parts = re.split(r"\{([\w.-]+(?:,[\w.-]+)+)\}", command)
    choices = [[part] if i % 2 == 0 else part.split(",") for i, part in enumerate(parts)]
    return ["".join(pick) for pick in itertools.product(*choices)]


def _documented_gradient_commands() -> set[frozenset]:
    """Every ``grpolab gradients`` command in the doc's code blocks, brace-expanded, as a set of its words
    (flag order does not matter); usage lines with ``[optional]`` parts are left out."""
    blocks = re.findall(r"```[a-z]*\n(.*?)```", GEOMETRY_DOC.read_text(encoding="utf-8"), flags=re.S)
    commands = set()
    for block in blocks:
        for command in block.replace("\\\n", " ").splitlines():
            if command.strip().startswith("grpolab gradients") and "[--" not in command:
                commands.update(frozenset(_pairs(shlex.split(one))) for one in _expand(command))
    return commands


def _pairs(words: list[str]) -> list[tuple[str, str]]:
    """(flag, value) pairs of a command line; a flag without a value pairs with ""."""
    out, index = [], 0
    while index < len(words):
        word = words[index]
        if word.startswith("--") and index + 1 < len(words) and not words[index + 1].startswith("--"):
            out.append((word, words[index + 1]))
            index += 2
        else:
            out.append((word, ""))
            index += 1
    return out


def test_gradient_geometry_tables_run_the_commands_printed_in_the_doc() -> None:
    script = _tables_script()
    run = set()
    for table, seeds in script.DEFAULT_SEEDS.items():
        run.update(frozenset(_pairs(["grpolab", *argv])) for argv in script.commands(table, seeds.split(",")))
    documented = _documented_gradient_commands()
    assert documented == run, (f"only in the doc: {[sorted(c) for c in documented - run]}; "
                               f"only in the script: {[sorted(c) for c in run - documented]}")
    text = GEOMETRY_DOC.read_text(encoding="utf-8")
    for table in script.DEFAULT_SEEDS:
        assert f"python scripts/gradient_geometry_tables.py {table}\n" in text


def test_the_tables_script_commands_parse_with_the_cli() -> None:
    from grpolab.cli import build_parser

    script = _tables_script()
    for table, seeds in script.DEFAULT_SEEDS.items():
        for argv in script.commands(table, seeds.split(",")):
            args = build_parser(argv).parse_args(argv)
            assert args.command == "gradients" and args.json


EVALUATION_DOC = REPO / "docs" / "evaluation.md"


def _worked_example() -> tuple[list[str], str]:
    """docs/evaluation.md's worked example: the command's arguments and the table printed below it."""
    text = EVALUATION_DOC.read_text(encoding="utf-8")
    match = re.search(r"```bash\n(grpolab eval --from-samples [^\n]+)\n```\n\n```text\n(.*?)```", text, flags=re.S)
    assert match, "docs/evaluation.md lost its worked example (a bash block, then the text block of its output)"
    return shlex.split(match[1])[1:], match[2]


def test_the_evaluation_doc_example_is_what_the_command_prints(monkeypatch: pytest.MonkeyPatch,
                                                               capsys: pytest.CaptureFixture) -> None:
    import json

    from grpolab.cli import main

    argv, shown = _worked_example()
    monkeypatch.chdir(REPO)
    assert main([*argv, "--json"]) == 0
    task = json.loads(capsys.readouterr().out)["tasks"][0]
    rows = [line.split() for line in shown.splitlines() if re.match(r"^(avg|pass|maj)[@^]", line)]
    assert [row[0] for row in rows] == list(task["metrics"])  # every metric, in the command's order
    for key, value, se, lighteval in rows:
        # the doc shows 4 decimals: half a unit of the last place, plus far more than the binary representation
        # error of a 4-decimal number (1e-16)
        assert abs(float(value) - task["metrics"][key]) <= 0.5e-4 + 1e-12, key
        assert abs(float(se) - task["se"][key]) <= 0.5e-4 + 1e-12, key
        assert lighteval == task["lighteval"].get(key, "-")
    assert main(argv) == 0
    assert capsys.readouterr().out.splitlines()[:2] == shown.splitlines()[:2]  # the counts read and scored


def _paired_example() -> tuple[str, str]:
    """docs/evaluation.md's paired worked example: the Python block and the text block printed below it."""
    text = EVALUATION_DOC.read_text(encoding="utf-8")
    match = re.search(r"### Worked example\n.*?```python\n(.*?)```\n\n```text\n(.*?)```", text, flags=re.S)
    assert match, "docs/evaluation.md lost its paired worked example (a python block, then the text it prints)"
    return match[1], match[2]


def _numbers(text: str) -> list[float]:
    return [float(x) for x in re.findall(r"[-+]?\d+\.\d+", text)]


def test_the_paired_example_is_what_the_code_prints(capsys: pytest.CaptureFixture) -> None:
    code, shown = _paired_example()
    exec(compile(code, "docs/evaluation.md", "exec"), {})
    printed = capsys.readouterr().out
    assert [line.split()[0] for line in printed.splitlines()] == [line.split()[0] for line in shown.splitlines()]
    assert printed.splitlines()[-1] == shown.splitlines()[-1]  # where the band excludes 0
    # 4 decimals shown: half a unit of the last place, plus far more than a 4-decimal number's binary error
    assert _numbers(printed) == pytest.approx(_numbers(shown), rel=0, abs=0.5e-4 + 1e-12)
    rows = [line.split() for line in shown.splitlines()[1:-1]]
    assert float(rows[0][3]) == 0.1562 and float(rows[-1][3]) == 0.25  # 5/32 and 6/8 - 4/8, by hand


def test_the_planning_worked_example_is_what_the_code_computes() -> None:
    """docs/planning.md's worked example: the pre-flight table of k = 0, 0, 2, 4, 8 of n = 8, the recommendation,
    and the seeds of `grpolab plan --sd 0.05 --effect 0.05` (alone and in a family of 2)."""
    from grpolab.planning import floored_power, paired_power, seeds_needed
    from grpolab.preflight import analyse
    from grpolab.stats import sign_flip_floor

    text = (REPO / "docs" / "planning.md").read_text()
    result = analyse([0, 0, 2, 4, 8], 8)
    table = result.table.set_index("group_size")
    for size in (2, 4, 8):
        row = table.loc[size]
        cells = [f"{row[c]:.4f}" for c in ("degenerate", "all_wrong", "all_right", "d_iid", "jensen_gap")]
        line = f"| {size} | " + " | ".join(cells) + f" | {row['informative_per_1000']:.1f} | {row['snr_sign']:.4f} |"
        assert line in text
    assert result.group_size == 8 and result.band_size == 2
    assert f"[{result.band[0]:.3f}, {result.band[1]:.3f}]" in text and f"is {result.group_size} and" in text
    assert table.loc[4, "degenerate"] == pytest.approx((3 + 17 / 70) / 5)
    assert result.mean_p_variance == pytest.approx(0.1)
    assert f"gives {seeds_needed(0.05, 0.05)} seeds (power {paired_power(0.05, 0.05, 10):.3f}; at 5 seeds the " \
           f"t-test's power is {paired_power(0.05, 0.05, 5):.2f}, but the report's test has none there: its p cannot " \
           f"fall below 2 / 2^5 = {sign_flip_floor(5):.4f})" in " ".join(text.split())
    assert floored_power(0.05, 0.05, 5) == 0
    assert f"Holm family of 2): {seeds_needed(0.05, 0.05, family=2)} seeds" in " ".join(text.split())


LINK = re.compile(r"\[[^\]]*\]\(([^)\s]+)\)")


def _slug(heading: str) -> str:
    """GitHub's anchor of a Markdown heading: lower case, punctuation dropped, spaces to hyphens."""
    return re.sub(r"[^\w\- ]", "", heading.strip().lower()).replace(" ", "-")


def _broken_links(path: Path) -> list[str]:
    broken = []
    for target in LINK.findall(path.read_text(encoding="utf-8")):
        if re.match(r"[a-z]+:", target) or target.startswith("#"):
            continue  # a URL, or an anchor on the same page (checked below for the pages that use them)
        file, _, anchor = target.partition("#")
        resolved = (path.parent / file).resolve()
        if not resolved.exists():
            broken.append(target)
        elif anchor and resolved.suffix == ".md":
            headings = re.findall(r"^#+ (.+)$", resolved.read_text(encoding="utf-8"), flags=re.M)
            if anchor not in {_slug(h) for h in headings}:
                broken.append(target)
    return broken


@pytest.mark.parametrize(
    ("heading", "slug"),
    [
        ("The remedies map", "the-remedies-map"),
        ("Paper 1, read with these tools", "paper-1-read-with-these-tools"),
        ("Scaling out: TRL, verl, and existing logs", "scaling-out-trl-verl-and-existing-logs"),
    ],
)
def test_the_slug_is_githubs(heading: str, slug: str) -> None:
    assert _slug(heading) == slug


def test_a_missing_file_or_heading_is_a_broken_link(tmp_path: Path) -> None:
    (tmp_path / "a.md").write_text("# A page\n\n## Its part\n", encoding="utf-8")
    page = tmp_path / "b.md"
    page.write_text(
        "[ok](a.md) [ok](a.md#its-part) [no](c.md) [no](a.md#other) [url](https://x.org/c.md)", encoding="utf-8"
    )
    assert _broken_links(page) == ["c.md", "a.md#other"]


def test_every_relative_link_in_the_readme_and_docs_resolves() -> None:
    pages = [REPO / "README.md", *sorted((REPO / "docs").glob("*.md"))]
    broken = {str(page.relative_to(REPO)): links for page in pages if (links := _broken_links(page))}
    assert not broken, f"links to files or headings that do not exist: {broken}"
