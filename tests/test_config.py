"""mainboard.toml: every class of bad input gives one precise line; good files round-trip."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest

from mainboard.config import (
    Config,
    LocalHost,
    PbsHost,
    ProviderHost,
    SlurmHost,
    SshHost,
    find_config,
    load_config,
    loads_config,
    parse_duration,
)
from mainboard.errors import ConfigError, ConfigNotFound, ExpressionError, UnknownHost
from mainboard.interpolate import local_num_cpus
from mainboard.sourcemap import SourceMap

REPO = Path(__file__).resolve().parents[1]
EXAMPLE = REPO / "deploy" / "mainboard.example.toml"
MAINBOARD = Path(sys.executable).parent / "mainboard"
UNSET = "MB_TEST_SURELY_UNSET_VARIABLE"
EXPR_HINT = "names attempt, walltime_s, num_cpus; functions min(), max(), ceil(), floor()"
KINDS = "local, ssh, slurm, pbs, provider"
SSH_KEYS = "host (required), root (default: '~/mainboard')"


def toml(*lines: str) -> str:
    """Join lines so the line numbers in the cases below are easy to count."""
    return "\n".join(lines) + "\n"


@dataclass
class Bad:
    """One bad mainboard.toml and what its error must say."""

    text: str
    key: str
    hint: str
    line: int | None
    error: type[ConfigError] = ConfigError


SSH = ('[hosts.box]', 'kind = "ssh"', 'host = "box.example.org"')  # lines 1-3
SLURM = ('[hosts.c]', 'kind = "slurm"')  # lines 1-2

BAD: dict[str, Bad] = {
    "syntax-missing-value": Bad(toml(*SSH[:2], "port = "), "hosts.box", "TOML 1.0", 3),
    "syntax-unclosed-header": Bad(toml("[workspace]", 'name = "x"', "[hosts.box"),
                                  "hosts.box", "[table] headers", 3),
    "syntax-duplicate-key": Bad(toml("[workspace]", 'name = "a"', 'name = "b"'), "workspace",
                                "TOML 1.0", 3),
    "unknown-top-level-key": Bad(toml("[workspac]", 'name = "x"'), "workspac",
                                 "workspace (default: table), broker (default: table)", 1),
    "unknown-host-key": Bad(toml(*SSH, "prot = 22"), "hosts.box.prot",
                            "port (default: 22), identity (default: None)", 4),
    "unknown-workspace-key": Bad(toml("[workspace]", "exclud = []"), "workspace.exclud",
                                 "name (default: None), exclude (default: [])", 2),
    "unknown-key-did-you-mean": Bad(toml(*SSH, "prot = 22"), "hosts.box.prot",
                                    "did you mean port?", 4),
    "wrong-type-port": Bad(toml(*SSH, 'port = "ssh"'), "hosts.box.port", "an integer", 4),
    "wrong-type-array": Bad(toml("[workspace]", 'exclude = ".git"'), "workspace.exclude",
                            "an array", 2),
    "wrong-type-string": Bad(toml(*SSH[:2], "host = 12"), "hosts.box.host", "a quoted string", 3),
    "wrong-type-table": Bad(toml("[hosts]", "box = 3"), "hosts.box", 'kind = "ssh"', 2),
    "unknown-host-kind": Bad(toml("[hosts.box]", 'kind = "kubernetes"'), "hosts.box.kind",
                             KINDS, 2),
    "missing-host-kind": Bad(toml("[hosts.box]", 'host = "h"'), "hosts.box", KINDS, 1),
    "bad-port-high": Bad(toml(*SSH, "port = 70000"), "hosts.box.port", "65535", 4),
    "bad-port-zero": Bad(toml(*SSH, "port = 0"), "hosts.box.port", "greater than or equal to 1", 4),
    "bad-trust": Bad(toml(*SSH, 'trust = "always"'), "hosts.box.trust",
                     "'known-hosts' or 'first-use'", 4),
    "bad-duration": Bad(toml(*SLURM, "[hosts.c.queues.short-g]", 'max-walltime = "8 hours"',
                             "mem-ceiling-gb = 10"),
                        "hosts.c.queues.short-g.max-walltime", '"D-HH:MM:SS", "D-HH", "90s"', 4),
    "bad-duration-minutes": Bad(toml(*SLURM, "[hosts.c.queues.q]", 'max-walltime = "01:75:00"',
                                     "mem-ceiling-gb = 10"),
                                "hosts.c.queues.q.max-walltime", "below 60", 4),
    "zero-duration": Bad(toml(*SLURM, "[hosts.c.queues.q]", "max-walltime = 0",
                              "mem-ceiling-gb = 10"),
                         "hosts.c.queues.q.max-walltime", "greater than zero", 4),
    "bad-walltime-default": Bad(toml(*SLURM, "[hosts.c.defaults]", 'walltime = "2 hours"'),
                                "hosts.c.defaults.walltime", '"HH:MM:SS"', 4, ExpressionError),
    "bad-expression-syntax": Bad(toml(*SLURM, "[hosts.c.defaults]", 'mem-gb = "min(100, attempt *"'),
                                 "hosts.c.defaults.mem-gb", EXPR_HINT, 4, ExpressionError),
    "unsafe-expression": Bad(toml(*SLURM, "[hosts.c.defaults]",
                                  "mem-gb = \"__import__('os').system('x')\""),
                             "hosts.c.defaults.mem-gb", EXPR_HINT, 4, ExpressionError),
    "attribute-expression": Bad(toml(*SLURM, "[hosts.c.defaults]", 'cpus = "num_cpus.real"'),
                                "hosts.c.defaults.cpus", EXPR_HINT, 4, ExpressionError),
    "unknown-name-expression": Bad(toml(*SLURM, "[hosts.c.defaults]", 'mem-gb = "memory * 2"'),
                                   "hosts.c.defaults.mem-gb", EXPR_HINT, 4, ExpressionError),
    "walltime-uses-walltime": Bad(toml(*SLURM, "[hosts.c.defaults]", 'walltime = "walltime_s * 2"'),
                                  "hosts.c.defaults.walltime", "names attempt, num_cpus;", 4,
                                  ExpressionError),
    "lambda-expression": Bad(toml(*SLURM, "[hosts.c.defaults]", 'gpus = "(lambda: 1)()"'),
                             "hosts.c.defaults.gpus", EXPR_HINT, 4, ExpressionError),
    "fractional-cpus": Bad(toml(*SLURM, "[hosts.c.defaults]", "cpus = 2.5"),
                           "hosts.c.defaults.cpus", "an integer >= 1", 4),
    "zero-mem-default": Bad(toml(*SLURM, "[hosts.c.defaults]", "mem-gb = 0"),
                            "hosts.c.defaults.mem-gb", "greater than 0", 4),
    "infinite-mem-default": Bad(toml(*SLURM, "[hosts.c.defaults]", "mem-gb = inf"),
                                "hosts.c.defaults.mem-gb", "a number or an expression", 4),
    "nan-mem-ceiling": Bad(toml(*SLURM, "[hosts.c.queues.q]", 'max-walltime = "1h"',
                                "mem-ceiling-gb = nan"),
                           "hosts.c.queues.q.mem-ceiling-gb", "a number of GB greater than 0", 5),
    "bool-cpus": Bad(toml(*SLURM, "[hosts.c.defaults]", "cpus = true"),
                     "hosts.c.defaults.cpus", "expression", 4),
    "missing-env-var": Bad(toml(*SSH[:2], f"host = \"{{{{ env('{UNSET}') }}}}\""),
                           "hosts.box.host", f"env('{UNSET}', 'default')", 3),
    "unknown-interpolation-function": Bad(toml("[workspace]", "name = \"{{ shell('ls') }}\""),
                                          "workspace.name", "env('X', 'default'), num_cpus()",
                                          2, ExpressionError),
    "interpolation-not-literal": Bad(toml("[workspace]", 'name = "{{ env(HOME) }}"'),
                                     "workspace.name", "quoted strings", 2, ExpressionError),
    "interpolation-unbalanced": Bad(toml("[workspace]", "name = \"{{ env('HOME')\""),
                                    "workspace.name", "unbalanced", 2, ExpressionError),
    "interpolation-in-array": Bad(toml("[python]", "deps = [", '  "numpy",',
                                       f"  \"{{{{ env('{UNSET}') }}}}\",", "]"),
                                  "python.deps.1", f"export {UNSET}=", 4),
    "inheritance-conflict": Bad(toml("[hosts.defaults]", 'partition = "gpu"', *SSH),
                                "hosts.defaults.partition",
                                "hosts.defaults.partition is not valid for hosts.box (kind ssh)", 2),
    "inheritance-conflict-lists-keys": Bad(toml("[hosts.defaults]", 'container = "x"',
                                                "[hosts.l]", 'kind = "local"'),
                                           "hosts.defaults.container",
                                           "keys for kind local: root (default: None)", 2),
    "kind-not-inheritable": Bad(toml("[hosts.defaults]", 'kind = "ssh"'), "hosts.defaults.kind",
                                "set kind in each [hosts.NAME] table", 2),
    "unknown-defaults-key": Bad(toml("[hosts.defaults]", "colour = 1"), "hosts.defaults.colour",
                                "partition", 2),
    "inherited-bad-value": Bad(toml("[hosts.defaults]", 'port = "x"', *SSH),
                               "hosts.defaults.port", "(inherited by hosts.box)", 2),
    "inherited-bad-expression": Bad(toml("[hosts.defaults.defaults]", 'mem-gb = "foo * 2"', *SSH),
                                    "hosts.defaults.defaults.mem-gb", "unknown name 'foo'", 2,
                                    ExpressionError),
    "container-not-declared": Bad(toml(*SLURM, 'container = "physics"'), "hosts.c.container",
                                  "no [containers.NAME] table is declared", 3),
    "container-not-among-declared": Bad(toml("[containers.gpu]", 'image = "x.sif"', *SLURM,
                                             'container = "physics"'),
                                        "hosts.c.container", "declared containers: gpu", 5),
    "provider-not-declared": Bad(toml("[providers.vast]", 'kind = "vastai"', "[hosts.g]",
                                      'kind = "provider"', 'provider = "runpod"'),
                                 "hosts.g.provider", "declared providers: vast", 5),
    "queue-policy-unknown-key": Bad(toml(*SLURM, "[hosts.c.queues.q]", 'max-walltime = "1h"',
                                         "mem-ceiling-gb = 1", "max-cpus = 3"),
                                    "hosts.c.queues.q.max-cpus",
                                    "max-walltime (required), mem-ceiling-gb (required)", 6),
    "queue-policy-missing-key": Bad(toml(*SLURM, "[hosts.c.queues.q]", 'max-walltime = "1h"'),
                                    "hosts.c.queues.q.mem-ceiling-gb",
                                    "mem-ceiling-gb (required)", 3),
    "negative-mem-ceiling": Bad(toml(*SLURM, "[hosts.c.queues.q]", 'max-walltime = "1h"',
                                     "mem-ceiling-gb = -1"),
                                "hosts.c.queues.q.mem-ceiling-gb", "greater than 0", 5),
    "bad-runtime": Bad(toml("[containers.x]", 'image = "x.sif"', 'runtime = "docker"'),
                       "containers.x.runtime", "'apptainer', 'singularity' or 'podman'", 3),
    "missing-required-host-field": Bad(toml("[hosts.box]", 'kind = "ssh"', "port = 2222"),
                                       "hosts.box.host", SSH_KEYS, 1),
    "slurm-ssh-login-without-host": Bad(toml(*SLURM, 'login = "ssh"'), "hosts.c.host",
                                        'login = "local"', 1),
    "local-name-reserved": Bad(toml("[hosts.local]", 'kind = "ssh"', 'host = "h"'),
                               "hosts.local.kind", 'kind = "local", or another name', 2),
    "bad-broker-url": Bad(toml("[broker]", 'url = "amqp://h"'), "broker.url", "redis://", 2),
    "key-given-twice": Bad(toml(*SLURM, "[hosts.c.queues.q]", "max-walltime = 1",
                                'max_walltime = "1h"', "mem-ceiling-gb = 1"),
                           "hosts.c.queues.q.max_walltime", "write it once", 5),
    "hostile-host-name": Bad(toml("[hosts.\"a'; echo pwned\"]", 'kind = "ssh"', 'host = "h"',
                                  "port = -1"),
                             "hosts.\"a'; echo pwned\".port", "greater than or equal to 1", 4),
    "inline-table": Bad(toml("[hosts]", 'box = { kind = "ssh", host = "h", port = "x" }'),
                        "hosts.box.port", "an integer", 2),
    "dotted-keys": Bad(toml("[hosts]", 'box.kind = "ssh"', 'box.host = "h"', 'box.port = "x"'),
                       "hosts.box.port", "an integer", 4),
}


@pytest.mark.parametrize("case", BAD.values(), ids=list(BAD))
def test_bad_config_names_file_key_line_and_fix(case: Bad, tmp_path: Path,
                                                monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(UNSET, raising=False)
    path = tmp_path / "mainboard.toml"
    path.write_text(case.text)
    with pytest.raises(ConfigError) as info:
        load_config(path)
    message = str(info.value)
    assert isinstance(info.value, case.error), message
    where = f"{path}:{case.line}:" if case.line else f"{path}:"
    assert message.startswith(where), message
    assert f" {case.key}:" in message, message
    assert case.hint in message, message
    assert "\n" not in message
    assert info.value.exit_code == 2


def test_unreadable_file_and_doubled_default(tmp_path: Path) -> None:
    path = tmp_path / "mainboard.toml"
    path.write_bytes(b'[workspace]\nname = "\xff\xfe"\n')
    with pytest.raises(ConfigError, match="cannot read the file.*valid: a readable UTF-8"):
        load_config(path)
    path.write_text(toml("[hosts.defaults]", "connect-timeout = 1", "connect_timeout = 2"))
    with pytest.raises(ConfigError, match=r":3: hosts.defaults.connect_timeout: key connect_t"):
        load_config(path)


def test_the_table_covers_at_least_thirty_inputs() -> None:
    assert len(BAD) >= 30


def test_secret_pasted_into_api_key_env_is_not_echoed(tmp_path: Path) -> None:
    secret = "sk-live-0123456789abcdef"
    path = tmp_path / "mainboard.toml"
    path.write_text(toml("[providers.vast]", 'kind = "vastai"', f'api-key-env = "{secret}"'))
    with pytest.raises(ConfigError) as info:
        load_config(path)
    assert f"{path}:3: providers.vast.api-key-env:" in str(info.value)
    assert "NAME of an environment variable" in str(info.value)
    assert secret not in str(info.value)


def test_example_config_loads_and_round_trips() -> None:
    config = load_config(EXAMPLE)
    assert config.path == EXAMPLE and config.root == EXAMPLE.parent
    assert config.host_names() == ["local", "workstation", "box", "miyabi-g", "campus-pbs",
                                   "gpu-rent"]
    kinds = {type(config.host(n)) for n in config.host_names()}
    assert kinds == {LocalHost, SshHost, SlurmHost, PbsHost, ProviderHost}
    assert Config.model_validate(config.model_dump()) == config
    assert Config.model_validate(json.loads(json.dumps(config.model_dump(mode="json")))) == config
    miyabi = config.host("miyabi-g")
    assert isinstance(miyabi, SlurmHost)
    assert miyabi.queues["short-g"].max_walltime == 8 * 3600
    assert miyabi.queues["long-g"].max_walltime == 2 * 86400
    assert miyabi.queues["short-g"].mem_ceiling_gb == 120
    assert miyabi.job_defaults(attempt=1)["mem_gb"] == 60
    assert miyabi.job_defaults(attempt=3)["mem_gb"] == 120
    assert miyabi.ssh_params() is not None and miyabi.container == "physics"


def test_good_config_values(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("MB_TEST_USER", "alice")
    monkeypatch.delenv(UNSET, raising=False)
    config = loads_config(toml(
        "[hosts.defaults]",
        "user = \"{{ env('MB_TEST_USER') }}\"",
        "port = 2200",
        'env = { A = "1", B = "2" }',
        "[hosts.defaults.defaults]",
        'walltime = "30m"',
        'mem-gb = "min(100, attempt * 50)"',
        "[hosts.box]",
        'kind = "ssh"',
        f"host = \"{{{{ env('{UNSET}', 'box.example.org') }}}}\"",
        "port = 2222",
        'env = { B = "mine" }',
        'known_hosts = "~/kh"',
        "[hosts.box.defaults]",
        'cpus = "{{ num_cpus() }}"',
        'gpus = "max(0, attempt - 1)"',
        "[hosts.here]",
        'kind = "local"',
        "[workspace]",
        "name = \"{{ hostname() }}\"",
    ), tmp_path / "mainboard.toml")
    box = config.host("box")
    assert isinstance(box, SshHost)
    assert (box.host, box.user, box.port) == ("box.example.org", "alice", 2222)  # host key wins
    assert box.env == {"A": "1", "B": "mine"}  # tables merge key by key
    assert box.job_defaults(attempt=2) == {"walltime": 1800, "mem_gb": 100.0,
                                           "cpus": local_num_cpus(), "gpus": 1}
    params = box.ssh_params()
    assert params.known_hosts == os.path.expanduser("~/kh") and params.connect_timeout == 10.0
    here = config.host("here")
    assert isinstance(here, LocalHost) and here.ssh_params() is None
    assert here.env == {"A": "1", "B": "2"}  # user/port skipped for local: no connection
    assert config.workspace.name == socket.gethostname()
    assert config.state_dir == tmp_path / ".mainboard"


def test_dash_and_underscore_keys_are_the_same() -> None:
    dashed = loads_config(toml("[hosts.c]", 'kind = "slurm"', "[hosts.c.queues.q]",
                               'max-walltime = "1-00:00:00"', "mem-ceiling-gb = 4"))
    under = loads_config(toml("[hosts.c]", 'kind = "slurm"', "[hosts.c.queues.q]",
                              "max_walltime = 86400", "mem_ceiling_gb = 4.0"))
    assert dashed.hosts == under.hosts


def test_job_defaults_expressions() -> None:
    config = loads_config(toml("[hosts.c]", 'kind = "slurm"', "[hosts.c.defaults]",
                               'walltime = "attempt * 3600"', 'mem-gb = "walltime_s / 360"',
                               'cpus = "num_cpus / 2"', 'queue = "short"'))
    host = config.host("c")
    values = host.job_defaults(attempt=2, num_cpus=9)
    assert values == {"walltime": 7200, "mem_gb": 20.0, "cpus": 5, "queue": "short"}
    assert host.job_defaults(attempt=1, walltime_s=720)["mem_gb"] == 2.0
    bare = loads_config(toml("[hosts.c]", 'kind = "slurm"', "[hosts.c.defaults]",
                             'mem-gb = "walltime_s / 360"', 'cpus = "attempt - 2"'))
    with pytest.raises(ExpressionError, match="walltime_s but no walltime"):
        bare.host("c").job_defaults()
    with pytest.raises(ExpressionError, match="cpus evaluated to -1"):
        bare.host("c").job_defaults(attempt=1, walltime_s=3600)


@pytest.mark.parametrize(("value", "seconds"), [
    (3600, 3600), ("3600", 3600), ("90s", 90), ("30m", 1800), ("2h", 7200), ("1d", 86400),
    ("1.5h", 5400), ("01:30:00", 5400), ("30:00", 1800), ("1-02:00:00", 93600),
    ("2-12", 216000), ("1-00:30", 88200), (" 2H ", 7200),
])
def test_durations(value: int | str, seconds: int) -> None:
    assert parse_duration(value) == seconds


@pytest.mark.parametrize("value", ["", "abc", "1:2:3:4", "-5", "00:60:00", "1-25:00:00",
                                   "5 minutes", True, None, [1]])
def test_bad_durations(value: object) -> None:
    with pytest.raises(ConfigError) as info:
        parse_duration(value)
    assert '"HH:MM:SS", "MM:SS", "D-HH:MM:SS"' in str(info.value)


def test_hosts_lookup_and_implicit_default(tmp_path: Path,
                                           monkeypatch: pytest.MonkeyPatch) -> None:
    config = load_config(EXAMPLE)
    with pytest.raises(UnknownHost) as info:
        config.host("nope")
    assert "declared hosts: local, workstation, box" in str(info.value)
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("MAINBOARD_CONFIG", raising=False)
    assert not any((d / "mainboard.toml").exists() for d in (tmp_path, *tmp_path.parents))
    implicit = load_config()
    assert implicit.path is None and implicit.root == tmp_path and implicit.broker.url is None
    assert implicit.host_names() == ["local"] and isinstance(implicit.host("local"), LocalHost)
    with pytest.raises(ConfigNotFound) as missing:
        load_config(required=True)
    assert str(tmp_path) in str(missing.value) and "MAINBOARD_CONFIG" in str(missing.value)


def test_discovery_walks_up_and_env_overrides(tmp_path: Path,
                                              monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("MAINBOARD_CONFIG", raising=False)
    top = tmp_path / "project"
    deep = top / "a" / "b"
    deep.mkdir(parents=True)
    (top / "mainboard.toml").write_text(toml("[workspace]", 'name = "top"'))
    monkeypatch.chdir(deep)
    assert find_config() == top / "mainboard.toml"
    assert load_config().workspace.name == "top" and load_config().root == top
    assert find_config(deep) == top / "mainboard.toml"
    other = tmp_path / "elsewhere"
    other.mkdir()
    (other / "mainboard.toml").write_text(toml("[workspace]", 'name = "other"'))
    monkeypatch.setenv("MAINBOARD_CONFIG", str(other / "mainboard.toml"))
    assert find_config() == other / "mainboard.toml"
    assert load_config().workspace.name == "other"
    monkeypatch.setenv("MAINBOARD_CONFIG", str(other))  # a directory holding mainboard.toml
    assert load_config().workspace.name == "other"
    monkeypatch.setenv("MAINBOARD_CONFIG", str(tmp_path / "missing.toml"))
    with pytest.raises(ConfigNotFound, match="missing.toml does not exist"):
        load_config()  # an explicit override that is wrong is an error even when not required


def test_source_map_skips_multiline_values() -> None:
    source = SourceMap(toml(
        '[a]',
        'text = """',
        'port = 1',
        '[fake]',
        '"""',
        'list = [',
        '  "x", ["y",',
        '  "z"], {q = 1, r = 2},',
        ']',
        'after = 2',
        "'quoted.key' = 3",
        'dotted . deep = 4',
        '[[runs]]',
        'n = 1',
        '[[runs]]',
        'n = 2',
    ))
    assert source.exact(("a", "text")) == 2
    assert source.exact(("a", "port")) is None and source.exact(("fake",)) is None
    assert source.exact(("a", "after")) == 10
    assert source.exact(("a", "quoted.key")) == 11
    assert source.exact(("a", "dotted", "deep")) == 12
    assert source.exact(("runs", 1, "n")) == 16
    assert source.exact(("a", "list", 0)) == 7 and source.exact(("a", "list", 1)) == 7
    assert source.exact(("a", "list", 2)) == 8 and source.exact(("a", "list", 3)) is None
    assert source.line(("a", "list", 1, 0)) == 7  # falls back to the longest known prefix
    assert source.table_at(15) == ("runs", 1) and source.table_at(1) == ("a",)


def _cli(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if k != "MAINBOARD_CONFIG"}
    return subprocess.run([str(MAINBOARD), *args], cwd=cwd, env=env, capture_output=True,
                          text=True, timeout=60)


def test_cli_bad_config_is_one_line_exit_2(tmp_path: Path) -> None:
    bad = tmp_path / "bad.toml"
    bad.write_text(toml(*SSH, "port = 0"))
    result = _cli("--config", str(bad), "config", "check", cwd=tmp_path)
    assert result.returncode == 2
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1, result.stderr
    assert f"{bad}:4: hosts.box.port:" in lines[0] and "Traceback" not in result.stderr
    debug = _cli("--debug", "--config", str(bad), "config", "check", cwd=tmp_path)
    assert debug.returncode != 0 and "Traceback" in debug.stderr
    assert "hosts.box.port" in debug.stderr


def test_cli_config_check_lists_hosts_and_hides_passwords(tmp_path: Path) -> None:
    result = _cli("--config", str(EXAMPLE), "config", "check", cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    assert "miyabi-g" in result.stdout and "slurm" in result.stdout
    path = tmp_path / "mainboard.toml"
    path.write_text(toml("[broker]", 'url = "redis://:hunter2secret@127.0.0.1:1/0"',
                         "[hosts.l]", 'kind = "local"',
                         'env = { HF_TOKEN = "{{ env(\'MB_TEST_TOKEN\', \'tok-very-secret\') }}", '
                         'MODE = "fast" }'))
    as_json = _cli("config", "check", "--json", cwd=tmp_path)
    assert as_json.returncode == 0, as_json.stderr
    dumped = json.loads(as_json.stdout)
    assert dumped["broker"]["url"] == "redis://:***@127.0.0.1:1/0"
    assert "hunter2secret" not in as_json.stdout and "tok-very-secret" not in as_json.stdout
    assert dumped["hosts"]["l"]["env"] == {"HF_TOKEN": "***", "MODE": "fast"}
    assert dumped["path"] == str(path)
    missing = _cli("config", "check", cwd=tmp_path.parents[1])
    assert missing.returncode == 2 and "no mainboard.toml" in missing.stderr


def test_bad_broker_url_error_never_shows_the_password(tmp_path: Path) -> None:
    """A wrong scheme is refused, and the message hides the password it quotes."""
    path = tmp_path / "mainboard.toml"
    path.write_text('[broker]\nurl = "amqp://:hunter2@h/"\n')
    with pytest.raises(ConfigError) as info:
        load_config(path)
    assert "hunter2" not in str(info.value)
    assert "broker.url" in str(info.value) and "rediss://" in str(info.value)
