"""mainboard.toml edges the main table (tests/config_cases.py) leaves out: the broker's URL
forms and its Sentinel pair, pool bounds, interpolation mistakes, and what each host kind
answers when a job, a probe or a submit gate asks it. Each bad input is one line naming the
key and what is valid."""

from __future__ import annotations

import tomllib

import pytest
from packaging.specifiers import SpecifierSet

from mainboard.config import loads_config
from mainboard.config.hostkinds import HOST_TABLE
from mainboard.config.interpolate import local_num_cpus
from mainboard.config.pins import checked_pins, unmet, version_in
from mainboard.config.sourcemap import SourceMap
from mainboard.config.syntax import GENERIC_FIX, toml_syntax_error
from mainboard.errors import ConfigError, ExpressionError

BROKER_URL = "valid: redis://[:PASSWORD@]HOST:PORT/DB"

# name -> (mainboard.toml, the start of its one-line error after "<config>:")
BAD: dict[str, tuple[str, str]] = {
    "outage-boolean": ("[broker]\noutage = true\n", "2: broker.outage: not a duration"),
    "walltime-negative": ('[hosts.b]\nkind = "local"\n[hosts.b.defaults]\nwalltime = -5\n',
                          "4: hosts.b.defaults.walltime: a duration cannot be negative"),
    "sentinel-url-without-master": ('[broker]\nurl = "sentinel://h:1/0"\n',
                                    "2: broker.url: master '': letters, digits"),
    "password-with-hash": ('[broker]\nurl = "redis://:pa#ss@h:6379/0"\n',
                           "2: broker.url: the password holds / ? # or a space"),
    "unbalanced-ipv6": ('[broker]\nurl = "redis://[::1:6379/0"\n',
                        "2: broker.url: unbalanced [ or ] around the host"),
    "port-above-range": ('[broker]\nurl = "redis://h:99999/0"\n',
                         "2: broker.url: the port is out of range: valid 1-65535"),
    "port-zero": ('[broker]\nurl = "redis://h:0/0"\n',
                  "2: broker.url: the port is out of range: valid 1-65535"),
    "port-not-a-number": ('[broker]\nurl = "redis://h:abc/0"\n',
                          "2: broker.url: the port is not a number"),
    "database-not-a-number": ('[broker]\nurl = "redis://h:6379/x"\n',
                              "2: broker.url: the database after the host must be a number"),
    "worker-url-alone": ('[broker]\nworker_url = "redis://h:6379/0"\n',
                         "2: broker.worker_url: worker_url is for the workers of [broker] url"),
    "tls-beside-url": ('[broker]\ntls = true\nurl = "redis://h:6379/0"\n',
                       "2: broker.tls: tls applies to the embedded broker only"),
    "master-alone": ('[broker]\nmaster = "mb"\n', "1: broker.sentinels: sentinels is missing"),
    "sentinels-alone": ('[broker]\nsentinels = ["h:26379"]\n',
                        "1: broker.master: master is missing"),
    "min-replicas-alone": ("[broker]\nmin_replicas = 1\n",
                           "2: broker.min_replicas: min_replicas needs a Sentinel-managed"),
    "no-sentinel": ('[broker]\nsentinels = []\nmaster = "mb"\n',
                    "2: broker.sentinels: no sentinel listed"),
    "sentinels-and-url": ('[broker]\nsentinels = ["h:26379"]\nmaster = "mb"\n'
                          'url = "redis://h:6379/0"\n',
                          "4: broker.url: url and sentinels both name the broker"),
    "sentinel-entry": ('[broker]\nsentinels = ["h:x"]\nmaster = "mb"\n',
                       "2: broker.sentinels.0: sentinel 'h:x': not HOST:PORT"),
    "master-name": ('[broker]\nsentinels = ["h:26379"]\nmaster = "m b"\n',
                    "3: broker.master: master 'm b': letters, digits"),
    "min-above-max-jobs": ('[fleet.pools.p]\nhost = "local"\nmin_jobs = 3\nmax_jobs = 2\n',
                           "1: fleet.pools.p.min-jobs: min-jobs 3 is above max-jobs 2"),
    "walltime-above-max": ('[fleet.pools.p]\nhost = "local"\nwalltime = 100\n'
                           'max_walltime = 50\n',
                           "3: fleet.pools.p.walltime: walltime 100 s is above max-walltime 50"),
    "workers-share-gpus": ('[fleet.pools.p]\nhost = "local"\ngpus = 1\nworkers = 2\n',
                           "4: fleet.pools.p.workers: workers 2 would share 1 GPU(s)"),
    "pool-host-undeclared": ('[fleet.pools.p]\nhost = "nope"\n',
                             "2: fleet.pools.p.host: host 'nope' is not declared"),
    "pool-nodes-on-local": ('[fleet.pools.p]\nhost = "local"\nnodes = 2\n',
                            "3: fleet.pools.p.nodes: nodes 2 on host 'local' (kind local): only "
                            "a scheduler's allocation spans nodes (got 2); valid: nodes = 1 for "
                            "local, ssh and provider hosts; nodes >= 1 for slurm and pbs hosts"),
    "host-named-auto": ('[hosts.auto]\nkind = "ssh"\nhost = "h"\n',
                        '1: hosts.auto: the host name "auto" is reserved for the router'),
    "host-kind-not-a-string": ('[hosts.c]\nkind = 5\n', "2: hosts.c.kind: unknown host kind"),
    "conda-table": ("[conda]\nx = 1\n", "1: conda: [conda] environments are not supported"),
    "hosts-defaults-not-a-table": ("[hosts]\ndefaults = 1\n",
                                   "2: hosts.defaults: hosts.defaults must be a table"),
    "broker-not-a-table": ("broker = 1\n", "1: broker: wrong type: expected a table"),
    "deps-not-a-table": ("deps = 1\n", "1: deps: wrong type: expected a table"),
    "pools-not-a-table": ("[fleet]\npools = 1\n", "2: fleet.pools: wrong type: expected a table"),
    "provider-option-not-a-scalar": ('[providers.v]\nkind = "vast"\noptions = {x = [1]}\n',
                                     "3: providers.v.options.x: wrong type: expected a quoted "
                                     "string (got [1])"),  # pydantic adds the union's tag
    "modules-not-an-array": ('[hosts.c]\nkind = "slurm"\nmodules = 1\n',
                             "3: hosts.c.modules: wrong type: expected an array"),
    "interpolation-syntax": ('[workspace]\nname = "{{ env( }}"\n',
                             "2: workspace.name: cannot parse interpolation {{ env( }}"),
    "interpolation-not-a-call": ('[workspace]\nname = "{{ x }}"\n',
                                 "2: workspace.name: interpolation must be a single function "
                                 "call, not `x`"),
    "interpolation-keyword": ('[workspace]\nname = "{{ env(a=\'1\') }}"\n',
                              "2: workspace.name: env() takes no keyword arguments"),
    "interpolation-arity": ('[workspace]\nname = "{{ hostname(\'a\') }}"\n',
                            "2: workspace.name: wrong number of arguments to hostname()"),
}


@pytest.mark.parametrize("text,start", BAD.values(), ids=list(BAD))
def test_a_bad_value_is_one_line_naming_key_and_fix(text: str, start: str) -> None:
    with pytest.raises(ConfigError) as info:
        loads_config(text)
    message = str(info.value)
    assert message.startswith("<config>:" + start), message
    assert "\n" not in message and info.value.exit_code == 2
    assert "pa#ss" not in message  # a password is never shown, even a malformed one


def test_interpolation_errors_are_expression_errors() -> None:
    with pytest.raises(ExpressionError):
        loads_config(BAD["interpolation-keyword"][0])


def test_sentinels_and_master_stand_for_the_url() -> None:
    config = loads_config('[broker]\nsentinels = ["h:26379", "g:26380"]\nmaster = "mb"\n')
    assert config.broker.url == "sentinel://h:26379,g:26380/0?master=mb"
    same = loads_config('[broker]\nurl = "sentinel://h:26379/0?master=mb"\n')
    assert same.broker.url == "sentinel://h:26379/0?master=mb"


def test_each_host_kind_answers_what_jobs_and_submits_ask() -> None:
    config = loads_config("\n".join((
        '[containers.img]', 'image = "docker.io/library/python:3.12"',
        '[providers.cloud]', 'kind = "vast"',
        '[hosts.box]', 'kind = "ssh"', 'python = "python3.12"',
        '[hosts.c]', 'kind = "slurm"', 'partition = "gpu"', 'account = "proj"',
        'max_jobs = 4', 'max_submits_per_minute = 6', 'container = "img"',
        '[hosts.p]', 'kind = "pbs"', 'queue = "short"',
        '[hosts.r]', 'kind = "provider"', 'provider = "cloud"', 'python = "python3.11"',
        '[fleet]', 'stall_after = 200',
        '[fleet.pools.a]', 'host = "c"', 'max_jobs = 3', 'nodes = 2',
        '[fleet.pools.b]', 'host = "local"', 'stall_after = 30', '')))
    local, box, c, p, r = (config.host(n) for n in ("local", "box", "c", "p", "r"))
    assert [h.interpreter() for h in (local, box, c, r)] == \
        ["python3", "python3.12", "python3", "python3.11"]
    assert [h.env_modules() for h in (local, box, c, r)] == [[], [], [], []]
    assert [h.default_queue() for h in (local, c, p)] == [None, "gpu", "short"]
    assert [h.default_account() for h in (local, c)] == [None, "proj"]
    assert local.submit_gate() is None and p.submit_gate().max_jobs is None
    gate = c.submit_gate()
    assert (gate.max_jobs, gate.per_minute, gate.per_minute_given) == (4, 6, True)
    assert config.container_of(c) is config.containers["img"]
    assert config.container_of(box) is None
    pools = config.fleet.pools
    assert pools["a"].autoscaled and not pools["b"].autoscaled
    assert [config.fleet.stall_of(pools[n]) for n in ("a", "b")] == [200, 30]
    assert {kind for kind, row in HOST_TABLE.items() if row.multi_node} == {"slurm", "pbs"}


def test_pins_name_what_a_host_lacks() -> None:
    wanted = checked_pins({"python": ">=3.11", "git": ">=2.30", "make": "source: apt"})
    assert list(wanted) == ["git"]
    assert version_in("git version 2.43.0") == "2.43.0" and version_in("") is None
    assert unmet("git", wanted["git"], "2.43.0") is None
    assert unmet("git", wanted["git"], "2.1.0") == 'git 2.1.0 does not satisfy [deps] git = ">=2.30"'
    assert unmet("git", SpecifierSet(), None) == "git not found (pinned git * in [deps])"
    assert unmet("git", wanted["git"], "banana") == \
        "git version 'banana' cannot be compared with [deps] git = \">=2.30\""


def test_the_source_map_keeps_lines_past_odd_strings_and_keys() -> None:
    text = "\n".join((
        '[t]',
        'a = """one line""" # closed where it opened',
        "b = 'literal' ",
        '"k\\q" = 1',            # an escape json cannot read: the raw key is kept
        "'lit key' = 2",
        "'broken = 3",            # not a key this scanner reads: skipped
        "= 4",
        "% = 5",
        "x.",                     # a dotted key that runs out: skipped
        'c = 6', ''))
    sources = SourceMap(text)
    assert sources.line(("t", "c")) == 10 and sources.line(("t", "b")) == 3
    assert sources.line(("t", "k\\q")) == 4 and sources.line(("t", "lit key")) == 5
    assert sources.line(("nowhere",)) is None


def test_a_syntax_message_without_a_position_names_the_file_and_the_general_rule() -> None:
    error = toml_syntax_error(tomllib.TOMLDecodeError("Something new"), "a = 1\n", "f.toml")
    assert str(error) == f"f.toml: TOML syntax error: Something new; valid: {GENERIC_FIX}"


def test_without_cpu_affinity_num_cpus_counts_the_machine(monkeypatch: pytest.MonkeyPatch) -> None:
    """macOS has no sched_getaffinity: ``{{ num_cpus() }}`` is then every CPU of the machine."""
    monkeypatch.delattr("os.sched_getaffinity")
    monkeypatch.setattr("os.cpu_count", lambda: 6)
    assert local_num_cpus() == 6
    assert loads_config('[workspace]\nname = "n{{ num_cpus() }}"\n').workspace.name == "n6"
