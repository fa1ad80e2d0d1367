"""Saving a W&B view (a `wandb_workspaces` report) once: found by title and updated, else
created, within a time limit (`publish_within`), so a hung connection never holds the command."""

from __future__ import annotations

import threading
from collections.abc import Callable
from dataclasses import dataclass
from typing import Protocol

import wandb_workspaces.reports.v2 as wr

PUBLISH_TIMEOUT_S = 60.0


class ViewStore(Protocol):
    """What publishing needs of W&B; `WandbViewStore` talks to the server, tests pass a fake."""

    def default_entity(self) -> str: ...

    def find(self, entity: str, project: str, title: str) -> str | None:
        """The id of the view with this title in `entity/project`, None if there is none."""

    def save(self, view: wr.Report) -> str:
        """Save `view` (an update when `view.id` is set); its URL."""


class WandbViewStore:
    """The W&B server, through `wandb.Api` (every call bounded by 20 s)."""

    def __init__(self) -> None:
        import wandb

        self.api = wandb.Api(timeout=20)

    def default_entity(self) -> str:
        return str(self.api.default_entity or "")

    def find(self, entity: str, project: str, title: str) -> str | None:
        for report in self.api.reports(f"{entity}/{project}"):
            if report.display_name == title:
                return str(report.id)
        return None

    def save(self, view: wr.Report) -> str:
        return str(view.save().url)


def publish(view: wr.Report, store: ViewStore) -> str:
    """Save `view`, updating the view of the same title if its project has one; its URL."""
    existing = store.find(view.entity, view.project, view.title)
    if existing is not None:
        view.id = existing
    return store.save(view)


@dataclass(frozen=True)
class Published:
    """The saved view's URL, or why it was not saved."""

    url: str = ""
    error: str = ""


def publish_within(
    build: Callable[[str], wr.Report],
    store_factory: Callable[[], ViewStore],
    timeout_s: float = PUBLISH_TIMEOUT_S,
) -> Published:
    """`publish(build(entity), store_factory())` in a worker thread, for at most `timeout_s`."""
    result: list[Published] = []

    def work() -> None:
        try:
            store = store_factory()
            view = build(store.default_entity())
            result.append(Published(url=publish(view, store)))
        except Exception as error:  # reported to the user, who decides what to do
            result.append(Published(error=f"{type(error).__name__}: {error}"))

    worker = threading.Thread(target=work, daemon=True)  # a hung socket must not keep us alive
    worker.start()
    worker.join(timeout_s)
    return result[0] if result else Published(error=f"no answer within {timeout_s:.0f} s")
