"""The table of bad mainboard.toml inputs for tests/config/test_config.py: each with the key path,
the line and the fix its one-line error must name."""

from __future__ import annotations

from dataclasses import dataclass

from mainboard.errors import ConfigError, ExpressionError

UNSET = "MB_TEST_SURELY_UNSET_VARIABLE"
EXPR_HINT = "names attempt, walltime_s, num_cpus; functions min(), max(), ceil(), floor()"
KINDS = "local, ssh, slurm, pbs, provider"
PROVIDER_KEYS = "provider (required), root (default: '~/mainboard')"
HOST_NAME = "1-63 letters, digits, '.', '_' or '-', starting with a letter or digit"
ADDRESS = "a host name or IP address: letters, digits, '.', '-', ':'"
USER = "a user name: letters, digits, '.', '_', '-', '@', not starting with '-'"


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
    "syntax-missing-value": Bad(toml(*SSH[:2], "port = "), "hosts.box.port",
                                'a value after "=": a "quoted string", a number', 3),
    "syntax-missing-value-at-end": Bad("[hosts.box]\nkind = \"ssh\"\nport =", "hosts.box.port",
                                       "Invalid value at the end of the file", 3),
    "syntax-unclosed-header": Bad(toml("[workspace]", 'name = "x"', "[hosts.box"),
                                  "hosts.box", "close the header: [table.name]", 3),
    "syntax-duplicate-key": Bad(toml("[workspace]", 'name = "a"', 'name = "b"'), "workspace.name",
                                "each key at most once per table", 3),
    "syntax-duplicate-table": Bad(toml("[workspace]", 'name = "a"', "[workspace]"), "workspace",
                                  "each [table] header at most once per file", 3),
    "syntax-unclosed-array": Bad(toml("[python]", 'deps = ["numpy",', '  "vegas"', "[workspace]"),
                                 "python.deps", "close the array with ]", 2),
    "syntax-unterminated-string": Bad(toml("[hosts.box]", 'kind = "ssh', 'host = "h"'),
                                      "hosts.box.kind", 'strings in "double quotes"', 2),
    "syntax-windows-path-backslash": Bad(toml(*SSH, 'identity = "C:\\Users\\me\\key"'),
                                         "hosts.box.identity", "'single quotes' (taken literally)",
                                         4),
    "syntax-unquoted-string": Bad(toml("[hosts.box]", "kind = ssh"), "hosts.box.kind",
                                  'a value after "=": a "quoted string"', 2),
    "syntax-key-with-space": Bad(toml("[workspace]", "my name = 1"), "workspace",
                                 'a key with spaces or dots must be "quoted"', 2),
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
                                "hosts.c.defaults.walltime",
                                'neither a duration nor a valid expression (expression syntax '
                                'error: invalid syntax) (got \'2 hours\'); valid: a duration: '
                                '"HH:MM:SS"', 4, ExpressionError),
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
                            "hosts.c.defaults.mem-gb", "mem-gb must be greater than 0", 4),
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
                                    "missing required key mem-ceiling-gb; valid: max-walltime "
                                    "(required), mem-ceiling-gb (required)", 3),
    "negative-mem-ceiling": Bad(toml(*SLURM, "[hosts.c.queues.q]", 'max-walltime = "1h"',
                                     "mem-ceiling-gb = -1"),
                                "hosts.c.queues.q.mem-ceiling-gb", "greater than 0", 5),
    "bad-runtime": Bad(toml("[containers.x]", 'image = "x.sif"', 'runtime = "docker"'),
                       "containers.x.runtime", "'apptainer', 'singularity' or 'podman'", 3),
    "missing-required-host-field": Bad(toml("[hosts.g]", 'kind = "provider"', "gpu = \"H100\""),
                                       "hosts.g.provider", PROVIDER_KEYS, 1),
    # [deps] pins, [python.deps] and modules as tables (issue 14)
    "python-pin-not-a-specifier": Bad(toml("[deps]", 'python = "three"'), "deps.python",
                                      "a version specifier such as", 2),
    "tool-pin-malformed": Bad(toml("[deps]", 'singularity = ">=4..2"'), "deps.singularity",
                              "a version specifier such as", 2),
    "tool-pin-not-a-string": Bad(toml("[deps]", "singularity = 4"), "deps.singularity",
                                 "a version specifier such as", 2),
    "tool-name-hostile": Bad(toml("[deps]", '"x; touch y" = ">=1"'), 'deps."x; touch y"',
                             "letters, digits", 2),
    "python-deps-table-bad-spec": Bad(toml("[python.deps]", 'six = "1.16.0"',
                                           'torch = "=>2.9"'), "python.deps.torch",
                                      'torch = ">=2.9"', 3),
    "python-deps-table-number": Bad(toml("[python.deps]", "torch = 2.9"), "python.deps.torch",
                                    'torch = ">=2.9"', 2),
    "modules-table-number": Bad(toml(*SLURM, "modules = { singularity = 4.2 }"),
                                "hosts.c.modules.singularity", '"4.2.1"', 3),
    "modules-option-like": Bad(toml(*SLURM, 'modules = ["-f x"]'), "hosts.c.modules.0",
                               'not starting with "-"', 3),
    "slurm-ssh-login-without-host": Bad(toml(*SLURM, 'login = "ssh"'), "hosts.c.host",
                                        'login = "local"', 1),
    # host means "submit through that login node": an explicit local login beside it is refused
    "slurm-local-login-with-host": Bad(toml(*SLURM, 'host = "login.example"', 'login = "local"'),
                                       "hosts.c.login", 'login = "ssh" (or no login key)', 4),
    "pbs-local-login-with-host": Bad(toml("[hosts.p]", 'kind = "pbs"', 'login = "local"',
                                          'host = "pbs.example"', "port = 2222"),
                                     "hosts.p.login", 'would ignore host = "pbs.example"', 3),
    "inherited-local-login-with-host": Bad(toml("[hosts.defaults]", 'login = "local"', *SLURM,
                                                'host = "login.example"'),
                                           "hosts.defaults.login", "(inherited by hosts.c)", 2),
    "local-name-reserved": Bad(toml("[hosts.local]", 'kind = "ssh"', 'host = "h"'),
                               "hosts.local.kind", 'kind = "local", or another name', 2),
    "bad-broker-url": Bad(toml("[broker]", 'url = "amqp://h"'), "broker.url", "redis://", 2),
    "key-given-twice": Bad(toml(*SLURM, "[hosts.c.queues.q]", "max-walltime = 1",
                                'max_walltime = "1h"', "mem-ceiling-gb = 1"),
                           "hosts.c.queues.q.max_walltime", "write it once", 5),
    "hostile-host-name": Bad(toml("[hosts.\"a'; echo pwned\"]", 'kind = "ssh"', 'host = "h"',
                                  "port = -1"),
                             "hosts.\"a'; echo pwned\"", HOST_NAME, 1),
    "bad-env-name": Bad(toml(*SSH, 'env = { "OMP THREADS" = "1" }'),
                        'hosts.box.env."OMP THREADS"', "not starting with a digit", 4),
    "inherited-bad-env-name": Bad(toml("[hosts.defaults]", 'env = { 1X = "1" }', *SSH),
                                  "hosts.defaults.env.1X", "(inherited by hosts.box)", 2),
    "empty-host-name": Bad(toml('[hosts.""]', 'kind = "local"'), 'hosts.""', HOST_NAME, 1),
    "interpolated-bad-value": Bad(toml(*SSH, "port = \"{{ env('MB_TEST_PORT', 'ssh') }}\""),
                                  "hosts.box.port", "(expanded from {{ env('MB_TEST_PORT', "
                                  "'ssh') }}) (got 'ssh'); valid: an integer from 1", 4),
    "inline-table": Bad(toml("[hosts]", 'box = { kind = "ssh", host = "h", port = "x" }'),
                        "hosts.box.port", "an integer", 2),
    "dotted-keys": Bad(toml("[hosts]", 'box.kind = "ssh"', 'box.host = "h"', 'box.port = "x"'),
                       "hosts.box.port", "an integer", 4),
    # host names end up in paths, node names and job scripts: only a safe form is a name
    "host-name-semicolon": Bad(toml('[hosts."a;rm -rf /"]', 'kind = "local"'),
                               'hosts."a;rm -rf /"', HOST_NAME, 1),
    "host-name-command-substitution": Bad(toml('[hosts."$(reboot)"]', 'kind = "local"'),
                                          'hosts."$(reboot)"', HOST_NAME, 1),
    "host-name-backticks": Bad(toml('[hosts."`id`"]', 'kind = "local"'), 'hosts."`id`"',
                               HOST_NAME, 1),
    "host-name-space": Bad(toml('[hosts."gpu box"]', 'kind = "local"'), 'hosts."gpu box"',
                           HOST_NAME, 1),
    "host-name-quote": Bad(toml("[hosts.\"it's\"]", 'kind = "local"'), "hosts.\"it's\"",
                           HOST_NAME, 1),
    "host-name-slash": Bad(toml('[hosts."../etc"]', 'kind = "local"'), 'hosts."../etc"',
                           HOST_NAME, 1),
    "host-name-option": Bad(toml('[hosts."-oProxyCommand=sh"]', 'kind = "local"'),
                            'hosts."-oProxyCommand=sh"', HOST_NAME, 1),
    "host-name-too-long": Bad(toml(f"[hosts.{'h' * 64}]", 'kind = "local"'), f"hosts.{'h' * 64}",
                              HOST_NAME, 1),
    "host-kind-not-a-string": Bad(toml("[hosts.box]", "kind = 3"), "hosts.box.kind",
                                  f"unknown host kind (got 3); valid: {KINDS}", 2),
    "host-kind-wrong-case": Bad(toml("[hosts.box]", 'kind = "SSH"'), "hosts.box.kind", KINDS, 2),
    "ssh-address-metacharacter": Bad(toml(*SSH[:2], 'host = "box;reboot"'), "hosts.box.host",
                                     ADDRESS, 3),
    "ssh-address-option": Bad(toml(*SSH[:2], 'host = "-oProxyCommand=sh"'), "hosts.box.host",
                              ADDRESS, 3),
    "ssh-address-empty": Bad(toml(*SSH[:2], 'host = ""'), "hosts.box.host", ADDRESS, 3),
    "user-command-substitution": Bad(toml(*SSH, 'user = "$(id)"'), "hosts.box.user", USER, 4),
    "user-option": Bad(toml(*SSH, 'user = "-oProxyCommand=sh"'), "hosts.box.user", USER, 4),
    # TOML's own types: true is not 1, 22.0 is not a port, inf and nan are not amounts
    "port-bool": Bad(toml(*SSH, "port = true"), "hosts.box.port", "expected an integer", 4),
    "port-float": Bad(toml(*SSH, "port = 22.0"), "hosts.box.port", "expected an integer", 4),
    "connect-timeout-bool": Bad(toml(*SSH, "connect-timeout = true"), "hosts.box.connect-timeout",
                                "expected a number", 4),
    "connect-timeout-inf": Bad(toml(*SSH, "connect-timeout = inf"), "hosts.box.connect-timeout",
                               "finite", 4),
    "max-usd-hr-nan": Bad(toml("[providers.vast]", 'kind = "vastai"', "[hosts.g]",
                               'kind = "provider"', 'provider = "vast"', "max-usd-hr = nan"),
                          "hosts.g.max-usd-hr", "finite", 6),
    "max-nodes-bool": Bad(toml(*SLURM, "[hosts.c.queues.q]", 'max-walltime = "1h"',
                               "mem-ceiling-gb = 1", "max-nodes = true"),
                          "hosts.c.queues.q.max-nodes", "expected an integer", 6),
    "max-gpus-negative": Bad(toml(*SLURM, "[hosts.c.queues.q]", 'max-walltime = "1h"',
                                  "mem-ceiling-gb = 1", "max-gpus = -1"),
                             "hosts.c.queues.q.max-gpus", "an integer >= 0", 6),
    "env-value-not-string": Bad(toml(*SSH, "env = { OMP_NUM_THREADS = 4 }"),
                                "hosts.box.env.OMP_NUM_THREADS", "a quoted string", 4),
    "exclude-entry-not-string": Bad(toml("[workspace]", 'exclude = ["data/", 3]'),
                                    "workspace.exclude.1", "a quoted string", 2),
    "container-without-image": Bad(toml("[containers.x]", 'runtime = "podman"'),
                                   "containers.x.image", "image (required)", 1),
    "hosts-not-a-table": Bad(toml("hosts = 3"), "hosts", "a table", 1),
    "hosts-array-of-tables": Bad(toml("[[hosts]]", 'kind = "local"'), "hosts", "a table", 1),
    "login-unknown": Bad(toml(*SLURM, 'login = "telnet"'), "hosts.c.login", "'local' or 'ssh'", 3),
    "trust-bool": Bad(toml(*SSH, "trust = true"), "hosts.box.trust",
                      "'known-hosts' or 'first-use'", 4),
}


# Issue 14: the product page's example file, verbatim (accepted as written).
ISSUE_EXAMPLE = '''\
[deps]
python = ">=3.11"

[python.deps]
torch = ">=2.9"

[containers.ngc]
image = "nvcr.io/nvidia/pytorch:25.06-py3"   # fixed off-the-shelf image, never rebuilt

[hosts.gold]
kind = "ssh"
root = "/home/pedro/projects"

[hosts.miyabi-g]
kind = "pbs"
container = "ngc"
account = "xg25g007"
modules = { singularity = "4.2.1" }

[hosts.miyabi-g.queues.short-g]
max-walltime = "07:59:59"
mem-ceiling-gb = 100

[hosts.miyabi-g.defaults]
queue = "debug-g"
mem-gb = "min(100, attempt * 50)"
'''


# Issue 27: the product page's files as it now writes them ([deps] python at a version this
# machine lacks; its fleet.toml's `fetch` as one path and as a list).
PAGE_CONFIG = ISSUE_EXAMPLE.replace('python = ">=3.11"', 'python = ">=3.14"')
PAGE_FLEET = """\
[defaults]
walltime = "02:00:00"

[[jobs]]
name = "sweep-a"
target = "miyabi-g"
command = "python train.py --sweep a"
fetch = "results/sweep-a"

[[jobs]]
name = "sweep-b"
target = "gold"
command = "python train.py --sweep b"
fetch = ["results/sweep-b"]
"""
