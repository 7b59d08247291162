"""The transactional engine: repositories, sessions, change sets and the commit protocol.

Reading order for a newcomer: ``repository`` (open, branches, tags), ``session`` (a view of one
snapshot and the changes made to it), ``commit`` (how changes become a snapshot: build,
publish with compare-and-swap, rebase), then ``conflicts``, ``flush`` (manifests and the
structure file), ``snapshot`` (reading one), ``refs`` (the state file) and ``preload``.
"""
