"""Version pins and requirement tables of mainboard.toml: ``[deps]``, ``[python.deps]``, ``modules``.

``[deps]`` maps a tool to what it needs: a PEP 440 version specifier (``python = ">=3.11"``,
``singularity = ">=4"``) is a *pin*, checked on every host before a job is submitted and
shown by ``mainboard compute``; any other text (``redis-server = "apt:redis-server"``) is a
note on where the tool comes from and is not checked. ``[python.deps]`` is an array of
requirement strings or a table ``name = "version spec"``; both become the same sorted
requirement list. ``modules`` is an array or a table ``name = "version"``
(``module load name/version``). Pure: parsing and comparison only, no host is asked here.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

from packaging.specifiers import InvalidSpecifier, SpecifierSet
from packaging.version import InvalidVersion, Version

from mainboard.config.base import custom_error

TOOL_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._+-]{0,63}")
TOOL_FORM = "letters, digits, '.', '_', '+' or '-', starting with a letter or digit"
SPEC_FORM = ('a version specifier such as ">=3.11", "==4.2.*", ">=2.9,<3" ("*" or "" for '
             'any version), or a source note such as "apt:redis-server"')
REQ_FORM = 'name = "version spec", e.g. torch = ">=2.9", six = "1.16.0", numpy = "*"'
# Tables another environment backend would read; refused by name until one ships.
OTHER_ECOSYSTEMS = ("conda", "pixi", "mamba")
ECOSYSTEM_FIX = ("[python.deps] (pip requirements) on [deps] python; a conda/pixi backend "
                 "would implement EnvBackend (docs/architecture.md)")
_VERSION_IN_TEXT = re.compile(r"(?<![\w.])v?(\d+(?:\.\d+)+)")
_BARE_VERSION = re.compile(r"\d+(?:\.\d+)*(?:\.\*)?")
_SPEC_START = re.compile(r"\s*(?:[<>=!~]|\d)")


def is_pin(text: str) -> bool:
    """A value of [deps] that reads as a version specifier (not a source note)."""
    return bool(_SPEC_START.match(text)) or text.strip() in ("", "*")


def specifier(text: str) -> SpecifierSet:
    """The specifier a pin means: a bare version ``2.9`` is ``==2.9``, ``*`` any version."""
    stripped = text.strip()
    if stripped in ("", "*"):
        return SpecifierSet()
    if _BARE_VERSION.fullmatch(stripped):
        stripped = "==" + stripped
    return SpecifierSet(stripped)


def check_deps_table(value: Any) -> Any:
    """[deps]: tool names that fit in a shell word; pins that parse (errors name the key)."""
    if not isinstance(value, dict):
        return value  # pydantic reports the wrong type
    for name, spec in value.items():
        if not TOOL_NAME.fullmatch(name):
            raise custom_error("not a valid tool name", TOOL_FORM, (name,), value=name)
        if not isinstance(spec, str):
            raise custom_error("wrong type: expected a quoted string", SPEC_FORM, (name,),
                               value=spec)
        if name == "python" and not is_pin(spec):
            raise custom_error("the python pin must be a version specifier", SPEC_FORM,
                               (name,), value=spec)
        if is_pin(spec):
            _parse(spec, (name,))
    return value


def _parse(spec: str, loc: tuple[str | int, ...], valid: str = SPEC_FORM) -> SpecifierSet:
    try:
        return specifier(spec)
    except InvalidSpecifier:
        raise custom_error("not a valid version specifier", valid, loc, value=spec) from None


def requirement_list(value: Any) -> Any:
    """[python.deps] as a table ``name = "spec"`` becomes ``["name spec", ...]``; arrays stay."""
    if not isinstance(value, dict):
        return value
    out: list[str] = []
    for name, spec in value.items():
        if not isinstance(spec, str):
            raise custom_error("wrong type: expected a quoted version specifier", REQ_FORM,
                               (name,), value=spec)
        parsed = _parse(spec, (name,), REQ_FORM)
        out.append(f"{name}{parsed}" if str(parsed) else name)
    return out


def module_list(value: Any) -> Any:
    """``modules``: an array of module names, or a table ``name = "version"`` -> name/version.

    Each becomes one ``module load WORD`` (quoted): no line breaks, no leading ``-``.
    """
    if isinstance(value, dict):
        items: list[tuple[tuple[str | int, ...], Any]] = []
        for name, version in value.items():
            if not isinstance(version, str):
                raise custom_error("wrong type: expected a quoted version", 'e.g. "4.2.1" '
                                   '(or "" for the default version)', (name,), value=version)
            items.append(((name,), f"{name}/{version}" if version else name))
    elif isinstance(value, list):
        items = [((index,), item) for index, item in enumerate(value)]
    else:
        return value
    for loc, item in items:
        if isinstance(item, str) and (not item.strip() or item.startswith("-")
                                      or any(c in item for c in "\n\r\0")):
            raise custom_error("not a module name", 'one line such as "cuda/12.4", not '
                               'starting with "-"', loc, value=item)
    return [item for _, item in items]


def pins(deps: Mapping[str, str]) -> dict[str, SpecifierSet]:
    """The checked entries of a loaded [deps] table (source notes left out)."""
    return {name: specifier(spec) for name, spec in deps.items() if is_pin(spec)}


def checked_pins(deps: Mapping[str, str]) -> dict[str, SpecifierSet]:
    """The pins a host must already satisfy: every one but python, which is provisioned
    (a uv-managed interpreter per host, ``bridges.provision``), not checked."""
    return {name: spec for name, spec in pins(deps).items() if name != "python"}


def version_in(text: str) -> str | None:
    """The first dotted version number in a ``--version`` answer (``Python 3.11.7`` -> 3.11.7)."""
    found = _VERSION_IN_TEXT.search(text or "")
    return found.group(1) if found else None


def unmet(name: str, spec: SpecifierSet, version: str | None) -> str | None:
    """Why ``version`` of ``name`` does not satisfy the pin, or None when it does."""
    if version is None:
        return f"{name} not found (pinned {name} {spec or '*'} in [deps])"
    try:
        ok = spec.contains(Version(version), prereleases=True)
    except InvalidVersion:
        return f"{name} version {version!r} cannot be compared with [deps] {name} = \"{spec}\""
    return None if ok else f"{name} {version} does not satisfy [deps] {name} = \"{spec}\""
