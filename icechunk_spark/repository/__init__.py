"""Repositories: open or create one, start sessions, manage branches, tags, status and history.

``Repository`` is one class, the face users call; its verbs live in rooms by what they touch:
``repository.py`` opening, config and sessions; ``refs.py`` branches, tags and the
repository's status; ``history.py`` history and maintenance. Each stands on ``HandleOwner``
(``base.py``): one open ``RepoHandle`` and its latest state.
"""

from .repository import Repository

__all__ = ["Repository"]
