"""The mirror's file selection: .gitignore semantics (checked against real git), excludes, always-out."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

from mainboard.errors import UserError
from mainboard.hosts.gitignore import RuleSet, Selection, gitignored, parse, parse_line
from tests.support.services import require

# (gitignore lines, path relative to the .gitignore's directory, is a directory, ignored?)
TABLE: list[tuple[list[str], str, bool, bool]] = [
    (["*.log"], "a.log", False, True),
    (["*.log"], "deep/er/a.log", False, True),
    (["*.log"], "a.log.txt", False, False),
    (["/build"], "build", True, True),
    (["/build"], "src/build", True, False),
    (["build/"], "build", True, True),
    (["build/"], "build", False, False),          # trailing slash: directories only
    (["build/"], "x/build", True, True),          # ...at any depth
    (["doc/*.txt"], "doc/a.txt", False, True),
    (["doc/*.txt"], "x/doc/a.txt", False, False),  # a middle slash anchors
    (["doc/*.txt"], "doc/sub/a.txt", False, False),  # * never crosses /
    (["**/tmp"], "tmp", True, True),
    (["**/tmp"], "a/b/tmp", False, True),
    (["a/**/b"], "a/b", False, True),
    (["a/**/b"], "a/x/y/b", False, True),
    (["a/**/b"], "z/a/b", False, False),
    (["logs/**"], "logs/x", False, True),
    (["logs/**"], "logs/a/b", False, True),
    (["logs/**"], "logs", True, False),           # the directory itself stays
    (["?.c"], "a.c", False, True),
    (["?.c"], "ab.c", False, False),
    (["[abc].py"], "b.py", False, True),
    (["[abc].py"], "d.py", False, False),
    (["[!abc].py"], "d.py", False, True),
    (["[!abc].py"], "a.py", False, False),
    (["[a-c]x"], "bx", False, True),
    (["[]a]x"], "]x", False, True),               # a ] first in a class is one of its chars
    (["[]a]x"], "bx", False, False),
    (["[\\]b]y"], "]y", False, True),              # so is an escaped one anywhere
    (["[\\]b]y"], "\\y", False, False),
    (["*.log", "!keep.log"], "keep.log", False, False),
    (["*.log", "!keep.log"], "other.log", False, True),
    (["!keep.log", "*.log"], "keep.log", False, True),  # the last match wins
    (["# comment"], "# comment", False, False),
    (["\\#hash"], "#hash", False, True),
    (["\\!bang"], "!bang", False, True),
    (["foo   "], "foo", False, True),             # unescaped trailing spaces dropped
    (["bar\\ "], "bar ", False, True),            # an escaped one is kept
    (["bar\\ "], "bar", False, False),
    (["foo**bar"], "fooxbar", False, True),       # ** inside a segment is a plain *
    (["\\*star"], "*star", False, True),
    (["\\*star"], "xstar", False, False),
    (["[unclosed"], "[unclosed", False, True),    # an unclosed [ is literal
    (["a'; $(x) b"], "a'; $(x) b", False, True),  # regex and shell characters are literal
    (["", "   ", "/"], "anything", False, False),  # blanks and a bare / mean nothing
]


@pytest.mark.parametrize(("lines", "path", "is_dir", "ignored"), TABLE)
def test_gitignore_semantics(lines: list[str], path: str, is_dir: bool, ignored: bool) -> None:
    rules = RuleSet("", tuple(parse(lines)))
    assert gitignored(path, is_dir, [rules]) is ignored


def test_nested_rules_apply_below_their_directory_and_deeper_ones_win() -> None:
    root = RuleSet("", tuple(parse(["*.txt"])))
    sub = RuleSet("sub", tuple(parse(["!keep.txt", "/local.md"])))
    assert gitignored("keep.txt", False, [root, sub])
    assert not gitignored("sub/keep.txt", False, [root, sub])
    assert gitignored("sub/local.md", False, [root, sub])
    assert not gitignored("sub/x/local.md", False, [root, sub])  # anchored to sub/
    assert not gitignored("other/local.md", False, [root, sub])


def test_parse_line_keeps_source_and_flags() -> None:
    pattern = parse_line("!/out/\r\n")
    assert pattern is not None
    assert (pattern.source, pattern.negate, pattern.dir_only, pattern.anchored) == (
        "!/out/", True, True, True)
    assert parse_line("# just a comment") is None


def _write(root: Path, files: dict[str, str]) -> None:
    for name, text in files.items():
        path = root / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)


TREE = {
    ".gitignore": "*.log\n!keep.log\n/build/\ntmp*\n**/cache/\ndocs/**/*.pdf\n# c\n\\#lit\n"
                  "ignored_dir/\n!ignored_dir/inside.txt\nlogs/**\n!logs/important.txt\n",
    "a.py": "", "a.log": "", "keep.log": "", "#lit": "", "b#lit": "",
    "build/out.o": "", "src/build/out.o": "", "src/tmpfile": "", "tmpx/y.txt": "",
    "x/y/cache/z": "", "cache": "", "docs/a.pdf": "", "docs/1/2/b.pdf": "", "docs/readme": "",
    "ignored_dir/inside.txt": "", "logs/important.txt": "", "logs/debug.txt": "",
    "sub/.gitignore": "!*.log\n/only_here\n*.dat\n!special.dat\n",
    "sub/s.log": "", "sub/only_here": "", "sub/deeper/only_here": "", "sub/x.dat": "",
    "sub/special.dat": "", "sub/deeper/.gitignore": "special.dat\n", "sub/deeper/special.dat": "",
    "with space/it's here.txt": "", "semi;colon/$(x).txt": "",
}


def test_selection_agrees_with_git(tmp_path: Path) -> None:
    """The whole tree, nested files and negations included, lists exactly what git lists."""
    git = require("git")
    _write(tmp_path, TREE)
    os.symlink("a.py", tmp_path / "link.py")
    os.symlink("build", tmp_path / "dirlink")  # a symlink is a file, even to a directory
    os.mkfifo(tmp_path / "pipe")  # neither a file nor a directory: git lists none, nor do we
    subprocess.run([git, "init", "-q", str(tmp_path)], check=True)
    listed = subprocess.run([git, "-C", str(tmp_path), "ls-files", "-z", "--others",
                             "--exclude-standard"], check=True, capture_output=True).stdout
    expected = sorted(name for name in listed.decode().split("\0") if name)
    ours = sorted(name for name, _ in Selection().walk(tmp_path))
    assert ours == expected
    assert "keep.log" in ours and "sub/s.log" in ours and "sub/special.dat" in ours
    assert "ignored_dir/inside.txt" not in ours  # no re-including inside an ignored directory


def test_exclude_list_and_always_excluded(tmp_path: Path) -> None:
    _write(tmp_path, {
        "main.py": "", ".git/config": "", ".mainboard/mirror/x.json": "", ".venv/bin/python": "",
        "pkg/__pycache__/m.pyc": "", "pkg/m.py": "", "data/big.bin": "", "w.bin": "",
        "keep.bin": "", "notes/.venv": "",  # a FILE named .venv is not the venv directory
        ".gitignore": "!.git/\n!__pycache__/\n",  # the always-excluded cannot be re-included
    })
    selection = Selection(exclude=["data/", "*.bin", "!keep.bin"], skip=["main.py"])
    ours = sorted(name for name, _ in selection.walk(tmp_path))
    assert ours == [".gitignore", "keep.bin", "notes/.venv", "pkg/m.py"]


def test_a_workspace_that_cannot_be_read_is_one_line_naming_the_place(tmp_path: Path) -> None:
    """Root runs the suite, so permissions stop nothing here: a .gitignore that is a symlink
    loop cannot be read (ELOOP), and a root that is a file cannot be listed (ENOTDIR)."""
    (tmp_path / "ws").mkdir()
    os.symlink(".gitignore", tmp_path / "ws" / ".gitignore")
    with pytest.raises(UserError, match=r"cannot read .*/ws/\.gitignore: Too many levels"):
        list(Selection().walk(tmp_path / "ws"))
    (tmp_path / "file").write_text("")
    with pytest.raises(UserError, match=r"cannot list workspace directory .*/file: Not a "
                                        r"directory; fix its permissions or add it"):
        list(Selection().walk(tmp_path / "file"))
