"""Arguments several commands share, read the same way by each."""

from __future__ import annotations


def shapes_from(folder, args) -> list[dict] | None:
    """--shapes (comma-separated, e.g. 16x4096,64x8192), else --set NAME, else None (the command's default)."""
    if args.shapes:
        return [folder.spec.parse_shape(s) for s in args.shapes.split(",")]
    if args.set:
        if args.set not in folder.spec.shapes:
            raise SystemExit(f"{folder.name} has no shape set {args.set!r}; it has {', '.join(folder.spec.shapes)}")
        return folder.spec.shapes[args.set]
    return None
