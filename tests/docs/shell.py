"""The small part of the shell the manual's command blocks use, read into argument lists.

Lines joined at a trailing backslash; `#` comments; `&&` between commands; `NAME=value` alone
sets a variable, before a command it sets the command's environment; `$NAME` and `${NAME}`
expand, as in bash, to the block's variable, else the environment's, else nothing. Anything
else (pipes, redirections, subshells) is not the manual's style and fails.
"""

from __future__ import annotations

import os
import re
import shlex
from dataclasses import dataclass, field

_ASSIGNMENT = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*=")
_VARIABLE = re.compile(r"\$(?:\{(\w+)\}|(\w+))")
_UNSUPPORTED = ("|", ">", "<", ";", "(", ")", "`")


@dataclass(frozen=True)
class Command:
    """One command line: its environment assignments and its words."""

    env: dict[str, str] = field(default_factory=dict)
    argv: list[str] = field(default_factory=list)


def commands(text: str) -> list[Command]:
    """The commands of a bash block, in order, with variables expanded."""
    variables: dict[str, str] = {}
    found: list[Command] = []
    for line in text.replace("\\\n", " ").splitlines():
        words = shlex.split(line, comments=True)
        for part in _split(words, "&&"):
            if bad := [w for w in part if w in _UNSUPPORTED]:
                raise ValueError(f"unsupported shell syntax {bad} in {line!r}")
            part = [_expand(w, variables) for w in part]
            env = {}
            while part and _ASSIGNMENT.match(part[0]):
                name, value = part.pop(0).split("=", 1)
                env[name] = value
            if part:
                found.append(Command(env, part))
            else:
                variables |= env
    return found


def _expand(word: str, variables: dict[str, str]) -> str:
    def value(match: re.Match[str]) -> str:
        name = match[1] or match[2]
        return variables.get(name, os.environ.get(name, ""))

    return _VARIABLE.sub(value, word)


def _split(words: list[str], separator: str) -> list[list[str]]:
    parts: list[list[str]] = [[]]
    for word in words:
        if word == separator:
            parts.append([])
        else:
            parts[-1].append(word)
    return [p for p in parts if p]
