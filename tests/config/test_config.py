"""mainboard.toml: every class of bad input gives one precise line; good files round-trip."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
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
from mainboard.config.interpolate import local_num_cpus
from mainboard.config.sourcemap import SourceMap
from mainboard.errors import ConfigError, ConfigNotFound, ExpressionError, UnknownHost
from tests.support.cliserver import run_mainboard
from tests.support.config_cases import BAD, ISSUE_EXAMPLE, SSH, UNSET, Bad, toml

REPO = Path(__file__).resolve().parents[2]
EXAMPLE = REPO / "deploy" / "mainboard.example.toml"
MAINBOARD = Path(sys.executable).parent / "mainboard"


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


@pytest.mark.parametrize("text", ["", "\n", "# just marks the workspace root\n"])
def test_empty_mainboard_toml_is_every_default_rooted_here(tmp_path: Path, text: str) -> None:
    """An empty file is valid: it marks the workspace root, and every table takes its default."""
    path = tmp_path / "mainboard.toml"
    path.write_text(text)
    config = load_config(path)
    assert config.path == path.resolve() and config.state_dir == tmp_path.resolve() / ".mainboard"
    assert config.hosts == {} and config.host_names() == ["local"] and config.broker.url is None


def test_safe_names_addresses_and_interpolated_numbers_are_accepted() -> None:
    """The tighter forms keep every ordinary name, IPv4/IPv6 address and user, and a number
    that interpolation gives as a string still loads as a number."""
    config = loads_config(toml(
        '[hosts."node-1.cluster_a"]', 'kind = "ssh"', 'host = "::1"', 'user = "first.last@lab"',
        "port = \"{{ env('MB_TEST_SURELY_UNSET_PORT', '2222') }}\"", "connect-timeout = 5",
        "[hosts.v4]", 'kind = "ssh"', 'host = "192.0.2.7"', 'user = "_svc-1"',
        "[hosts.G2]", 'kind = "slurm"', 'login = "ssh"', 'host = "login-2.hpc.example.org"',
        "[hosts.G2.queues.q]", 'max-walltime = "1h"', "mem-ceiling-gb = 16", "max-nodes = 4"))
    node = config.host("node-1.cluster_a")
    assert (node.host, node.user, node.port, node.connect_timeout) == ("::1", "first.last@lab",
                                                                       2222, 5.0)
    assert config.host("v4").user == "_svc-1" and config.host("G2").queues["q"].max_nodes == 4


def test_secret_pasted_into_api_key_env_is_not_echoed(tmp_path: Path) -> None:
    secret = "sk-live-0123456789abcdef"
    path = tmp_path / "mainboard.toml"
    path.write_text(toml("[providers.vast]", 'kind = "vastai"', f'api-key-env = "{secret}"'))
    with pytest.raises(ConfigError) as info:
        load_config(path)
    assert f"{path}:3: providers.vast.api-key-env:" in str(info.value)
    assert "NAME of an environment variable" in str(info.value)
    assert secret not in str(info.value)


def test_interpolated_secret_in_a_wrong_place_is_not_echoed(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A token interpolated into a key that refuses it: the error shows the template, not it."""
    secret = "hf_live_0123456789abcdef"
    monkeypatch.setenv("MB_TEST_API_KEY", secret)
    path = tmp_path / "mainboard.toml"
    path.write_text(toml(*SSH, "port = \"{{ env('MB_TEST_API_KEY') }}\""))
    with pytest.raises(ConfigError) as info:
        load_config(path)
    message = str(info.value)
    assert message.startswith(f"{path}:4: hosts.box.port: wrong type: expected an integer")
    assert "(expanded from {{ env('MB_TEST_API_KEY') }}) (got '***')" in message
    assert secret not in message


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


@pytest.mark.parametrize("kind", ["slurm", "pbs"])
def test_batch_host_with_host_logs_in_over_ssh_by_default(kind: str) -> None:
    """``host`` alone means ssh to that login node; no host means this machine."""
    config = loads_config(toml("[hosts.remote]", f'kind = "{kind}"', 'host = "login.example"',
                               "port = 2222", 'user = "me"',
                               "[hosts.here]", f'kind = "{kind}"',
                               "[hosts.said]", f'kind = "{kind}"', 'login = "ssh"', 'host = "h"'))
    remote, here, said = (config.host(n) for n in ("remote", "here", "said"))
    assert isinstance(remote, SlurmHost | PbsHost) and isinstance(here, SlurmHost | PbsHost)
    params = remote.ssh_params()
    assert remote.login == "ssh" and params is not None
    assert (params.host, params.port, params.user) == ("login.example", 2222, "me")
    assert here.login == "local" and here.ssh_params() is None
    assert said.ssh_params() is not None
    assert Config.model_validate(config.model_dump()) == config


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
    assert source.key_at(12) == ("a", "dotted", "deep") and source.key_at(5) == ()
    assert source.key_at(7) == ("a", "list", 0) and source.key_at(13) == ("runs", 0)
    assert source.opened_by(3) == ("a", "text") and source.opened_by(8) == ("a", "list")
    assert source.opened_by(10) is None and source.unclosed is None
    assert SourceMap(toml("[a]", "x = [1,", "  2", "y = 3")).unclosed == ("a", "x")
    assert SourceMap(toml("[a]", "s = '''", "never closed")).unclosed == ("a", "s")


def _cli(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if k != "MAINBOARD_CONFIG"}
    return run_mainboard(args, cwd=cwd, env=env, timeout=60)


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


def test_cli_local_login_beside_a_host_is_one_line_exit_2(tmp_path: Path) -> None:
    """The contradiction is refused by the real loader; host alone is an ssh login."""
    bad = tmp_path / "mainboard.toml"
    bad.write_text(toml('[hosts.c]', 'kind = "slurm"', 'host = "login.example"',
                        'login = "local"'))
    result = _cli("config", "check", cwd=tmp_path)
    assert result.returncode == 2 and result.stdout == ""
    assert result.stderr.count("\n") == 1, result.stderr
    assert result.stderr.startswith(f"mainboard: error: {bad}:4: hosts.c.login: login = "
                                    '"local" would ignore host = "login.example"')
    assert 'valid: login = "ssh" (or no login key)' in result.stderr
    bad.write_text(toml('[hosts.c]', 'kind = "slurm"', 'host = "login.example"', "port = 2222"))
    good = _cli("config", "check", cwd=tmp_path)
    assert good.returncode == 0, good.stderr
    assert "ssh " in good.stdout and "@login.example:2222, sbatch" in good.stdout


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


def test_every_key_the_issue_names_is_accepted_for_its_kind(tmp_path: Path) -> None:
    """Each table and per-kind key of mainboard.toml as specified loads with its value."""
    config = loads_config(toml(
        "[workspace]", 'name = "w"', 'exclude = ["*.tmp"]',
        "[broker]", 'url = "redis://:pw@127.0.0.1:7000/0"',
        "[deps]", 'redis-server = "apt:redis-server"',
        "[python]", 'deps = ["numpy>=1.26"]',
        "[containers.phys]", 'image = "docker://x/y:1"', 'runtime = "podman"',
        'binds = ["/scratch"]',
        "[providers.vast]", 'kind = "vastai"', 'api_key_env = "VAST_API_KEY"',
        "[hosts.defaults]", 'user = "inherited"',
        "[hosts.defaults.defaults]", 'walltime = "2h"',
        "[hosts.s]", 'kind = "ssh"', 'host = "s.example"', 'user = "me"', "port = 2222",
        'identity = "~/.ssh/k"', 'root = "/srv/mb"', 'python = "python3.12"',
        "[hosts.sl]", 'kind = "slurm"', 'login = "ssh"', 'host = "login.example"', "port = 22",
        'identity = "/k"', 'account = "gx1"', 'partition = "gpu"', 'modules = ["cuda/12"]',
        'container = "phys"', 'python = "/opt/py/bin/python3"',
        "[hosts.sl.defaults]", 'mem-gb = "min(100, attempt * 50)"', 'queue = "short"',
        "[hosts.sl.queues.short]", 'max-walltime = "8h"', "mem-ceiling-gb = 120",
        "max-nodes = 8", "max-gpus = 4",
        "[hosts.pb]", 'kind = "pbs"', 'login = "local"', 'account = "phys"', 'queue = "workq"',
        'modules = ["openmpi"]', 'container = "phys"',
        "[hosts.g]", 'kind = "provider"', 'provider = "vast"', 'gpu = "H100"',
        "max_usd_hr = 2.5",
    ), tmp_path / "mainboard.toml")
    assert (config.workspace.name, config.workspace.exclude) == ("w", ["*.tmp"])
    assert config.broker.url == "redis://:pw@127.0.0.1:7000/0"
    assert config.deps == {"redis-server": "apt:redis-server"}
    assert config.python.deps == ["numpy>=1.26"]
    phys = config.containers["phys"]
    assert (phys.image, phys.runtime, phys.binds) == ("docker://x/y:1", "podman", ["/scratch"])
    vast = config.providers["vast"]
    assert (vast.kind, vast.api_key_env) == ("vastai", "VAST_API_KEY")
    s = config.host("s")
    assert isinstance(s, SshHost)
    assert (s.host, s.user, s.port, s.identity, s.root, s.python) == (
        "s.example", "me", 2222, "~/.ssh/k", "/srv/mb", "python3.12")
    sl = config.host("sl")
    assert isinstance(sl, SlurmHost) and sl.ssh_params() is not None
    assert (sl.login, sl.host, sl.user, sl.account, sl.partition, sl.modules, sl.container,
            sl.python) == ("ssh", "login.example", "inherited", "gx1", "gpu", ["cuda/12"],
                           "phys", "/opt/py/bin/python3")
    queue = sl.queues["short"]
    assert (queue.max_walltime, queue.mem_ceiling_gb, queue.max_nodes, queue.max_gpus) == (
        8 * 3600, 120, 8, 4)
    assert sl.job_defaults(attempt=3) == {"walltime": 7200, "mem_gb": 100.0, "queue": "short"}
    pb = config.host("pb")
    assert isinstance(pb, PbsHost) and pb.ssh_params() is None
    assert (pb.account, pb.queue, pb.modules, pb.container) == ("phys", "workq", ["openmpi"],
                                                                "phys")
    g = config.host("g")
    assert isinstance(g, ProviderHost)
    assert (g.provider, g.gpu, g.max_usd_hr) == ("vast", "H100", 2.5)
    assert g.job_defaults() == {"walltime": 7200}  # [hosts.defaults.defaults] reach every kind




def test_the_product_pages_example_loads_as_written(tmp_path: Path) -> None:
    """Issue 14's file, verbatim: [python.deps] as a table, modules as a table, an ssh host
    whose address is its name (as `ssh gold` would read it)."""
    path = tmp_path / "mainboard.toml"
    path.write_text(ISSUE_EXAMPLE)
    config = load_config(path)
    assert config.deps == {"python": ">=3.11"} and config.python.deps == ["torch>=2.9"]
    gold, miyabi = config.host("gold"), config.host("miyabi-g")
    assert isinstance(gold, SshHost) and gold.host == "gold" and gold.root == "/home/pedro/projects"
    assert gold.ssh_params().host == "gold"
    assert isinstance(miyabi, PbsHost)
    assert (miyabi.container, miyabi.account, miyabi.modules) == ("ngc", "xg25g007",
                                                                  ["singularity/4.2.1"])
    assert miyabi.queues["short-g"].max_walltime == 8 * 3600 - 1
    assert miyabi.job_defaults(attempt=3) == {"mem_gb": 100.0, "queue": "debug-g"}
    checked = _cli("config", "check", cwd=tmp_path)  # as a new user would try it
    assert checked.returncode == 0 and checked.stderr == "", checked.stderr
    assert checked.stdout.startswith(f"{path}: ok\n") and "miyabi-g  pbs" in checked.stdout


def test_python_deps_table_and_array_are_one_requirement_set() -> None:
    """Both spellings give the same requirements, so the same environment key."""
    from mainboard.bridges.provision import build_manifest, check_deps

    table = loads_config('[python.deps]\nsix = "1.16.0"\nnumpy = ">=1.26,<3"\nrich = "*"\n'
                         '"pkg[extra]" = ""\nscipy = "1.11.*"\n')
    array = loads_config('[python]\ndeps = ["scipy==1.11.*", "rich", "numpy<3,>=1.26", '
                         '"six==1.16.0", "pkg[extra]"]\n')
    assert table.python.deps == ["six==1.16.0", "numpy<3,>=1.26", "rich", "pkg[extra]",
                                 "scipy==1.11.*"]
    assert build_manifest(check_deps(table.python.deps), None) == \
        build_manifest(check_deps(array.python.deps), None)
