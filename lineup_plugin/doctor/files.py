"""The checks of the data directory: its secret files' modes, and the key push signs with."""

from __future__ import annotations

import json
import os
import shlex
import stat
from pathlib import Path
from typing import TYPE_CHECKING

from .context import WHERE, Context, needs_settings
from .findings import Finding, failed, passed, skipped

if TYPE_CHECKING:
    from ..config.settings import Settings

#: files in the data directory that hold secrets (mode 0600); a feature that keeps a secret there adds its name
SECRET_FILES: list[str] = ["token", "pairing.json", "forward.token", "vapid.pem", "push.json"]
#: the key files push signs with (VAPID, a PEM private key), made when the first App subscribes
PUSH_KEY_FILES: list[str] = ["vapid.pem"]
#: the push subscriptions the Apps gave, ``{"subscriptions": [...]}``
PUSH_SUBSCRIPTIONS_FILE = "push.json"


@needs_settings("files")
def check_files(ctx: Context, settings: Settings) -> Finding:
    """The data directory is 0700 and its secret files 0600, all this user's."""
    data_dir = settings.data_dir
    if not data_dir.exists():
        return passed("files", f"{data_dir} does not exist yet (LineUp makes it 0700 at its first start)")
    if not data_dir.is_dir():
        fix = f"set data_dir to a directory in {WHERE.format('DATA_DIR')}"
        return failed("files", f"{data_dir} is not a directory", fix)
    problems: list[str] = []
    chmods: dict[str, list[str]] = {"700": [], "600": []}
    uid = os.getuid() if hasattr(os, "getuid") else None
    paths = [(data_dir, 0o700)] + [(data_dir / name, 0o600) for name in SECRET_FILES]
    if settings.store == "sqlite":  # the calls and the conversation, and SQLite's files beside them
        database = settings.database
        paths += [(database.with_name(database.name + suffix), 0o600) for suffix in ("", "-wal", "-shm")]
    for path, wanted in paths:
        try:
            info = path.stat()
        except FileNotFoundError:
            continue
        except OSError as exc:
            problems.append(f"{path} cannot be read: {exc.strerror or exc}")
            continue
        mode = stat.S_IMODE(info.st_mode)
        if uid is not None and info.st_uid != uid:
            problems.append(f"{path} belongs to uid {info.st_uid}, not this user ({uid})")
        elif mode & 0o077:
            problems.append(f"{path} is mode {mode:04o}: other users can {'list' if wanted == 0o700 else 'read'} it")
            chmods[f"{wanted:o}"].append(shlex.quote(os.fspath(path)))
    if not problems:
        return passed("files", f"{data_dir} is 0700 and its secret files 0600")
    fixes = [f"chmod {mode} {' '.join(paths)}" for mode, paths in chmods.items() if paths]
    fix = " && ".join(fixes) if fixes else f"chown -R $(id -un) {shlex.quote(os.fspath(data_dir))}"
    return failed("files", "; ".join(problems), fix)


@needs_settings("push")
def check_push(ctx: Context, settings: Settings) -> Finding:
    """With push on, the key the Apps subscribed with is present and sound."""
    if "push" not in type(settings).model_fields:
        return skipped("push", "this LineUp has no push setting (Web Push is not part of it yet)")
    push = getattr(settings, "push", None)
    if not (push if isinstance(push, bool) else getattr(push, "enabled", push)):
        return skipped("push", "push is off")
    subscribed = _subscriptions(settings.data_dir / PUSH_SUBSCRIPTIONS_FILE)
    apps = f"{subscribed} App subscription{'s' if subscribed != 1 else ''}"
    resubscribe = "turn notifications off and on again in each App: it subscribes again with the new key"
    for name in PUSH_KEY_FILES:
        path = settings.data_dir / name
        if not path.is_file():
            if subscribed:
                return failed("push", f"{apps} but no {path}: every push to them is refused", resubscribe)
            advice = _contact_advice(settings)
            return passed("push", f"push is on; no App has subscribed yet (the key is made when one does){advice}")
        problem = _not_a_signing_key(path)
        if problem:
            return failed("push", f"{path} is not a usable key: {problem}", f"remove {path}, then {resubscribe}")
    return passed("push", f"push is on, its key is present, {apps}{_contact_advice(settings)}")


def _contact_advice(settings: Settings) -> str:
    """What to say of ``push_contact`` when it is left at the default, which reaches nobody ("" otherwise)."""
    from ..config.settings import DEFAULT_PUSH_CONTACT

    if settings.push_contact != DEFAULT_PUSH_CONTACT:
        return ""
    return f"; push_contact is the default {DEFAULT_PUSH_CONTACT}, which reaches nobody: set your own address"


def _subscriptions(path: Path) -> int:
    """How many push subscriptions ``path`` holds (0 when there is no such file or it is not readable)."""
    try:
        entries = json.loads(path.read_text(encoding="utf-8")).get("subscriptions")
    except (OSError, ValueError, AttributeError):
        return 0
    return len(entries) if isinstance(entries, list) else 0


def _not_a_signing_key(path: Path) -> str:
    """Why ``path`` is not a P-256 private key in PEM ("" when it is one)."""
    from cryptography.hazmat.primitives import serialization
    from cryptography.hazmat.primitives.asymmetric import ec

    try:
        key = serialization.load_pem_private_key(path.read_bytes(), password=None)
    except (OSError, ValueError, TypeError) as exc:
        return str(exc) or type(exc).__name__
    if not isinstance(key, ec.EllipticCurvePrivateKey) or key.curve.name != "secp256r1":
        return "not a P-256 (secp256r1) private key"
    return ""
