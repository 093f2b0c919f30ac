"""What every entry point (train, predict, prepare, export) does around its work: a quiet start, the config
checked before anything heavy starts, and a user's mistake shown as one line.

``@hydra_entry("predict")`` replaces ``@hydra.main(...)`` on an entry module's ``main``. Before Hydra runs the job,
the command line is composed once with Hydra's compose API, so an unknown key, an unknown option of a config group
or a missing mandatory value (``???``) is reported as ``error: <message>`` plus an optional ``hint: ...`` line, with
exit status 2, before TensorFlow builds anything. Inside the job, a :class:`tfsent.errors.UserError` (bad file,
row, value, checkpoint) is reported the same way. Anything else is a bug and keeps its traceback;
``HYDRA_FULL_ERROR=1`` shows the traceback for everything.

A tool (predict, export, report, beam, prepare) whose command line sets nothing of Hydra's (no ``hydra.*``
override, no flag, no sweep) runs its job on that composed config directly (:func:`run_composed`): Hydra's run
would compose the same config again and, for a tool, write nothing else. Training always runs through Hydra (its run
directory is Hydra's).
"""

from __future__ import annotations

import functools
import os
import re
import sys
from collections.abc import Callable, Sequence
from typing import Any

import hydra
from omegaconf import DictConfig, OmegaConf
from omegaconf.errors import MissingMandatoryValue

from tfsent.config import conf_dir
from tfsent.errors import UserError
from tfsent.runtime.quiet import quiet_start

EXIT_USER_ERROR = 2
# Hydra flags after which the command line is Hydra's own business (help, printing configs, other config dirs).
_HYDRA_ONLY_FLAGS = ("--help", "-h", "--hydra-help", "--info", "-i", "--cfg", "-c", "--shell-completion", "-sc",
                     "--config-dir", "-cd", "--config-path", "-cp", "--config-name", "-cn", "--experimental-rerun",
                     "--version")


def _full_errors() -> bool:
    return os.environ.get("HYDRA_FULL_ERROR") == "1"


def fail(message: str, hint: str | None = None) -> None:
    """Print ``error: message`` (and ``hint: ...``) to stderr and exit with status 2."""
    print(f"error: {message}", file=sys.stderr)
    if hint:
        print(f"hint: {hint}", file=sys.stderr)
    sys.stderr.flush()
    raise SystemExit(EXIT_USER_ERROR)


def _first_values(args: Sequence[str]) -> list[str]:
    """The overrides of a command line, each sweep (``a=1,2`` under ``-m``) reduced to its first value."""
    from hydra.core.override_parser.overrides_parser import OverridesParser

    overrides = [a for a in args if not a.startswith("-")]
    parsed = OverridesParser.create().parse_overrides(overrides)
    firsts = []
    for text, override in zip(overrides, parsed):
        if override.is_sweep_override():
            text = text.split("=", 1)[0] + "=" + next(iter(override.sweep_string_iterator()))
        firsts.append(text)
    return firsts


_NOT_IN_STRUCT = re.compile(r"^Could not override '([^']+)'\.$")
_NOT_IN_DEFAULTS = re.compile(r"^Could not override '([^']+)'\. No match in the defaults list\.$")


def describe_composition_error(error: Exception, config_name: str = "",
                               overrides: Sequence[str] = ()) -> tuple[str, str | None]:
    """One line (and an optional hint) for an error Hydra raises while composing a config.

    A key the config does not have names the closest real key and lists every key of its node; ``+key=value``
    (Hydra's own hint) is never suggested for it, since tfsent refuses keys it does not know anyway.

    Args:
        error: what Hydra raised.
        config_name: the entry point's top-level config (to list the keys a misspelt one should have been).
        overrides: the command line's overrides.
    """
    lines = [ln.strip() for ln in str(error).splitlines() if ln.strip()]
    message, hint = (lines[0] if lines else type(error).__name__), None
    unknown = _NOT_IN_STRUCT.match(message)
    if unknown and config_name:
        described = _unknown_key(config_name, overrides, unknown.group(1))
        if described is not None:
            return described
    group = _NOT_IN_DEFAULTS.match(message)
    if group:
        name = group.group(1)
        given = next((o for o in overrides if o.split("=", 1)[0] == name), name)
        return f"{name} is not in {config_name or 'the config'}'s defaults", f"add it with +{given}"
    cause = error.__cause__
    if cause is not None and str(cause).strip():
        message += f" ({str(cause).strip().splitlines()[0]})"
    for i, line in enumerate(lines[1:], 1):
        if line.startswith("Available options in"):
            options = [o for o in lines[i + 1:] if not o.startswith(("Config search path", "provider="))]
            hint = f"{line[len('Available options in '):].rstrip(':')} is one of: {', '.join(options)}"
            break
    return message, hint


def _unknown_key(config_name: str, overrides: Sequence[str], dotted: str) -> tuple[str, str | None] | None:
    """``unknown key ... (did you mean ...?)`` and the keys of its node, from the config composed without it
    (None when the rest of the command line does not compose either: Hydra's message is kept then)."""
    from hydra import compose, initialize_config_dir
    from hydra.core.global_hydra import GlobalHydra

    from tfsent.config import unknown_keys

    rest = [o for o in overrides if o.lstrip("+~").split("=", 1)[0] != dotted]
    try:
        with initialize_config_dir(config_dir=str(conf_dir()), version_base="1.3"):
            node = compose(config_name=config_name, overrides=rest)
    except Exception:  # noqa: BLE001  (another mistake on the line: Hydra's own message then)
        return None
    finally:
        GlobalHydra.instance().clear()
    parts = dotted.split(".")
    for depth, part in enumerate(parts):
        if not isinstance(node, DictConfig) or part not in node:
            break
        node = node[part]
    if not isinstance(node, DictConfig):
        return None
    owner = ".".join(parts[:depth]) or config_name
    error = unknown_keys([parts[depth]], [str(k) for k in node.keys()], owner,
                         "".join(f"{p}." for p in parts[:depth]))
    return str(error), error.hint


def check_command_line(config_name: str, args: Sequence[str], *, with_hydra: bool = False) -> DictConfig | None:
    """Compose ``config_name`` with the command line's overrides and fail (exit 2) on a user mistake.

    Args:
        config_name: the entry point's top-level config (``train``, ``predict``, ...).
        args: the command line after the program name.
        with_hydra: keep Hydra's own node (``hydra.job_logging``, ...) in the result.

    Returns:
        The composed config (without Hydra's own node unless ``with_hydra``), or None when Hydra-only flags leave
        the check to Hydra.
    """
    if any(a.split("=")[0] in _HYDRA_ONLY_FLAGS for a in args):
        return None
    from hydra import compose, initialize_config_dir
    from hydra.core.global_hydra import GlobalHydra
    from hydra.errors import HydraException
    from omegaconf.errors import OmegaConfBaseException

    try:
        with initialize_config_dir(config_dir=str(conf_dir()), version_base="1.3"):
            cfg = compose(config_name=config_name, overrides=_first_values(args), return_hydra_config=with_hydra)
    except (HydraException, OmegaConfBaseException) as e:
        fail(*describe_composition_error(e, config_name, _first_values(args)))
    finally:
        GlobalHydra.instance().clear()
    # Hydra's own node has values filled in only by its run (hydra.job.num): the job's keys are checked.
    missing = sorted(OmegaConf.missing_keys(OmegaConf.masked_copy(cfg, [k for k in cfg if k != "hydra"])))
    if missing:
        fail(f"{', '.join(missing)} {'is' if len(missing) == 1 else 'are'} required",
             "set " + " ".join(f"{key}=..." for key in missing) + " on the command line")
    return cfg


def composed_is_the_run(args: Sequence[str]) -> bool:
    """Whether the config :func:`check_command_line` composed is all Hydra's run would add for a tool: no flags
    (``-m``, ``--cfg``, ...), no sweep and nothing set under ``hydra`` (a run directory, its files, its logging).
    Then the job runs on it at once, without Hydra composing it a second time (about 0.2 s of every start)."""
    overrides = [a for a in args if not a.startswith("-")]
    if len(overrides) != len(args):
        return False
    if any(a.lstrip("+~").split("=", 1)[0].split("/")[0].split(".")[0] == "hydra" for a in overrides):
        return False
    return _first_values(overrides) == overrides


def run_composed(job: Callable[[DictConfig], Any], cfg: DictConfig) -> Any:
    """Run ``job`` on a config composed with Hydra's node as Hydra's run would: its ``job_logging`` configured
    (the tools' console format), the ``hydra`` node removed, the struct flag kept."""
    import logging.config

    from omegaconf import open_dict

    logging.config.dictConfig(OmegaConf.to_container(cfg.hydra.job_logging, resolve=True))
    with open_dict(cfg):
        del cfg["hydra"]
    return job(cfg)


def check_run_dir(args: Sequence[str]) -> None:
    """Fail (exit 2) when the command line's ``hydra.run.dir`` cannot be created: Hydra makes it before the job
    starts and would stop with a traceback."""
    from tfsent.runtime.paths import PathError, check_writable

    for arg in args:
        if arg.startswith("hydra.run.dir="):
            try:
                check_writable(arg.split("=", 1)[1], "hydra.run.dir", derived=False)
            except PathError as e:
                fail(str(e))


def help_text(config_name: str, added_groups: Sequence[str] = ()) -> str:
    """``--help``: the config groups this entry point takes (its defaults list, plus ``added_groups`` taken with
    ``+``) with their options, then its keys and defaults. Hydra's own help lists every group of ``conf/``,
    training's among them, whatever the entry point.

    Args:
        config_name: the entry point's top-level config.
        added_groups: groups outside the defaults that the entry point takes (``+experiment=...``).
    """
    from hydra import compose, initialize_config_dir
    from hydra.core.global_hydra import GlobalHydra

    try:
        with initialize_config_dir(config_dir=str(conf_dir()), version_base="1.3"):
            cfg = compose(config_name=config_name, return_hydra_config=True)
    finally:
        GlobalHydra.instance().clear()
    groups = [g for g in cfg.hydra.runtime.choices if not str(g).startswith("hydra/")]
    lines = [f"python -m tfsent.{'beam' if config_name == 'beam' else config_name} key=value ... "
             f"(conf/{config_name}.yaml)", ""]
    if groups or added_groups:
        lines.append("Config groups (group=option):")
        for group in [*sorted(groups), *added_groups]:
            options = sorted(p.stem for p in (conf_dir() / group).glob("*.yaml"))
            lines.append(f"  {'+' if group in added_groups else ''}{group}: {', '.join(options)}")
        lines.append("")
    keys = OmegaConf.masked_copy(cfg, [k for k in cfg if k != "hydra"])
    lines += ["Keys and their defaults (key=value; ??? is required):", OmegaConf.to_yaml(keys).rstrip()]
    return "\n".join(lines)


def hydra_files_on_request(args: Sequence[str]) -> list[str]:
    """The overrides that bring Hydra's files back where a command line names ``hydra.run.dir``.

    The tools (predict, export, report, beam, prepare) write nothing of Hydra's by default (``conf/hydra/job_logging/
    console.yaml``, no ``.hydra/``): each run would otherwise leave ``outputs/<tool>/<time>/`` in the working folder.
    Asked for with ``hydra.run.dir=DIR``, the log and the composed config go there, as training's always do.
    """
    if not any(a.startswith("hydra.run.dir=") for a in args):
        return []
    extra = []
    if not any(a.startswith("hydra.output_subdir=") for a in args):
        extra.append("hydra.output_subdir=.hydra")
    if not any(a.startswith("hydra/job_logging=") for a in args):
        extra.append("hydra/job_logging=default")
    return extra


def hydra_entry(config_name: str, *, added_groups: Sequence[str] = (), run_dir: bool = False
                ) -> Callable[[Callable[[DictConfig], Any]], Callable[[], Any]]:
    """Decorate an entry module's job ``fn(cfg)``; the result is its ``main()`` (see the module docstring).

    Args:
        config_name: the top-level config in ``conf/`` (``train``, ``predict``, ``prepare``, ``export``).
        added_groups: config groups outside the defaults that it takes with ``+`` (training's ``experiment``),
            for ``--help``.
        run_dir: Hydra's run directory is the job's own output (training's run), so Hydra's files always go
            there; otherwise only when ``hydra.run.dir`` is given (:func:`hydra_files_on_request`).
    """
    def decorate(job: Callable[[DictConfig], Any]) -> Callable[[], Any]:
        def reported(cfg: DictConfig) -> Any:
            try:
                return job(cfg)
            except (UserError, MissingMandatoryValue) as e:
                if _full_errors():
                    raise
                fail(str(e), getattr(e, "hint", None))

        hydra_main = hydra.main(version_base="1.3", config_path=str(conf_dir()), config_name=config_name)(reported)

        @functools.wraps(job)
        def main() -> Any:
            if any(a in ("--help", "-h") for a in sys.argv[1:]):
                print(help_text(config_name, added_groups))
                return None
            # Hydra names the job (and its log file) after the file that calls hydra.main, which is this one:
            # name it after the entry point instead (train.log, predict.log, ...).
            direct = not run_dir and not _full_errors() and composed_is_the_run(sys.argv[1:])
            if not any(a.startswith("hydra.job.name=") for a in sys.argv[1:]):
                sys.argv.append(f"hydra.job.name={config_name}")
            if not run_dir:
                sys.argv.extend(hydra_files_on_request(sys.argv[1:]))
            cfg = None if _full_errors() else check_command_line(config_name, sys.argv[1:], with_hydra=direct)
            check_run_dir(sys.argv[1:])
            quiet_start(verbose=bool(cfg.get("verbose", False)) if cfg is not None else False)
            if direct and cfg is not None:
                # None, as hydra.main returns: a console script exits with main()'s value (sys.exit(Manifest) = 1).
                run_composed(reported, cfg)
                return None
            return hydra_main()

        return main

    return decorate
