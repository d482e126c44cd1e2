"""Provides the `:` command line's vocabulary: command names to binding ids (no Textual here).

A command names an action the way a binding does, so `:launch` does exactly what the launch
key does; a few take an argument (`:filter rank:1`, `:search NCCL`, `:node local1`).
"""

from __future__ import annotations

from dataclasses import dataclass

# command -> the binding id whose action it runs
COMMANDS: dict[str, str] = {
    "launch": "job.launch",
    "teardown": "job.teardown",
    "detach": "job.detach",
    "q": "app.quit",
    "quit": "app.quit",
    "help": "app.help",
    "next": "logs.next",
    "prev": "logs.prev",
    "all": "logs.merged",
    "merged": "logs.merged",
    "follow": "logs.follow",
    "wrap": "logs.wrap",
    "timestamps": "logs.timestamps",
    "ts": "logs.timestamps",
    "w": "logs.save",
    "save": "logs.save",
    "error": "diag.jump_error",
    "top": "logs.top",
    "bottom": "logs.bottom",
    "commands": "job.commands",
    "agent": "logs.agent",
    "fold": "logs.fold",
    "restarts": "elastic.cycles",
    "kill": "elastic.kill_node",
    "drain": "elastic.drain",
    "killrank": "elastic.kill_rank",
    "killgroup": "elastic.kill_group",
}
# commands that take the rest of the line as their argument
ARGUMENT_COMMANDS = ("filter", "search", "node", "goto")


class CommandError(ValueError):
    """Not a command; the message lists the ones there are."""


@dataclass(frozen=True)
class Command:
    """A parsed command line: the binding id to run, or an argument command and its text."""

    name: str
    binding_id: str | None = None
    argument: str = ""


def command_names() -> list[str]:
    return sorted({*COMMANDS, *ARGUMENT_COMMANDS})


def parse_command(line: str) -> Command:
    """`launch`, `:q`, `filter rank:1 boom`, `/NCCL` (a search), `nofilter`, `nosearch`."""
    text = line.strip().removeprefix(":").strip()
    if text.startswith("/"):
        return Command("search", argument=text[1:])
    name, _, rest = text.partition(" ")
    name = name.lower()
    if name in ("nofilter", "nof"):
        return Command("filter")
    if name in ("nosearch", "noh", "nohlsearch"):
        return Command("search")
    if name in ARGUMENT_COMMANDS:
        return Command(name, argument=rest.strip())
    if name in COMMANDS and not rest.strip():
        return Command(name, COMMANDS[name])
    if name in COMMANDS:
        raise CommandError(f":{name} takes no argument")
    known = ", ".join(command_names())
    raise CommandError(f"no command {name!r}: try one of {known}" if name else f"commands: {known}")
