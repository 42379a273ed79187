"""The table of bad mainboard.toml inputs for tests/test_config.py: each with the key path,
the line and the fix its one-line error must name."""

from __future__ import annotations

from dataclasses import dataclass

from mainboard.errors import ConfigError, ExpressionError

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
    "bad-env-name": Bad(toml(*SSH, 'env = { "OMP THREADS" = "1" }'),
                        'hosts.box.env."OMP THREADS"', "not starting with a digit", 4),
    "inherited-bad-env-name": Bad(toml("[hosts.defaults]", 'env = { 1X = "1" }', *SSH),
                                  "hosts.defaults.env.1X", "(inherited by hosts.box)", 2),
    "empty-host-name": Bad(toml('[hosts.""]', 'kind = "local"'), 'hosts.""',
                           "a host name cannot be empty", 1),
    "interpolated-bad-value": Bad(toml(*SSH, "port = \"{{ env('MB_TEST_PORT', 'ssh') }}\""),
                                  "hosts.box.port", "(expanded from {{ env('MB_TEST_PORT', "
                                  "'ssh') }}) (got 'ssh'); valid: an integer from 1", 4),
    "inline-table": Bad(toml("[hosts]", 'box = { kind = "ssh", host = "h", port = "x" }'),
                        "hosts.box.port", "an integer", 2),
    "dotted-keys": Bad(toml("[hosts]", 'box.kind = "ssh"', 'box.host = "h"', 'box.port = "x"'),
                       "hosts.box.port", "an integer", 4),
}
