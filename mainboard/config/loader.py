"""The staged loader behind ``mainboard.config.load_config`` (import from mainboard.config).

Stages, so every error can name the file, the key path, the line, the bad value and what
is valid: tomllib parse -> ``{{ ... }}`` interpolation -> host kinds and
``[hosts.defaults]`` inheritance -> key check (``-``/``_`` folded, unknown keys listed with
their defaults) -> pydantic validation (the first error becomes one ConfigError).
"""

from __future__ import annotations

import copy
import difflib
import re
import tomllib
from pathlib import Path
from typing import Any, get_args, get_origin

from pydantic import BaseModel, ValidationError

from mainboard.config.hostkinds import HOST_KINDS, HOST_MODELS
from mainboard.config.interpolate import has_placeholder, interpolate
from mainboard.config.models import Config
from mainboard.config.pins import ECOSYSTEM_FIX, OTHER_ECOSYSTEMS
from mainboard.config.sourcemap import KeyPath, SourceMap
from mainboard.config.syntax import display_key as _display
from mainboard.config.syntax import toml_syntax_error
from mainboard.errors import ConfigError, ExpressionError
from mainboard.redact import reads_secret

CONNECTION_KEYS = frozenset({"user", "port", "identity", "trust", "known_hosts",
                             "connect_timeout", "python"})
NOT_INHERITED = frozenset({"kind", "host"})
ENV_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
# Host names become paths, node and queue names and job-script text: no shell or ssh-option
# characters, no leading dash or dot, nothing to quote.
HOST_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,62}")
HOST_NAME_FORM = ("1-63 letters, digits, '.', '_' or '-', starting with a letter or digit, "
                  "e.g. gpu-box")
_NOT_IN_TOML = frozenset({"path", "root"})  # Config fields set by the loader, not the file
_EXPECTED = {"int": "an integer", "float": "a number", "string": "a quoted string",
             "bool": "true or false", "list": "an array [...]", "dict": "a table",
             "model": "a table", "model_attributes": "a table"}
_MISSING = object()


def describe_keys(model: type[BaseModel], skip: frozenset[str] = frozenset({"kind"})) -> str:
    """``host (required), user (default: None), port (default: 22), ...`` for error hints."""
    parts: list[str] = []
    fields = sorted(model.model_fields.items(), key=lambda item: not item[1].is_required())
    for name, field in fields:
        if name in skip or (model is Config and name in _NOT_IN_TOML):
            continue
        key = name.replace("_", "-")
        if field.is_required():
            parts.append(f"{key} (required)")
            continue
        default = field.get_default(call_default_factory=True)
        shown = "table" if isinstance(default, BaseModel) else repr(default)
        parts.append(f"{key} (default: {shown})")
    return ", ".join(parts)


def _field_names(model: type[BaseModel]) -> dict[str, str]:
    """Accepted spellings (``a-b`` and ``a_b``) of each TOML key -> field name."""
    names: dict[str, str] = {}
    for name in model.model_fields:
        if model is not Config or name not in _NOT_IN_TOML:
            names[name] = name
            names[name.replace("_", "-")] = name
    return names


def _submodel(model: type[BaseModel], field: str) -> tuple[str, type[BaseModel]] | None:
    """("one", M) if the field is a table of model M, ("many", M) if a table of M tables."""
    annotation = model.model_fields[field].annotation
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return "one", annotation
    if get_origin(annotation) is dict:
        value = get_args(annotation)[1]
        if isinstance(value, type) and issubclass(value, BaseModel):
            return "many", value
    return None


class Loader:
    """One load of one file: keeps the text's source map and where inherited keys came from."""

    def __init__(self, text: str, path: Path | None) -> None:
        self.text, self.path = text, path
        self.file = str(path) if path else "<config>"
        self.sources = SourceMap(text)
        self.raw: dict[str, Any] = {}
        self.inherited: dict[KeyPath, KeyPath] = {}  # host key path -> hosts.defaults key path
        self.templates: dict[KeyPath, str] = {}  # key path -> the {{ ... }} text as written

    def load(self) -> Config:
        """Run every stage; the first problem found is raised as one ConfigError."""
        try:
            self.raw = tomllib.loads(self.text)
        except tomllib.TOMLDecodeError as exc:
            raise toml_syntax_error(exc, self.text, self.file, self.sources) from None
        self.raw = self._interpolate(self.raw, ())
        data = self._normalize(Config, self.raw, ())
        if self.path is not None:
            data["path"], data["root"] = self.path, self.path.parent
        try:
            return Config.model_validate(data)
        except ValidationError as exc:
            raise self._convert(exc.errors()[0]) from None

    def error(self, loc: KeyPath, message: str, value: Any = _MISSING, valid: str | None = None,
              cls: type[ConfigError] = ConfigError) -> ConfigError:
        """A ConfigError at raw key path ``loc``, redirected to [hosts.defaults] if inherited."""
        suffix = ""
        for n in range(len(loc), 0, -1):
            origin = self.inherited.get(loc[:n])
            if origin is not None:
                suffix = f" (inherited by hosts.{_display(loc[1:2])})"
                loc = origin + loc[n:]
                break
        loc = self._respell(loc)
        shown = None if value is _MISSING else value
        template = self.templates.get(loc)
        if template is not None and shown is not None and shown != template:
            suffix += f" (expanded from {template})"  # what the user wrote, then what it gave
            shown = "***" if reads_secret(template) else shown
        return cls(message + suffix, file=self.file, key=_display(loc) or None,
                   line=self.sources.line(loc), value=shown, valid=valid)

    def _interpolate(self, value: Any, loc: KeyPath) -> Any:
        """Expand ``{{ ... }}`` in every string, naming the key on failure."""
        if isinstance(value, dict):
            return {k: self._interpolate(v, loc + (k,)) for k, v in value.items()}
        if isinstance(value, list):
            return [self._interpolate(v, loc + (i,)) for i, v in enumerate(value)]
        if isinstance(value, str) and has_placeholder(value):
            try:
                expanded = interpolate(value)
            except ConfigError as exc:
                raise self.error(loc, exc.detail, value, exc.valid, type(exc)) from None
            self.templates[loc] = value
            return expanded
        return value

    def _normalize(self, model: type[BaseModel], data: Any, loc: KeyPath) -> Any:
        """Fold ``-``/``_`` to field names and refuse unknown keys, recursing into sub-tables."""
        if not isinstance(data, dict):
            return data  # pydantic reports the wrong type with its location
        names = _field_names(model)
        out: dict[str, Any] = {}
        for key, value in data.items():
            field = names.get(key)
            if field is None and model is Config and key in OTHER_ECOSYSTEMS:
                raise self.error(loc + (key,), f"[{key}] environments are not supported: "
                                 "environments are built by the uv backend only", _MISSING,
                                 ECOSYSTEM_FIX)
            if field is None:
                raise self._unknown(model, key, value, loc)
            if field in out:
                raise self.error(loc + (key,), f"key {key} is given twice (as - and _ spelling)",
                                 value, "write it once")
            out[field] = self._normalize_field(model, field, value, loc + (key,))
        return out

    def _normalize_field(self, model: type[BaseModel], field: str, value: Any,
                         loc: KeyPath) -> Any:
        if model is Config and field == "hosts":
            return self._hosts(value, loc)
        sub = _submodel(model, field)
        if sub is None:
            return value
        if sub[0] == "one":
            return self._normalize(sub[1], value, loc)
        if not isinstance(value, dict):
            return value
        return {k: self._normalize(sub[1], v, loc + (k,)) for k, v in value.items()}

    def _unknown(self, model: type[BaseModel], key: str, value: Any, loc: KeyPath) -> ConfigError:
        names = sorted({n.replace("_", "-") for n in _field_names(model)})
        wanted = key.replace("_", "-")
        close = [n for n in names if sorted(n) == sorted(wanted)]  # transposed letters
        close = close or difflib.get_close_matches(wanted, names, n=1)
        hint = f" (did you mean {close[0]}?)" if close else ""
        where = _display(loc) or "the top level of the file"
        kind = getattr(model.model_fields.get("kind"), "default", None)
        if isinstance(kind, str) and model is not Config:
            where += f" (kind {kind})"
        shown = value if not isinstance(value, dict) else _MISSING
        return self.error(loc + (key,), f"unknown key {key!r} in {where}{hint}", shown,
                          describe_keys(model))

    def _hosts(self, hosts: Any, loc: KeyPath) -> Any:
        """Check kinds, apply [hosts.defaults] inheritance, then normalize each host."""
        if not isinstance(hosts, dict):
            return hosts
        defaults = hosts.get("defaults", {})
        if not isinstance(defaults, dict):
            raise self.error(loc + ("defaults",), "hosts.defaults must be a table", defaults,
                             "[hosts.defaults] with keys every host inherits")
        folded = self._host_defaults(defaults, loc + ("defaults",))
        out: dict[str, Any] = {}
        for name, table in hosts.items():
            if name == "defaults":
                continue
            here = loc + (name,)
            if not HOST_NAME.fullmatch(name):
                raise self.error(here, "not a valid host name", name, HOST_NAME_FORM)
            if not isinstance(table, dict):
                raise self.error(here, "a host must be a table", table,
                                 f'[hosts.{_display((name,))}] with kind = "ssh" (or '
                                 f'{", ".join(HOST_KINDS)})')
            kind = table.get("kind", _MISSING)
            if kind is _MISSING:
                raise self.error(here, "missing required key kind", valid=", ".join(HOST_KINDS))
            if kind not in HOST_KINDS:
                raise self.error(here + ("kind",), "unknown host kind", kind,
                                 ", ".join(HOST_KINDS))
            model = HOST_MODELS[kind]
            host = self._normalize(model, table, here)
            self._inherit(host, folded, model, here)
            self._check_env_names(host.get("env"), here + ("env",))
            out[name] = host
        return out

    def _check_env_names(self, env: Any, loc: KeyPath) -> None:
        """Names end up in shell text on the host: refuse bad ones now, with the key path."""
        for name in env if isinstance(env, dict) else ():
            if not ENV_NAME.fullmatch(name):
                raise self.error(loc + (name,), "not a valid environment variable name", name,
                                 "letters, digits and _, not starting with a digit, "
                                 "e.g. OMP_NUM_THREADS")

    def _host_defaults(self, table: dict[str, Any], loc: KeyPath) -> dict[str, tuple[Any, str]]:
        """Normalize [hosts.defaults]: field -> (value, key as written)."""
        models = list(HOST_MODELS.values())
        folded: dict[str, tuple[Any, str]] = {}
        for key, value in table.items():
            owners = [m for m in models if key in _field_names(m)]
            if not owners:
                every = sorted({n.replace("_", "-") for m in models for n in m.model_fields}
                               - NOT_INHERITED)
                raise self.error(loc + (key,), f"unknown key {key!r} in hosts.defaults", value,
                                 ", ".join(every))
            field = _field_names(owners[0])[key]
            if field in folded:
                raise self.error(loc + (key,), f"key {key} is given twice (as - and _ spelling)",
                                 value, "write it once")
            if field in NOT_INHERITED:
                raise self.error(loc + (key,), f"{key} cannot be inherited from hosts.defaults",
                                 value, f"set {key} in each [hosts.NAME] table")
            folded[field] = (self._normalize_field(owners[0], field, value, loc + (key,)), key)
        return folded

    def _inherit(self, host: dict[str, Any], folded: dict[str, tuple[Any, str]],
                 model: type[BaseModel], loc: KeyPath) -> None:
        """Copy defaults the host lacks (merging tables); refuse keys its kind cannot take."""
        fields = model.model_fields
        for field, (value, written) in folded.items():
            origin = loc[:1] + ("defaults", written)
            if field not in fields:
                if field in CONNECTION_KEYS:
                    continue  # e.g. `user` means nothing for a local or provider host
                kind = host["kind"]
                raise self.error(
                    origin, f"hosts.defaults.{written} is not valid for "
                    f"hosts.{_display(loc[1:])} (kind {kind})", value,
                    f"keys for kind {kind}: {describe_keys(model)}; move {written} into the "
                    "[hosts.NAME] tables that use it")
            self._merge(host, field, value, loc + (field,), origin)

    def _merge(self, target: dict[str, Any], key: str, value: Any, loc: KeyPath,
               origin: KeyPath) -> None:
        if key not in target:
            target[key] = copy.deepcopy(value)
            self.inherited[loc] = origin
        elif isinstance(target[key], dict) and isinstance(value, dict):
            for sub, sub_value in value.items():
                self._merge(target[key], sub, sub_value, loc + (sub,), origin + (sub,))

    def _convert(self, err: dict[str, Any]) -> ConfigError:
        """The first pydantic error as one ConfigError with path, line, value and fix."""
        ctx = err.get("ctx") or {}
        loc = tuple(err["loc"])
        if len(loc) >= 3 and loc[0] == "hosts" and loc[2] in HOST_KINDS:
            loc = loc[:2] + loc[3:]  # drop the discriminated-union tag
        loc = self._raw_loc(loc + tuple(ctx.get("loc", ())))
        kind, value = err["type"], err.get("input", _MISSING)
        if "value" in ctx:
            value = _MISSING if ctx["value"] is None else ctx["value"]
        if kind == "mainboard":
            cls = ExpressionError if ctx.get("expression") else ConfigError
            return self.error(loc, ctx["detail"], value, ctx.get("valid"), cls)
        if kind == "missing":
            model = self._model_at(loc[:-1])
            valid = describe_keys(model) if model else None
            kind = self._kind_at(loc) if len(loc) == 3 else None  # a key of the host table
            where = f" for kind {kind}" if kind else ""
            return self.error(loc, f"missing required key {loc[-1]}{where}", valid=valid)
        if kind == "literal_error":
            return self.error(loc, "not one of the allowed values", value, ctx.get("expected"))
        hint = self._field_hint(loc)
        base = kind.split("_")[0] if not kind.startswith("model") else "model"
        if kind.endswith(("_type", "_parsing", "_from_float")) and base in _EXPECTED:
            return self.error(loc, f"wrong type: expected {_EXPECTED[base]}", value,
                              hint or _EXPECTED[base])
        if kind in ("string_pattern_mismatch", "string_too_short"):
            return self.error(loc, "not of the valid form", value, hint)
        message = err["msg"][0].lower() + err["msg"][1:]
        return self.error(loc, message.replace("input should be", "must be"), value,
                          hint or message.replace("input should be", "a value"))

    def _field_hint(self, loc: KeyPath) -> str | None:
        """The field's description (e.g. "an integer from 1 to 65535"), used as the fix."""
        model = self._model_at(loc[:-1]) if loc else None
        field = _field_names(model).get(str(loc[-1])) if model else None
        return model.model_fields[field].description if model and field else None

    def _raw_loc(self, loc: KeyPath) -> KeyPath:
        """Map a pydantic location (field names) back to the keys as written."""
        for n in range(len(loc), 0, -1):
            if loc[:n] in self.inherited:
                return loc  # error() redirects it to the [hosts.defaults] spelling
        return self._respell(loc)

    def _respell(self, loc: KeyPath) -> KeyPath:
        """Walk the raw TOML data, preferring each key as the user spelled it (- or _)."""
        out: list[str | int] = []
        node: Any = self.raw
        for part in loc:
            if isinstance(node, dict):
                spelled = [s for s in (part, str(part).replace("_", "-")) if s in node]
                out.append(spelled[0] if spelled else str(part).replace("_", "-"))
                node = node.get(spelled[0]) if spelled else None
            elif isinstance(node, list) and isinstance(part, int):
                out.append(part)
                node = node[part] if part < len(node) else None
            # else: a leaf value, or past the last key written (pydantic names a missing key
            # last, and the loader validates no key the file lacks); remaining parts are
            # pydantic union tags
        return tuple(out)

    def _model_at(self, loc: KeyPath) -> type[BaseModel] | None:
        """The model class that validates the table at raw path ``loc``."""
        model: type[BaseModel] = Config
        index = 0
        while index < len(loc):
            field = _field_names(model)[str(loc[index])]  # a raw path's keys were all checked
            if model is Config and field == "hosts" and index + 1 < len(loc):
                model = HOST_MODELS[self._host_kind(loc[index + 1])]
                index += 2
                continue
            sub = _submodel(model, field)
            if sub is None:  # a leaf, a table of values, or [hosts] itself
                return None
            model = sub[1]
            index += 1 if sub[0] == "one" else 2
        return model

    def _kind_at(self, loc: KeyPath) -> str | None:
        """The kind of the host a key path points into, if it points into one (``_hosts``
        checked every host's table and kind before anything is validated)."""
        return self._host_kind(loc[1]) if len(loc) >= 2 and loc[0] == "hosts" else None

    def _host_kind(self, name: str | int) -> str:
        """Host ``name``'s kind as written (``_hosts`` checked it is one)."""
        return str(self.raw["hosts"][name]["kind"])
